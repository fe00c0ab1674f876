"""How long the chain's setup takes to fail, naming the Secret, when a stage reads a Secret that does not
exist (issue 36: it waited out the 300 s startup timeout and named `PodInitializing`). Each run is one setup
of a fresh one-stage chain on a local cluster, from `execute` to its `PodStartError`; the first run also
makes the stage runner's ConfigMap and warms the client up.
Usage: python bench/setup_failure.py [--profile fast|realistic] [--runs N]   (prints each run and the median)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", choices=("fast", "realistic"), default="realistic")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from kruise_local import ClusterConfig, LocalCluster

    from airflow_kruise_chain.core.errors import PodStartError

    folder = Path(tempfile.mkdtemp(prefix="setup-failure-"))
    took: list[float] = []
    with LocalCluster(ClusterConfig(profile=args.profile, root=str(folder / "cluster"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(folder / "kubeconfig")
        extra = {"kube_config_path": str(kubeconfig)}
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": extra}
        )
        from airflow_kruise_chain.operators.chain import ChainSetupOperator

        secret = {"TOKEN": {"kind": "secret", "name": "no-such-creds", "key": "token"}}
        for run in range(args.runs):
            stage = {"name": "load", "image": "busybox:1.36", "cmds": ["true"], "env_sources": secret}
            chain = {"name": f"c{run}", "namespace": "default", "stages": [stage]}
            setup = ChainSetupOperator(task_id="setup", chain=chain)
            ti = SimpleNamespace(try_number=1, xcom_push=lambda key, value: None)
            context = {"dag": SimpleNamespace(dag_id="bench"), "run_id": f"run-{run}", "ti": ti}
            started = time.monotonic()
            try:
                setup.execute(context)  # type: ignore[arg-type]
            except PodStartError as e:
                took.append(time.monotonic() - started)
                print(f"run {run}: {took[-1]:.2f} s: {str(e)[:120]}")
            else:
                print(f"run {run}: the setup did not fail")
                return 1
    print(f"median {statistics.median(took):.2f} s over {len(took)} runs ({args.profile} profile)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
