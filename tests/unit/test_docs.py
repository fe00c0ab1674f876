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
  order, as one script (`tests/doc_pages.py`, which also says what ``; saved as PATH``, ``; variant NAME`` and
  ``real cluster only: REASON`` mean), in a folder holding a copy of deploy/, with $KUBECONFIG the admin's of
  a fresh local cluster that authorizes by RBAC and serves TLS (so kubectl sends tokens), once without the
  page's optional steps and once with each; marker ``options only:
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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests import doc_pages, doc_tables
from tests.doc_pages import Block
from tests.e2e.conftest import airflow_home, e2e_cluster, xcoms  # noqa: F401  (fixtures of the DAG run below)

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = (
    "run on the local cluster",
    "run as a script with the argument scheduler",
    "provider-installed",
    "run against the local cluster",
    "run in order against a local cluster with RBAC",
)
BLOCKS = [block for page in PAGES for block in doc_pages.page_blocks(page)]


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
        elif doc_pages.step(block) is None:  # ValueError for a run-in-order marker it cannot follow
            assert marker in ("", *MARKERS), f"{block.id}: unknown marker {marker!r}"


def _parse_dags(tmp_path: Path, code: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_path / "doc_dag.py"
    path.write_text(code)
    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    assert bag.dags, "the block defines no DAG"
    return bag.dags


def _saved(block: Block) -> bool:
    step = doc_pages.step(block)
    return step is not None and step.saved_as is not None


DAG_FILES = [b for b in _of("python") if not b.marker or _saved(b)]


@pytest.mark.parametrize("block", DAG_FILES, ids=_ids(DAG_FILES))
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
    if dag.dag_id == "mapped_chain":  # docs/writing-chains.md: 1 + 2 + 3 + 4 lines over four map indexes
        assert xcoms(run)["parts.total"] == 10


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


IN_ORDER_PAGES = sorted({b.page for b in BLOCKS if doc_pages.step(b) is not None})
IN_ORDER_RUNS = [(page, v) for page in IN_ORDER_PAGES for v in ("default", *doc_pages.variants_of(page))]
MIRROR = "registry.example.com/library/busybox:1.37.0-musl"
"""the runner image's copy in a mirror, as docs/getting-started-cluster.md's optional step names it"""


def _mirror_only(cluster) -> None:
    """Variant `mirror`: the nodes pull the stage runner from the mirror only. The registry holds the default
    runner image under the mirror's name, and no longer under its own: a chain that ignored the option would
    fail its setup on the pull."""
    from importlib import resources

    import yaml
    from kruise_local.imageref import normalize

    from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE

    shipped = yaml.safe_load(resources.files("kruise_local").joinpath("images.yaml").read_text())["images"]
    (entry,) = [e for e in shipped if normalize(e["ref"]) == normalize(DEFAULT_RUNNER_IMAGE)]
    cluster.catalogue.remove(DEFAULT_RUNNER_IMAGE)
    cluster.catalogue.add({**entry, "ref": MIRROR})
    assert cluster.catalogue.lookup(DEFAULT_RUNNER_IMAGE) is None and cluster.catalogue.lookup(MIRROR)


CLUSTER_OF_VARIANT: dict[str, Callable[..., None]] = {"mirror": _mirror_only}


@pytest.fixture(scope="module")
def migrated_airflow_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated Airflow database, copied by each page run that calls `airflow` (a fresh one each)."""
    work = tmp_path_factory.mktemp("airflow-template")
    env = doc_pages.environment(work, work / "no-kubeconfig", os.environ)
    doc_pages.migrate(env)
    return work / "airflow" / "airflow.db"


@pytest.mark.slow
@pytest.mark.parametrize(("page", "variant"), IN_ORDER_RUNS, ids=[f"{p.name}-{v}" for p, v in IN_ORDER_RUNS])
def test_pages_run_in_order_against_a_local_cluster_with_rbac(
    page: Path, variant: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from kruise_local import ClusterConfig, LocalCluster

    variants = () if variant == "default" else (variant,)
    steps = doc_pages.steps(page, variants)
    airflow_db = request.getfixturevalue("migrated_airflow_db") if doc_pages.needs_airflow(steps) else None
    config = ClusterConfig(
        profile="fast", root=str(tmp_path / "cluster"), tls=True, authorization_mode="RBAC"
    )
    with LocalCluster(config) as cluster:
        CLUSTER_OF_VARIANT.get(variant, lambda _: None)(cluster)
        done = doc_pages.run(
            page,
            cluster.write_kubeconfig(tmp_path / "admin"),
            tmp_path / "work",
            variants=variants,
            airflow_db=airflow_db,
        )
    assert done.returncode == 0, f"{page.name} ({variant}):\n{done.stdout}\n{done.stderr}"


def test_the_mirror_variant_names_the_mirror_the_cluster_serves() -> None:
    page = ROOT / "docs" / "getting-started-cluster.md"
    assert "mirror" in doc_pages.variants_of(page)
    (mirror,) = [s for s in doc_pages.steps(page, ["mirror"]) if s.variant == "mirror"]
    assert f"AIRFLOW__KRUISE_CHAIN__RUNNER_IMAGE={MIRROR}" in mirror.block.code


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
