"""Under `./dev.sh test` (`pytest -n 4 --dist loadfile`), the files of tests/airflow, and those of
tests/production, run on one worker, so that their session's real Airflow (`airflow_stack`,
`production_stack`) starts once, not on each worker (tests/conftest.py
`pytest_xdist_make_scheduler`); every other file is a unit of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import ROOT, pytest_collection_modifyitems, xdist_scope

RECORD = """
import os, pathlib
def test_{name}():
    pathlib.Path(__file__).with_suffix(".worker").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_one_worker_folder_is_one_unit_and_other_files_their_own() -> None:
    assert xdist_scope("tests/airflow/test_scheduler.py::test_x") == "tests/airflow/"
    assert xdist_scope("tests/airflow/test_operations.py::test_y[a-b]") == "tests/airflow/"
    assert xdist_scope("tests/production/test_celery.py::test_w") == "tests/production/"
    assert xdist_scope("tests/production/test_celery_deferrable.py::test_v") == "tests/production/"
    assert xdist_scope("tests/e2e/test_prepare.py::test_z") == "tests/e2e/test_prepare.py"
    assert (
        xdist_scope("kruise-local/tests/apiserver/test_fuzz_api.py::t")
        == "kruise-local/tests/apiserver/test_fuzz_api.py"
    )


def test_the_scheduler_sends_a_one_worker_folder_to_one_worker(tmp_path: Path) -> None:
    """Six files under tests/airflow and six elsewhere, on two workers: the six share one."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.conftest import pytest_xdist_make_scheduler  # noqa: F401\n"
    )
    for folder in ("airflow", "other"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
        for k in range(6):
            (tmp_path / "tests" / folder / f"test_{folder}_{k}.py").write_text(RECORD.format(name=k))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers = {
        folder: {p.read_text() for p in (tmp_path / "tests" / folder).glob("*.worker")}
        for folder in ("airflow", "other")
    }
    assert len(workers["airflow"]) == 1, workers
    assert sum(1 for _ in (tmp_path / "tests").rglob("*.worker")) == 12


def test_a_units_late_files_are_handed_out_after_its_other_files() -> None:
    """tests/airflow's many-short-task files run last in their unit (`LAST_IN_THEIR_UNIT`), the units keep
    their `LONGEST_FIRST` order and each file its tests' order; a single process keeps the usual order."""
    files = [
        "tests/airflow/test_authoring.py",
        "tests/airflow/test_deferrable.py",
        "tests/airflow/test_operations.py",
        "tests/airflow/test_scheduler.py",
        "tests/production/test_celery.py",
        "tests/unit/test_layout.py",
    ]
    items = [SimpleNamespace(path=ROOT / f, name=f"{f}::{k}") for f in files for k in (1, 2)]
    single = list(items)
    pytest_collection_modifyitems(SimpleNamespace(), single)  # type: ignore[arg-type]
    assert single == items
    pytest_collection_modifyitems(SimpleNamespace(workerinput={}), items)  # type: ignore[arg-type]
    order = [item.name.split("/", 1)[1] for item in items]
    assert order == [
        f"{f}::{k}"
        for f in (
            "production/test_celery.py",
            "airflow/test_operations.py",
            "airflow/test_scheduler.py",
            "airflow/test_deferrable.py",
            "airflow/test_authoring.py",
            "unit/test_layout.py",
        )
        for k in (1, 2)
    ]
