"""The provider's tests. The local cluster's fixtures (`cluster`, `core`, `namespace`...) come from
`kruise_local.pytest_plugin`, loaded for every run (pyproject.toml, pytest addopts).

Airflow binds its configuration and metadata database when it is first imported, which may be while a test
module is collected (tests/provider and tests/e2e import operators at module level). So this conftest, loaded
before any test module, points Airflow at a private home and SQLite file first; the e2e `airflow_home` fixture
migrates that same file (its `airflow db migrate` subprocess inherits AIRFLOW__DATABASE__SQL_ALCHEMY_CONN).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis  # noqa: F401  (see below)
import pytest

ROOT = Path(__file__).resolve().parents[1]

# hypothesis is imported above, while only this thread runs: its pytest plugin otherwise imports it lazily at
# the end of a run, while the local clusters' threads may still be working, and CPython 3.11.7 can then fail
# with "SystemError: AST constructor recursion depth mismatch" after every test passed.

if "airflow" not in __import__("sys").modules:
    _home = tempfile.mkdtemp(prefix="kruise-chain-airflow-")
    atexit.register(shutil.rmtree, _home, True)
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_home}/airflow.db"
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")


LONGEST_FIRST = (
    "tests/production/",
    "tests/airflow/",
    "tests/ui/",
    "tests/e2e/",
    "tests/unit/test_docs.py",
    "kruise-local/tests/apiserver/test_watch_memory.py",
    "tests/provider/test_deferred_output.py",
)
"""Directories whose files run longest (the production-shaped and the plain real Airflow, the UI's runs, DAG
runs), in that order, then the longest files elsewhere (each 110-230 s in `pytest -n 2 --durations=50` of its
folder on the loaded 2-core machine, more than any other file outside those directories): handed out late,
one of them would keep a worker busy while the other has nothing left."""


LAST_IN_THEIR_UNIT = ("tests/airflow/test_deferrable.py", "tests/airflow/test_authoring.py")
"""Files of a `ONE_WORKER` unit run after its other files, in this order. tests/airflow is the critical path
of the suite, and its tests slow down under load by how many task starts they wait for: test_authoring.py's
twenty map indexes take 40 s alone on the quiet machine, 342 s in a loaded -n 4 run (841bb40's, junit;
taskflow 10 s and 63 s) where its file ran first, while the run queue was 7 to 24 on the 2 cores (vmstat).
The tests that mostly wait on their stages' sleeps and gates (2-3 times slower loaded) go first, the many
short tasks last, when the other workers have finished."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadfile --no-loadscope-reorder` (./dev.sh test), hand out the longest files
    first, so that the workers end on short ones rather than one worker on a long file. A single process keeps
    the usual order."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = Path(item.path).relative_to(ROOT).as_posix()
        unit = next((i for i, top in enumerate(LONGEST_FIRST) if path.startswith(top)), len(LONGEST_FIRST))
        return unit, next((i + 1 for i, late in enumerate(LAST_IN_THEIR_UNIT) if path == late), 0)

    items.sort(key=rank)  # stable: each file's tests keep their order


ONE_WORKER = ("tests/airflow/", "tests/production/")
"""Folders whose files share a session fixture too costly to start on each worker: tests/airflow's files
share one real Airflow (`airflow_stack`: four components on a fresh database), tests/production's one
production-shaped deployment (`production_stack`: PostgreSQL, Redis, two Celery workers and Airflow's
components), which each pytest-xdist worker that runs one of them would start for itself (two production
stacks ran at once when its two files went to different workers)."""


def xdist_scope(nodeid: str) -> str:
    """The unit of work `--dist loadfile` hands a worker: the test's file, or the whole `ONE_WORKER` folder
    it is in."""
    path = nodeid.split("::", 1)[0]
    return next((folder for folder in ONE_WORKER if path.startswith(folder)), path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile`, with each `ONE_WORKER` folder one unit (`xdist_scope`)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FoldersOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return FoldersOnOneWorker(config, log)


CRDS = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "kruise-crds"
