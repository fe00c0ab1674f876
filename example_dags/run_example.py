"""Run the example DAG end to end on the embedded local cluster: no Kubernetes cluster needed.

Starts kruise-local in-process, points Airflow's `kubernetes_default` connection at it, runs
`example_kruise_chain` with `dag.test()`, and prints what the API server saw.
Usage: python example_dags/run_example.py [--profile fast|realistic]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def prepare_airflow_home(home: Path) -> None:
    """A throwaway AIRFLOW_HOME with an SQLite metadata database."""
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(HERE))
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
    if not (home / "airflow.db").exists():
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], check=True, stdout=subprocess.DEVNULL
        )


def use_cluster(kubeconfig: Path) -> None:
    """Point the cncf.kubernetes `kubernetes_default` connection at a kubeconfig."""
    os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
    )


def load_dag(path: Path, dag_id: str):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag if module.dag.dag_id == dag_id else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", choices=["fast", "realistic"], default="fast")
    args = parser.parse_args()
    from kruise_local import ClusterConfig, LocalCluster

    work = Path(tempfile.mkdtemp(prefix="kruise-chain-example-"))
    prepare_airflow_home(work / "airflow")
    with LocalCluster(ClusterConfig(profile=args.profile, root=str(work / "cluster"))) as cluster:
        use_cluster(cluster.write_kubeconfig(work / "kubeconfig"))
        dag = load_dag(HERE / "example_kruise_chain.py", "example_kruise_chain")
        run = dag.test()
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        pods = [p for m, p, c in cluster.audit if m == "POST" and p.endswith("/pods") and c == 201]
        print("\n== example_kruise_chain on kruise-local ==")
        print(f"dag run: {run.state}")
        for task, state in sorted(states.items()):
            print(f"  {task:22s} {state}")
        print(f"pods created: {len(pods)}; API requests: {cluster.server.requests}")
        return 0 if str(run.state) == "success" else 1


if __name__ == "__main__":
    sys.exit(main())
