"""Shared fixtures: one local cluster per test session, reached through the real `kubernetes` client.

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
import uuid
from collections.abc import Iterator
from pathlib import Path

import hypothesis  # noqa: F401  (see below)
import pytest
from kubernetes import client, config

from airflow_kruise_chain.local import ClusterConfig, LocalCluster

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


LONGEST_FIRST = ("tests/airflow/", "tests/ui/", "tests/e2e/")
"""Directories whose files run longest (a real Airflow, the UI's runs, DAG runs), in that order."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `pytest -n N --dist loadfile --no-loadscope-reorder` (./dev.sh test), hand out the longest files
    first, so that the workers end on short ones rather than one worker on a long file. A single process keeps
    the usual order."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item: pytest.Item) -> int:
        path = Path(item.path).relative_to(ROOT).as_posix()
        return next((i for i, top in enumerate(LONGEST_FIRST) if path.startswith(top)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: each file's tests keep their order


CRDS = Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "kruise-crds"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(ClusterConfig(profile="fast", nodes=1, root=str(tmp_path_factory.mktemp("cluster"))))
    c.start()
    c.kubelet.volume_retry = 0.2
    yield c
    c.stop()


@pytest.fixture(scope="session")
def kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
