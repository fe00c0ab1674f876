"""One production-shaped deployment (tests/production/stack.py) per test session: PostgreSQL, Redis,
CeleryExecutor with two workers, on kruise-local. Its tests are marked `production` (deselect them locally
with `-m "not production"`); CI runs them, and a missing PostgreSQL or Redis fails them rather than
skipping."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from kruise_local import ClusterConfig, LocalCluster

from tests.airflow.stack import ROOT
from tests.production.stack import ProductionStack


@pytest.fixture(scope="session")
def production_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionStack]:
    work = tmp_path_factory.mktemp("production-stack")
    (work / "dags").mkdir()
    shutil.copy(ROOT / "example_dags" / "example_kruise_chain.py", work / "dags")
    with LocalCluster(ClusterConfig(profile="fast", root=str(work / "cluster"))) as cluster:
        stack = ProductionStack(work, cluster, cluster.write_kubeconfig(work / "kubeconfig"))
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()
