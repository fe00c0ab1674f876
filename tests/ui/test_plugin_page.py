"""The chain plugin page in a real API server and headless Chromium, for a finished run of the example DAG.

The example DAG runs to completion on the local cluster (a subprocess, with its own AIRFLOW_HOME and
SQLite database; its pod is deleted by teardown), then `airflow api-server` serves that database with the
SimpleAuthManager (all admins) and Chromium opens the plugin's run page. The screenshot goes to
$UI_ARTIFACTS (default tests/ui/artifacts/).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from kruise_local.testing import wait_for

from tests.helpers import start_airflow, stop_airflow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(os.environ.get("UI_ARTIFACTS") or ROOT / "tests" / "ui" / "artifacts")
DAG_ID = "example_kruise_chain"
STAGES = ["generate", "transform", "aggregate", "report"]

pytestmark = [
    pytest.mark.ui,
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs Debian's chromium and chromium-driver (./dev.sh installs them)",
    ),
]

RUN_DAG = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from run_example import HERE, load_dag, prepare_airflow_home, use_cluster
from kruise_local import ClusterConfig, LocalCluster

work = Path(sys.argv[1])
prepare_airflow_home(work / "airflow")
with LocalCluster(ClusterConfig(profile="fast", root=str(work / "cluster"))) as cluster:
    use_cluster(cluster.write_kubeconfig(work / "kubeconfig"))
    run = load_dag(HERE / "example_kruise_chain.py", "example_kruise_chain").test()
print("RUN " + json.dumps({"run_id": run.run_id, "state": str(run.state)}))
"""


def airflow_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "example_dags"),
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True",
        AIRFLOW__API__EXPOSE_CONFIG="False",
        AIRFLOW__KRUISE_CHAIN__DASHBOARD_URL="https://dashboard.example/#/{namespace}/pods/{pod}",
    )
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(AIRFLOW_HOME, run_id) of a finished, successful run of the example DAG."""
    work = tmp_path_factory.mktemp("ui")
    env = airflow_env(work / "airflow")
    out = subprocess.run(
        [sys.executable, "-c", RUN_DAG, str(work), str(ROOT / "example_dags")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RUN ")), None)
    assert line, f"the example DAG did not report its run:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    run = json.loads(line[4:])
    assert run["state"] == "success", out.stderr[-3000:]
    return work / "airflow", run["run_id"]


@pytest.fixture(scope="module")
def api_server(finished_run: tuple[Path, str]) -> Iterator[str]:
    """Base URL of an `airflow api-server` (one worker) on the finished run's database."""
    home, _ = finished_run
    with running_api_server(home, airflow_env(home)) as base:
        yield base


@contextlib.contextmanager
def running_api_server(home: Path, env: dict[str, str]) -> Iterator[str]:
    """Start `airflow api-server` (one worker) with `env`, logging to `home/api-server.log`; yield its base
    URL once it answers its health check, stop it on exit."""
    port = free_port()
    log = home / "api-server.log"
    proc = start_airflow(["api-server", "-H", "127.0.0.1", "-p", str(port), "-w", "1"], env, log)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            urllib.request.urlopen(f"{base}/api/v2/monitor/health", timeout=10).close()
            return True
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"api-server exited:\n{log.read_text()[-3000:]}") from None
            return False

    try:
        wait_for(up, 90, 0.5, f"the api-server to answer (its log: {log})")
        yield base
    finally:
        stop_airflow([proc])


def test_plugin_is_registered_with_its_views(api_server: str) -> None:
    plugins = get_json(f"{api_server}/api/v2/plugins")["plugins"]
    plugin = next(p for p in plugins if p["name"] == "kruise_chain")
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/kruise-chain"]
    views = {v["url_route"]: v for v in plugin["external_views"]}
    assert views["kruise-chain-run"]["destination"] == "dag_run"
    assert views["kruise-chain-run"]["href"] == "/kruise-chain/runs/{DAG_ID}/{RUN_ID}"
    assert views["kruise-chains"]["destination"] == "nav"


def test_stage_tasks_carry_the_configured_dashboard_link(
    api_server: str, finished_run: tuple[Path, str]
) -> None:
    _, run_id = finished_run
    links = get_json(
        f"{api_server}/api/v2/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/etl.generate/links"
    )["extra_links"]
    assert links["Chain pod"].startswith("https://dashboard.example/#/default/pods/etl-")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium driven by chromedriver (selenium)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_loaded(driver: Any) -> None:
    """Wait until the plugin page (in the current frame) has rendered its data."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.ID, "app").get_attribute("data-loaded") == "true"
    )


def test_run_page_shows_every_stage_with_exit_code_timeline_and_memory(
    api_server: str, finished_run: tuple[Path, str], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    _, run_id = finished_run
    data = get_json(f"{api_server}/kruise-chain/api/runs/{DAG_ID}/{quote(run_id, safe='')}")
    assert data["state"] == "success" and not data["running"]

    browser.get(f"{api_server}/kruise-chain/runs/{DAG_ID}/{quote(run_id, safe='')}")
    wait_loaded(browser)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "kruise-chain-run.png"))
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.stage")
    assert [r.get_attribute("data-stage") for r in rows] == STAGES
    for number, row in enumerate(rows, start=1):
        cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        stage, state, generation, slot, _image, exit_code, _run, memory = cells[:8]
        assert state == "success" and exit_code == "0", cells
        assert (generation, slot) == (str(number), "slot-a" if number % 2 else "slot-b"), cells
        # the peak of the metrics API's readings whose window lies within the stage, with that window, or
        # "not measured" (a stage shorter than the window: the local cluster's fast profile serves 1 s)
        assert memory == "not measured" or re.fullmatch(
            r"[\d.]+ MiB \d\d:\d\d:\d\d" + "\u2013" + r"\d\d:\d\d:\d\d", memory
        ), cells
        phases = [s.get_attribute("class") for s in row.find_elements(By.CSS_SELECTOR, ".bar .seg")]
        assert phases == ["seg swap", "seg pull", "seg run", "seg park"], (stage, phases)
        # the stage links to its task instance's page in Airflow's UI (the log tab), for its try
        link = row.find_element(By.CSS_SELECTOR, "td a").get_attribute("href")
        assert link.endswith(
            f"/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/tasks/etl.{stage}?try_number=1"
        ), link
        assert row.find_element(By.CSS_SELECTOR, "td.failure").text == ""
    # the stage table fits a window as narrow as a DAG run's tab: its timeline column is not cut off
    browser.set_window_size(1000, 900)
    try:
        browser.refresh()
        wait_loaded(browser)
        table = browser.find_element(By.CSS_SELECTOR, "table.stages")
        width = browser.execute_script("return document.documentElement.clientWidth")
        assert table.rect["x"] + table.rect["width"] <= width, (table.rect, width)
    finally:
        browser.set_window_size(1400, 900)
    # the pod is gone (teardown): the slots show what the last two stages left in them
    slots = {
        r.get_attribute("data-slot"): r.find_elements(By.TAG_NAME, "td")[1].text
        for r in browser.find_elements(By.CSS_SELECTOR, "tr.slot")
    }
    assert slots == {"slot-a": "aggregate", "slot-b": "report"}
    assert "not read: the DAG run has ended" in browser.find_element(By.TAG_NAME, "body").text


def test_dag_run_page_of_the_airflow_ui_has_the_chain_tab(
    api_server: str, finished_run: tuple[Path, str], browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _, run_id = finished_run
    browser.get(f"{api_server}/dags/{DAG_ID}/runs/{quote(run_id, safe='')}/plugin/kruise-chain-run")
    frame = WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
    assert "/kruise-chain/runs/" in frame.get_attribute("src")
    browser.switch_to.frame(frame)
    try:
        wait_loaded(browser)
        assert len(browser.find_elements(By.CSS_SELECTOR, "tr.stage")) == len(STAGES)
    finally:
        browser.switch_to.default_content()
    browser.save_screenshot(str(ARTIFACTS / "airflow-dag-run-chain-tab.png"))
