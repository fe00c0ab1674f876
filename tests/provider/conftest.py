"""Fixtures for provider tests that call operators, sensors and triggers directly (no DAG run).

Airflow binds its configuration and metadata database when it is first imported. These tests import it, and
they may be collected before tests/e2e, whose `airflow_home` fixture sets AIRFLOW_HOME only when its first
test runs. So this module points Airflow at a private home and SQLite file *before* anything imports it;
the e2e fixture then migrates that same file (its `airflow db migrate` subprocess inherits
AIRFLOW__DATABASE__SQL_ALCHEMY_CONN), whichever order the two folders run in.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_kruise_chain.local import ClusterConfig, LocalCluster

ROOT = Path(__file__).resolve().parents[2]

if "airflow" not in __import__("sys").modules:
    _home = tempfile.mkdtemp(prefix="kruise-chain-airflow-")
    atexit.register(shutil.rmtree, _home, True)
    os.environ["AIRFLOW_HOME"] = _home
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{_home}/airflow.db"
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")


@pytest.fixture
def kube_env(cluster: LocalCluster, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    """The session cluster as the `kubernetes_default` connection."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
    )
    return cluster


@pytest.fixture
def fresh_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    """A cluster of this test's own (its audit log holds this test's writes only), as `kubernetes_default`."""
    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "cluster"))) as c:
        kubeconfig = c.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
        )
        yield c
