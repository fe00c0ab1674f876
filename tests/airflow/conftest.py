"""One `airflow_stack` (tests/airflow/stack.py) per test session, shared by the modules (each test uses DAGs
of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.airflow.stack import AirflowStack, running_stack


@pytest.fixture(scope="session")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    with running_stack(AirflowStack, tmp_path_factory.mktemp("airflow-stack")) as stack:
        yield stack
