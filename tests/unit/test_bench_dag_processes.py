"""bench/dag_processes.py: the pipelines benchmark's DAG processes run as a deployment's task processes do."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import REPO
from bench.dag_processes import child_env


def test_the_dag_processes_write_and_read_bytecode_caches_as_a_deployment_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """PYTHONDONTWRITEBYTECODE (set on this machine) had every DAG process compile each module it imported
    that had no cache (the provider's, the Kubernetes clients' without one), ten at once in the concurrency
    rows: no deployment pays that (`bench.deployment_environment`)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = child_env(tmp_path, tmp_path / "kubeconfig")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPATH"] == f"{REPO}:/elsewhere"
    assert env["AIRFLOW_HOME"] == str(tmp_path)
    assert '"kube_config_path": "' + str(tmp_path / "kubeconfig") in env["AIRFLOW_CONN_KUBERNETES_DEFAULT"]
