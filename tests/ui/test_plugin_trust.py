"""The chain plugin against hostile DAG code and run ids (issue 12, items 2 and 7), in a real API server.

A DAG's task pushes a `chain_state` XCom naming a kubeconfig whose exec plugin would create a file: the API
server must never load it (it reads only the database, or a connection an Airflow operator configured). Its
two DAG runs are renamed to hostile run ids (HTML markup, `?`, `#`, `/`), and left "running" so that the page
would read the live pod. The API server runs with the SimpleAuthManager and real users: every plugin route
needs authentication. Headless Chromium opens the hostile run's page: no markup from the run id runs, and the
page fetches its own run, not the one its id starts with.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.ui.test_plugin_page import CHROMEDRIVER, CHROMIUM, ROOT, running_api_server

pytestmark = [pytest.mark.ui, pytest.mark.slow]

DAG_ID = "hostile_plugin"
PREFIX_RUN = 'evil"><img src=x onerror="document.title=\'pwned\'">'
HOSTILE_RUN = PREFIX_RUN + "?run=other#frag/more"
"""the hostile run id; `PREFIX_RUN`, the part before its `?`, is another run of the same DAG"""

DAG_FILE = """
import pendulum
from airflow.sdk import DAG, task

EVIL = {evil!r}

with DAG("hostile_plugin", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task(task_id="push")
    def push(ti=None):
        ti.xcom_push(key="chain_state", value={{
            "chain": "c", "namespace": "default", "pod": "c-0123456789", "stage": "s", "slot": "slot-a",
            "generation": 1, "image": "busybox:1.36", "try_number": 1, "action": "patch", "state": "running",
            "connection": {{"kubernetes_conn_id": None, "config_file": EVIL, "cluster_context": None,
                            "in_cluster": False}},
        }})

    push()
"""

RUN_TWICE = """
import sys
from datetime import datetime, timezone
sys.path.insert(0, sys.argv[2])
from run_example import load_dag, prepare_airflow_home
from pathlib import Path

prepare_airflow_home(Path(sys.argv[1]))
dag = load_dag(Path(sys.argv[3]), "hostile_plugin")
for day in (1, 2):
    run = dag.test(logical_date=datetime(2026, 1, day, tzinfo=timezone.utc))
    print("RUN", run.run_id, run.state)
"""


def airflow_env(home: Path, dags: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__UNIT_TEST_MODE="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
        AIRFLOW__API__EXPOSE_CONFIG="False",
    )
    return env


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An Airflow home holding the two hostile runs (state running), and the exec plugin's marker path."""
    work = tmp_path_factory.mktemp("trust")
    marker = work / "exec-plugin-ran"
    credential = {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}
    credential["status"] = {"token": "stolen"}
    kubeconfig = work / "evil-kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1beta1",
                                "command": "/bin/sh",
                                "args": ["-c", f"touch {marker}; echo '{json.dumps(credential)}'"],
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    dags = work / "dags"
    dags.mkdir()
    (dags / "hostile_plugin.py").write_text(DAG_FILE.format(evil=str(kubeconfig)))
    home = work / "airflow"
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_TWICE,
            str(home),
            str(ROOT / "example_dags"),
            str(dags / "hostile_plugin.py"),
        ],
        env=airflow_env(home, dags),
        capture_output=True,
        text=True,
        timeout=300,
    )
    runs = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("RUN ")]
    assert len(runs) == 2, f"{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    assert not marker.exists()  # the task itself never loads the kubeconfig
    with sqlite3.connect(home / "airflow.db") as db:  # no foreign key checks: rename the run everywhere
        tables = [row[0] for row in db.execute("select name from sqlite_master where type = 'table'")]
        for old, new in zip(runs, (HOSTILE_RUN, PREFIX_RUN), strict=True):
            for table in tables:
                if any(col[1] == "run_id" for col in db.execute(f"pragma table_info('{table}')")):
                    db.execute(f"update '{table}' set run_id = ? where run_id = ?", (new, old))
        db.execute("update dag_run set state = 'running', end_date = null")
    return {"home": home, "dags": dags, "marker": marker}


@pytest.fixture(scope="module")
def api_server(hostile: dict[str, Path]) -> Iterator[str]:
    home = hostile["home"]
    with running_api_server(home, airflow_env(home, hostile["dags"])) as base:
        yield base


@pytest.fixture(scope="module")
def token(api_server: str, hostile: dict[str, Path]) -> str:
    passwords = json.loads((hostile["home"] / "simple_auth_manager_passwords.json.generated").read_text())
    request = urllib.request.Request(
        f"{api_server}/auth/token",
        data=json.dumps({"username": "admin", "password": passwords["admin"]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())["access_token"]


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def routes() -> list[str]:
    run = quote(HOSTILE_RUN, safe="")
    return [
        "/kruise-chain/",
        "/kruise-chain/api/runs",
        f"/kruise-chain/runs/{DAG_ID}/{run}",
        f"/kruise-chain/api/runs/{DAG_ID}/{run}",
    ]


@pytest.mark.parametrize("route", routes())
def test_every_route_needs_authentication(api_server: str, token: str, route: str) -> None:
    status, body = get(api_server + route)
    assert status in (401, 403), (status, body[:300])
    status, body = get(api_server + route, token)
    assert status == 200, (status, body[:300])


def test_an_xcom_named_kubeconfig_is_never_loaded(
    api_server: str, token: str, hostile: dict[str, Path]
) -> None:
    status, body = get(f"{api_server}/kruise-chain/api/runs/{DAG_ID}/{quote(HOSTILE_RUN, safe='')}", token)
    assert status == 200, body[:300]
    data = json.loads(body)
    assert data["running"] is True  # the page would read the live pod...
    assert not hostile["marker"].exists()  # ...but not with the credentials the XCom named
    chain = data["chains"][0]
    assert chain["live"] is False and "connection" not in chain["stages"][0]
    log = (hostile["home"] / "api-server.log").read_text()
    assert "evil-kubeconfig" not in log


def test_the_run_page_escapes_and_encodes_the_run_id(api_server: str, token: str) -> None:
    status, body = get(f"{api_server}/kruise-chain/runs/{DAG_ID}/{quote(HOSTILE_RUN, safe='')}", token)
    assert status == 200
    page = body.decode()
    assert "<img" not in page  # the run id's markup is not in the HTML
    api = re.search(r'data-api="([^"]*)"', page)
    assert api, page[:2000]
    url = html.unescape(api.group(1))
    assert url == f"/kruise-chain/api/runs/{DAG_ID}/{quote(HOSTILE_RUN, safe='')}"
    status, body = get(api_server + url, token)
    assert json.loads(body)["run_id"] == HOSTILE_RUN  # the page's data is its own run's...
    status, body = get(f"{api_server}/kruise-chain/api/runs/{DAG_ID}/{quote(PREFIX_RUN, safe='')}", token)
    assert json.loads(body)["run_id"] == PREFIX_RUN  # ...not the run whose id is its prefix


@pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (./dev.sh installs them)",
)
def test_in_chromium_the_hostile_run_id_is_shown_as_text(api_server: str, token: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver: Any = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(f"{api_server}/api/v2/monitor/health")
        driver.add_cookie({"name": "_token", "value": token, "path": "/"})
        driver.get(f"{api_server}/kruise-chain/runs/{DAG_ID}/{quote(HOSTILE_RUN, safe='')}")
        WebDriverWait(driver, 30).until(
            lambda d: d.find_element(By.ID, "app").get_attribute("data-loaded") == "true"
        )
        assert driver.title == "Kruise chains"  # the onerror handler never ran
        assert driver.find_elements(By.TAG_NAME, "img") == []
        shown = driver.find_element(By.CSS_SELECTOR, "h1 .muted").text
        assert shown == HOSTILE_RUN  # its own run, the id as text
    finally:
        driver.quit()
