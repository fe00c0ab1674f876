"""One `airflow_stack` (tests/airflow/stack.py) per test session, shared by the modules (each test uses DAGs
of its own)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from kruise_local import ClusterConfig, LocalCluster

from tests.airflow.stack import ROOT, AirflowStack


@pytest.fixture(scope="session")
def airflow_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowStack]:
    work = tmp_path_factory.mktemp("airflow-stack")
    (work / "dags").mkdir()
    shutil.copy(ROOT / "example_dags" / "example_kruise_chain.py", work / "dags")
    with LocalCluster(ClusterConfig(profile="fast", root=str(work / "cluster"))) as cluster:
        stack = AirflowStack(work, cluster, cluster.write_kubeconfig(work / "kubeconfig"))
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()
