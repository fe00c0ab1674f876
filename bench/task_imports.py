"""Benchmark: what a stage task imports of the Kubernetes clients, and how long it takes, against the clients
imported whole (as cncf.kubernetes' hook module imports them for a KubernetesPodOperator task).

    python bench/task_imports.py [--rounds 5]

Each sample is a fresh interpreter that first imports what every task process has before its operator runs
(`airflow.sdk` and the task runner; with `--executor celery` also the sync client, which the Celery worker
imports before its pool forks), then times the stage task's execution modules: the provider's hook and core
modules (`chain`), or those after `kubernetes`, `kubernetes_asyncio` and `aiohttp` whole (`whole`). Bytecode
caches as a deployment has them (PYTHONDONTWRITEBYTECODE dropped; the first, untimed, round writes them).
Prints the median and range of each, and the client modules loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import deployment_environment

TASK = """
import json, sys, time
import airflow.sdk, airflow.sdk.execution_time.task_runner
if sys.argv[1] == "celery":
    import kubernetes.client
start = time.perf_counter()
if sys.argv[2] == "whole":
    import aiohttp, kubernetes.client, kubernetes_asyncio.client
import airflow_kruise_chain.core.chainstate, airflow_kruise_chain.core.driver
import airflow_kruise_chain.core.fastgo, airflow_kruise_chain.core.swap, airflow_kruise_chain.hooks.kruise
seconds = time.perf_counter() - start
clients = [m for m in sys.modules if m.split(".")[0] in ("kubernetes", "kubernetes_asyncio", "aiohttp")]
print(json.dumps({"seconds": seconds, "modules": len(clients)}))
"""


def sample(executor: str, how: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", TASK, executor, how], env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--executor", choices=("local", "celery"), default="local")
    args = parser.parse_args()
    env = dict(os.environ)
    deployment_environment(env)
    for how in ("chain", "whole"):  # writes the bytecode caches
        sample(args.executor, how, env)
    for how in ("chain", "whole"):
        runs = [sample(args.executor, how, env) for _ in range(args.rounds)]
        seconds = [r["seconds"] for r in runs]
        print(
            f"{args.executor} {how}: {statistics.median(seconds):.3f} s median "
            f"({min(seconds):.3f}-{max(seconds):.3f}), {runs[-1]['modules']:.0f} client modules"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
