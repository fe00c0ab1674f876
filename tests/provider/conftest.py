"""Fixtures for provider tests that call operators, sensors and triggers directly (no DAG run).

Airflow's home and database are set before anything imports Airflow, in tests/conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster


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
