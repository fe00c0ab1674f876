"""One `airflow_stack` (tests/airflow/stack.py) per test session, shared by the modules (each test uses DAGs
of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.airflow.stack import AirflowStack, running_stack


@pytest.fixture(scope="session")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    # preimport: docs/running.md's "Task start-up", the scheduler (whose LocalExecutor workers fork the task
    # processes) and the triggerer import the Kubernetes clients once, not each task process. Twenty map
    # indexes (test_authoring.py's DAG, alone on the quiet machine) took 39.3 s and 19.5 s of the scheduler's
    # CPU with its task processes, 20.8 s and 6.9 s with it; tests/production and bench/scheduler.py (unless
    # --preimport) run without it
    with running_stack(AirflowStack, tmp_path_factory.mktemp("airflow-stack"), preimport=True) as stack:
        yield stack
