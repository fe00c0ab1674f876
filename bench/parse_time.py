"""Parse time of the example DAG against a same-shaped BashOperator DAG (bench/dags/bash_chain_shape.py).

Every Airflow task process parses its DAG file before it runs the task, so this is paid once per stage task.
Each sample is a fresh Python process that has already imported `airflow.sdk` (as a task process has) and
times the import of one DAG file (what DagBag does with it); DAG files are measured in alternation, after a
warm-up that writes the bytecode caches (an installed package has them).
Usage: python bench/parse_time.py [--rounds N]   (prints a table and the difference of the medians)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

if not __package__:  # run as a script: the repository on the path, for `bench`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import REPO, deployment_environment

HERE = REPO / "bench"
ROOT = REPO
FILES = {
    "example_kruise_chain": ROOT / "example_dags" / "example_kruise_chain.py",
    "bash_chain_shape": HERE / "dags" / "bash_chain_shape.py",
}
TARGET_MS = 50.0

SAMPLE = """
import importlib.util, json, sys, time
import airflow.sdk  # a task process has the Task SDK loaded before it parses the DAG file
before = set(sys.modules)
t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
elapsed = time.perf_counter() - t0
print(json.dumps({"ms": elapsed * 1000, "modules": len(set(sys.modules) - before),
                  "tasks": len(module.dag.task_dict)}))
"""


def sample(path: Path, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", SAMPLE, str(path)], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="parse-time-airflow-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    deployment_environment(env)  # bytecode caches as an installed package has them
    env.update(AIRFLOW_HOME=home, AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__UNIT_TEST_MODE="False")
    for path in FILES.values():  # warm the file system cache and the bytecode caches
        sample(path, env)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in FILES}
    for _ in range(args.rounds):
        for name, path in FILES.items():
            samples[name].append(sample(path, env))
    medians = {name: statistics.median(s["ms"] for s in rows) for name, rows in samples.items()}
    print(f"| DAG file | tasks | modules imported | parse ms median (min-max) of {args.rounds} |")
    print("|---|---:|---:|---|")
    for name, rows in samples.items():
        ms = [s["ms"] for s in rows]
        print(
            f"| {name} | {int(rows[0]['tasks'])} | {int(rows[0]['modules'])} | "
            f"{medians[name]:.1f} ({min(ms):.1f}-{max(ms):.1f}) |"
        )
    diff = medians["example_kruise_chain"] - medians["bash_chain_shape"]
    verdict = "MET" if diff <= TARGET_MS else "MISSED"
    print(f"\nexample DAG - BashOperator DAG: {diff:+.1f} ms (target <= {TARGET_MS:.0f} ms: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
