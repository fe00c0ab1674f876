"""How late Airflow records a failed task's end: a plain Python task that raises AirflowFailException, run
three times under the real scheduler (tests/airflow/stack.py: LocalExecutor, SQLite, kruise-local), each
run's end_date minus the task's last log event.

    python bench/task_exit.py            # [workers] min_heartbeat_interval as Airflow sets it (5 s)
    python bench/task_exit.py --min-heartbeat-interval 1

Airflow's supervisor reports a failed state once the task process has exited; after the end of the process's
output it looks for the exit again at its next wake-up, at most `min_heartbeat_interval` later.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from datetime import datetime
from pathlib import Path

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DAG = """
import pendulum
from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowFailException

with DAG("plain_fail", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    @task
    def boom():
        raise AirflowFailException("plain failure")

    boom()
"""


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-heartbeat-interval", type=float, default=None, help="[workers] setting, seconds")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from kruise_local import ClusterConfig, LocalCluster

    from tests.airflow.stack import AirflowStack

    work = Path(tempfile.mkdtemp(prefix="bench-task-exit-"))
    (work / "dags").mkdir()
    try:
        with LocalCluster(ClusterConfig(profile="fast", root=str(work / "cluster"))) as cluster:
            stack = AirflowStack(work, cluster, cluster.write_kubeconfig(work / "kubeconfig"))
            if args.min_heartbeat_interval is not None:
                stack.env["AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL"] = f"{args.min_heartbeat_interval:g}"
            stack.start()
            try:
                stack.add_dag("plain_fail.py", DAG)
                gaps = []
                for _ in range(args.runs):
                    run_id = stack.trigger("plain_fail")
                    stack.wait_run("plain_fail", run_id)
                    ti = stack.task_instances("plain_fail", run_id)["boom"]
                    log = next(
                        stack.home.glob(f"logs/dag_id=plain_fail/run_id={run_id}/task_id=boom/attempt=1.log")
                    )
                    events = [
                        json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")
                    ]
                    gaps.append(stamp(ti["end_date"]) - max(stamp(e["timestamp"]) for e in events))
            finally:
                stack.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    setting = "default" if args.min_heartbeat_interval is None else f"{args.min_heartbeat_interval:g} s"
    print(
        f"min_heartbeat_interval {setting}: end_date - last log event: "
        + ", ".join(f"{g:.2f} s" for g in gaps)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
