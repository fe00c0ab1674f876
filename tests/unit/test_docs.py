"""Every code block of README.md and docs/*.md is run or parsed here, and the pages hold together.

How a block is tested follows its language and an optional marker on the line before its fence,
``<!-- docs-test: MARKER -->``:

- ``python``: parsed as a DAG file with a DagBag (no import error, at least one DAG); marker ``run on the
  local cluster``: also run with ``dag.test()`` on a fresh local cluster, every task succeeding; marker ``run
  as a script with the argument scheduler``: run with ``python - scheduler``.
- ``bash``: run with ``bash -euo pipefail`` from the checkout, with a private AIRFLOW_HOME and
  KRUISE_LOCAL_HOME; marker ``run against the local cluster``: with $KUBECONFIG naming a local cluster;
  marker ``provider-installed``: the same (it needs this package installed, as the test
  venv has it); marker ``run in order against a local cluster with RBAC``: every such block of a page, in
  order, as one script, in a folder holding a copy of deploy/, with $KUBECONFIG the admin's of a fresh local
  cluster that authorizes by RBAC and serves TLS (so kubectl sends tokens); marker ``options only:
  REASON``: each ``python SCRIPT --options`` line's script answers ``--help`` naming every option; marker
  ``skip: REASON``: not runnable here, REASON says why.
- ``ini``: an `airflow.cfg` excerpt: every option of `[kruise_chain]` exists (`get_provider_info`).
- anything else fails: add a way to test it here.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests import doc_tables
from tests.e2e.conftest import airflow_home, e2e_cluster, xcoms  # noqa: F401  (fixtures of the DAG run below)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<marker>[^\n]*?) -->\n)?```(?P<lang>[^\n]*)\n(?P<code>.*?)^```$", re.S | re.M
)
MARKERS = (
    "run on the local cluster",
    "run as a script with the argument scheduler",
    "provider-installed",
    "run against the local cluster",
    "run in order against a local cluster with RBAC",
)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    marker: str
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start("lang")) + 1
            found.append(Block(page, line, m.group("lang").strip(), m.group("marker") or "", m.group("code")))
    return found


BLOCKS = _blocks()


def _of(lang: str) -> list[Block]:
    return [b for b in BLOCKS if b.lang == lang]


def _ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


def test_every_block_has_a_language_and_a_known_marker() -> None:
    assert len(BLOCKS) >= 10
    for block in BLOCKS:
        assert block.lang in ("python", "bash", "ini"), f"{block.id}: no way to test a {block.lang!r} block"
        marker = block.marker
        if marker.startswith(("skip:", "options only:")):
            assert len(marker.split(":", 1)[1].strip()) > 10, f"{block.id}: say why it is not run"
        else:
            assert marker in ("", *MARKERS), f"{block.id}: unknown marker {marker!r}"


def _parse_dags(tmp_path: Path, code: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "doc_dag.py"
    path.write_text(code)
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    assert bag.dags, "the block defines no DAG"
    return bag.dags


@pytest.mark.parametrize(
    "block", [b for b in _of("python") if not b.marker], ids=_ids([b for b in _of("python") if not b.marker])
)
def test_python_blocks_are_dags_that_parse(block: Block, tmp_path: Path) -> None:
    _parse_dags(tmp_path, block.code)


@pytest.mark.parametrize("block", [b for b in _of("python") if b.marker.startswith("run as a script")])
def test_python_scripts_run(block: Block) -> None:
    done = subprocess.run(
        [sys.executable, "-", "scheduler"], input=block.code, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{block.id}: {done.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in _of("python") if b.marker == "run on the local cluster"])
def test_python_dags_run_on_the_local_cluster(block: Block, e2e_cluster, tmp_path: Path) -> None:  # noqa: F811
    from tests.e2e.inline import run_inline, task_states

    (dag,) = _parse_dags(tmp_path, block.code).values()
    run = run_inline(dag)
    states = {task: state for task, (state, _, _) in task_states(run).items()}
    assert str(run.state) == "success", states
    assert set(states.values()) == {"success"}, states
    if dag.dag_id == "first_chain":  # README.md says what the second stage's result holds
        assert xcoms(run)["hello.read"]["outputs"] == {"chars": 13}
    if dag.dag_id == "taskflow_chain":  # docs/writing-chains.md: the functions' return values
        assert xcoms(run)["numbers.total"] == {"sum": 60, "median": 15}


def _bash_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{tmp_path}/airflow.db",
        KRUISE_LOCAL_HOME=str(tmp_path / "kruise-local"),
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
    )
    return env


RUN_BASH = [b for b in _of("bash") if b.marker in ("", "provider-installed", "run against the local cluster")]


@pytest.mark.parametrize("block", RUN_BASH, ids=_ids(RUN_BASH))
def test_bash_blocks_run(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = _bash_env(tmp_path)
    if block.marker == "run against the local cluster":
        env["KUBECONFIG"] = str(request.getfixturevalue("kubeconfig"))
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        if "kruise-local up" in block.code:  # never leave a cluster behind a failed block
            subprocess.run(["kruise-local", "down"], env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, f"{block.id}:\n{done.stdout}\n{done.stderr}"


IN_ORDER = "run in order against a local cluster with RBAC"
IN_ORDER_PAGES = sorted({b.page for b in _of("bash") if b.marker == IN_ORDER})


@pytest.mark.parametrize("page", IN_ORDER_PAGES, ids=[p.name for p in IN_ORDER_PAGES])
def test_pages_run_in_order_against_a_local_cluster_with_rbac(page: Path, tmp_path: Path) -> None:
    import shutil

    from kruise_local import ClusterConfig, LocalCluster

    blocks = [b for b in _of("bash") if b.page == page and b.marker == IN_ORDER]
    script = "\n".join(f"echo '### {b.id}'\n{b.code}" for b in blocks)
    work = tmp_path / "work"
    shutil.copytree(ROOT / "deploy", work / "deploy")
    config = ClusterConfig(
        profile="fast", root=str(tmp_path / "cluster"), tls=True, authorization_mode="RBAC"
    )
    with LocalCluster(config) as cluster:
        env = _bash_env(tmp_path)
        env.update(KUBECONFIG=str(cluster.write_kubeconfig(tmp_path / "admin")), HOME=str(tmp_path / "home"))
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, f"{page.name}:\n{done.stdout}\n{done.stderr}"


OPTIONS_ONLY = [b for b in _of("bash") if b.marker.startswith("options only:")]


@pytest.mark.parametrize("block", OPTIONS_ONLY, ids=_ids(OPTIONS_ONLY))
def test_long_commands_name_scripts_and_options_that_exist(block: Block) -> None:
    helps: dict[str, str] = {}
    for line in block.code.splitlines():
        command = line.split("#", 1)[0].split()
        if not command:
            continue
        assert command[0] == "python", f"{block.id}: {line!r}"
        script = command[1]
        if script not in helps:
            done = subprocess.run(
                [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, f"{block.id}: {script} --help: {done.stderr}"
            helps[script] = done.stdout
        for option in (word for word in command[2:] if word.startswith("--")):
            assert option in helps[script], f"{block.id}: {script} has no option {option}"


@pytest.mark.parametrize("block", _of("ini"), ids=_ids(_of("ini")))
def test_ini_blocks_name_real_options(block: Block) -> None:
    from airflow_kruise_chain import get_provider_info

    known = get_provider_info()["config"]
    parser = configparser.ConfigParser()
    parser.read_string(block.code)
    for section in parser.sections():
        assert section in known, f"{block.id}: [{section}] is not this provider's"
        for option in parser.options(section):
            assert option in known[section]["options"], f"{block.id}: no option {section}.{option}"


def test_the_option_and_xcom_tables_are_generated_from_the_code() -> None:
    for doc in doc_tables.DOCS:
        text = doc.read_text()
        assert doc_tables.render(text, doc) == text, f"run `python -m tests.doc_tables`, commit {doc.name}"


def test_the_xcom_table_lists_every_key_of_a_result() -> None:
    """The generated table and `to_xcom` come from one definition: every key the XCom holds has its row."""
    from airflow_kruise_chain.core.status import StageResult

    now = datetime.now(UTC)
    result = StageResult("s", 1, "slot-a", "i:1", 0, "completed", now, now, 0.0)
    table = doc_tables.WRITING.read_text().split("<!-- generated: xcom-result -->", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \|", table.split("<!-- end generated -->", 1)[0], re.M)
    assert rows == list(result.to_xcom()) and "detail" in rows


def test_relative_links_lead_to_files_that_exist() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.relative_to(ROOT)}: broken link {target}"


def test_the_readme_is_an_entry_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    for command in ("./dev.sh example", "./dev.sh test"):
        assert command in text
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in text, f"README.md does not link docs/{page.name}"
