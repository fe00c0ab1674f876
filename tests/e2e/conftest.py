"""Fixtures for end-to-end DAG runs: an Airflow home with an SQLite database and a fresh local cluster."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("airflow")
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    return home


def connected_cluster(tmp_path: Path, profile: str = "fast") -> Iterator[LocalCluster]:
    """A fresh cluster of the kubelet `profile`, the Airflow connection pointed at it while it runs."""
    with LocalCluster(ClusterConfig(profile=profile, root=str(tmp_path / "cluster"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
        yield cluster
        os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


@pytest.fixture
def e2e_cluster(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    """A fresh cluster per DAG run, so its records hold that run only."""
    yield from connected_cluster(tmp_path)


def connect_as(
    cluster: LocalCluster,
    folder: Path,
    rules: list[dict[str, Any]],
    account: tuple[str, str] = ("default", "airflow"),
    namespace: str = "default",
) -> Path:
    """Turn RBAC on and make the Airflow connection the ServiceAccount `account` (namespace, name), bound to a
    Role of `rules` in `namespace`, with a token of it: the kubeconfig it uses."""
    from kruise_local.testing import service_account_token
    from kubernetes import config

    cluster.enable_rbac()
    admin = config.new_client_from_config(str(cluster.write_kubeconfig(folder / "kubeconfig-admin")))
    token = service_account_token(admin, *account, rules, role_namespace=namespace)
    kubeconfig = cluster.write_kubeconfig(folder / "kubeconfig-sa", token=token)
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
    )
    return kubeconfig


def load_dag(path: Path, attribute: str = "dag") -> Any:
    spec = importlib.util.spec_from_file_location(f"dag_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attribute)


def xcoms(run: Any, key: str = "return_value") -> dict[str, Any]:
    """task_id -> XCom value of a finished dag.test() run."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key=key)).all()
        return {row.task_id: XComModel.deserialize_value(row) for row in rows}
