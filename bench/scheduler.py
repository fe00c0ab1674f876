"""Benchmark under the real scheduler: the chain's DAG and the same shape of no-op tasks (and of tuned
KubernetesPodOperator tasks with `--modes noop,chain,kpo1`), run by a real Airflow 3 on the local cluster, so
task start-up and DAG parsing are part of each stage. `--executor local`: scheduler, dag-processor, triggerer,
api-server, LocalExecutor on SQLite (tests/airflow/stack.py); `--executor celery`: the same on PostgreSQL with
CeleryExecutor over Redis and two Celery workers (tests/production/stack.py). Figure: start-to-start per stage
(task instance k+1's start_date minus task k's, from Airflow's REST API), median and p95.

    python bench/scheduler.py --stages 3,10 --profile realistic
    python bench/scheduler.py --stages 10 --preimport  # Kubernetes clients imported once, by the scheduler
    python bench/scheduler.py --stages 10 --executor celery --modes noop,chain,kpo1 [--preimport]
    python bench/scheduler.py --stages 5 --workload long --modes chain,chain-deferrable --profile fast
    python bench/scheduler.py --stages 5 --workload long --pause 12 --modes chain,chain-deferrable --preimport
    python bench/scheduler.py --stages 3 --workload long --pause 2,12,60 --modes chain,chain-deferrable \
        --executor celery
    python bench/scheduler.py --executor celery --stages 10 --profile realistic --trips  # supervisor requests

Modes: `noop` (the same DAG of Python tasks that sleep the stage's pause), `chain`, `kpo1`, `podexec`
(workload `one`) and the chain's variants (bench/pipeline_dags.py `chain_variants`): `chain-deferrable` is
`deferrable=True` with the provider's defaults (what `[operators] default_deferrable = True` gives every
stage), `chain-defer-at-once` also `defer_after=0` (every stage handed to the triggerer right after its
swap). A stage task that deferred also gets the time line of where its time went: its deferral, the
trigger's start in the triggerer, the stage's end (its program's end line as the trigger logged it), the
trigger's event and the task's second start if it resumed on a worker, from the task log's event times; and
the medians of each task's own gaps between them. The verdicts: the chain within 10 % of the no-op DAG, and
each deferrable variant within 0.3 s of the plain chain, start-to-start (per N and pause).

Each LocalExecutor task process is forked from a worker that the scheduler forked, so it starts with what the
scheduler had imported; each Celery task process is forked from a pool process of the `airflow celery worker`
process. The Kubernetes clients a chain task needs (cncf.kubernetes' hook module: `kubernetes` and
`kubernetes_asyncio`, about 2,000 modules) are imported by each stage task when it first uses its hook.
`--preimport` installs docs/examples/airflow_local_settings.py, which has the scheduler (LocalExecutor) or the
Celery worker import them at start, so no task process does. `--trips` records each stage task's requests to
its supervisor (bench/trips.py) and prints them per DAG."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import REPO, deployment_environment, figures, trips, warmup
from bench.pipeline_dags import DAG_HEADER, WORKLOADS, chain_variants
from bench.pipelines import create_namespace

NAMESPACE = "bench-0"
PREIMPORT = REPO / "docs" / "examples" / "airflow_local_settings.py"
"""The documented pre-import (LocalExecutor: the scheduler; CeleryExecutor: the Celery worker process)."""


def timeline(stack: Any, tis: dict[str, dict[str, Any]]) -> str:
    """The stage tasks' median time line (`figures.task_timeline`), from their log files' event times."""
    lines: dict[str, list[float]] = {}
    for task_id, ti in tis.items():
        if not re.search(r"(^|\.)s\d+$", task_id) or not ti.get("end_date"):
            continue
        events = log_events(stack, ti["dag_id"], task_id, "attempt=1.log")
        if not events:  # never ran (upstream_failed)
            continue
        marks = figures.task_timeline(
            stamp(ti["start_date"]),
            stamp(ti["end_date"]),
            [(stamp(e["timestamp"]), str(e.get("event", ""))) for e in events if e.get("timestamp")],
        )
        for name, seconds in marks.items():
            lines.setdefault(name, []).append(seconds)
    return joined(lines)


def log_events(stack: Any, dag_id: str, task_id: str, pattern: str) -> list[dict[str, Any]]:
    """The JSON events of a task's log files matching `pattern` (none when it never ran)."""
    files = stack.home.glob(f"logs/dag_id={dag_id}/run_id=*/task_id={task_id}/{pattern}")
    lines = [line for log in files for line in log.read_text().splitlines()]
    return [json.loads(line) for line in lines if line.startswith("{")]


def deferrals(stack: Any, tis: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """The deferred stage tasks' median time line (`figures.deferral_timeline`) and the medians of each
    task's own gaps between its marks (`figures.timeline_gaps`), ('', '') when none deferred."""
    lines: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    for task_id, ti in tis.items():
        if not re.search(r"(^|\.)s\d+$", task_id) or not ti.get("end_date"):
            continue
        # the triggerer writes a trigger's lines into a log file of its own, next to the task's
        events = log_events(stack, ti["dag_id"], task_id, "attempt=1.log*")
        marks = figures.deferral_timeline(
            stamp(ti["start_date"]),
            stamp(ti["end_date"]),
            [(stamp(e["timestamp"]), str(e.get("event", ""))) for e in events if e.get("timestamp")],
        )
        if "deferred" in marks:
            for name, seconds in marks.items():
                lines.setdefault(name, []).append(seconds)
            for name, seconds in figures.timeline_gaps(marks).items():
                gaps.setdefault(name, []).append(seconds)
    return joined(lines), joined(gaps)


def joined(medians: dict[str, list[float]]) -> str:
    return ", ".join(f"{name} {figures.median(values):.2f}" for name, values in medians.items())


DEFERRABLE_MARGIN = 0.3
"""seconds a deferrable stage may cost more than a plain one, start-to-start (issue 40)"""


def verdicts(medians: dict[str, float | None], where: str) -> list[str]:
    """The MET/MISSED lines of one set of DAGs (one N, one pause): the chain within 10 % of the no-op DAG, and
    each deferrable variant within `DEFERRABLE_MARGIN` of the plain chain, start-to-start."""
    lines = []
    chain, noop = medians.get("chain"), medians.get("noop")
    if chain is not None and noop is not None:
        lines.append(
            figures.verdict(
                chain <= 1.1 * noop,
                f"under the real scheduler ({where}): chain start-to-start {chain:.3f} s vs no-op DAG "
                f"{noop:.3f} s ({chain / noop - 1:+.0%}, target <= +10 %)",
            )
        )
    for mode, deferred in medians.items():
        if chain is None or deferred is None or not mode.startswith("chain-defer"):
            continue
        lines.append(
            figures.verdict(
                deferred <= chain + DEFERRABLE_MARGIN,
                f"under the real scheduler ({where}): {mode} start-to-start {deferred:.3f} s vs plain chain "
                f"{chain:.3f} s ({deferred - chain:+.3f} s, target <= +{DEFERRABLE_MARGIN:g} s)",
            )
        )
    return lines


def stamp(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stages", default="3,10", help="comma-separated N")
    ap.add_argument("--profile", default="realistic", choices=("fast", "realistic"))
    ap.add_argument("--workload", default="distinct", choices=sorted(WORKLOADS))
    ap.add_argument(
        "--pause",
        help="each stage's pause in seconds instead of the workload's; comma-separated: one set of DAGs per "
        "pause (e.g. 2,12,60: deferrable stages shorter than, just past and far past `defer_after`)",
    )
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed per DAG run")
    ap.add_argument(
        "--executor",
        default="local",
        choices=("local", "celery"),
        help="local: LocalExecutor on SQLite (tests/airflow/stack.py); celery: PostgreSQL, Redis and two "
        "Celery workers (tests/production/stack.py)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work folder (task logs) for reading")
    ap.add_argument(
        "--modes", default="noop,chain", help="comma-separated, from noop, chain, chain-deferrable, kpo1"
    )
    ap.add_argument(
        "--preimport",
        action="store_true",
        help="the scheduler imports the chain's Kubernetes clients at start (airflow_local_settings.py)",
    )
    ap.add_argument(
        "--trips", action="store_true", help="record the stage tasks' supervisor requests (bench/trips.py)"
    )
    args = ap.parse_args()
    deployment_environment(os.environ)
    from kruise_local import ClusterConfig, LocalCluster

    from tests.airflow.stack import AirflowStack  # the scheduler tests' start-up code
    from tests.production.stack import ProductionStack

    work = Path(tempfile.mkdtemp(prefix="bench-scheduler-"))
    (work / "dags").mkdir()
    data = work / "data"
    data.mkdir()
    base = WORKLOADS[args.workload]
    pauses = [float(p) for p in args.pause.split(",")] if args.pause else [base[2]]
    stages = [int(s) for s in args.stages.split(",")]
    lines = []
    ok = True
    try:
        with LocalCluster(ClusterConfig(profile=args.profile, root=str(work / "cluster"))) as cluster:
            create_namespace(cluster.url, NAMESPACE)
            kind = ProductionStack if args.executor == "celery" else AirflowStack
            stack = kind(work, cluster, cluster.write_kubeconfig(work / "kubeconfig"))
            if args.preimport:
                (stack.home / "config").mkdir(parents=True)
                shutil.copy(PREIMPORT, stack.home / "config" / "airflow_local_settings.py")
            recorded = work / "trips"
            if args.trips:  # after the pre-import's lines, if any
                recorded.mkdir()
                settings = stack.home / "config" / "airflow_local_settings.py"
                settings.parent.mkdir(parents=True, exist_ok=True)
                before = settings.read_text() if settings.exists() else ""
                settings.write_text(before + trips.settings(recorded))
            t = time.perf_counter()
            stack.start()
            print(f"Airflow started in {time.perf_counter() - t:.0f} s", flush=True)
            try:
                # a throw-away no-op run first: the scheduler's and executor's first-run costs are nobody's
                stack.add_dag(
                    "sched_warmup.py",
                    DAG_HEADER
                    + f"dag = build_dag('noop', 2, 'sched-warmup', {NAMESPACE!r}, {str(data)!r})\n",
                )
                stack.wait_run(
                    "bench_sched_warmup", stack.trigger("bench_sched_warmup"), timeout=args.timeout
                )
                # and the triggerer's first request of a trigger (bench/warmup.py): its start-up too
                stack.add_dag("sched_warmup_triggerer.py", warmup.WARMUP_DAG)
                stack.wait_run(warmup.DAG_ID, stack.trigger(warmup.DAG_ID), timeout=args.timeout)
                variants = chain_variants()  # e.g. chain-deferrable: deferrable with the provider's defaults
                for pause, n in itertools.product(pauses, stages):
                    workload = (*base[:2], pause)
                    medians = {}
                    for mode in args.modes.split(","):
                        pipeline = f"sched-{mode}-n{n}-p{pause:g}".replace(".", "_")
                        dag_id = "bench_" + pipeline.replace("-", "_")
                        stack.add_dag(
                            f"{pipeline}.py",
                            DAG_HEADER + f"dag = build_dag({mode!r}, {n}, {pipeline!r}, {NAMESPACE!r}, "
                            f"{str(data)!r}, {tuple(workload)!r}, {variants.get(mode)!r})\n",
                        )
                        run_id = stack.trigger(dag_id)
                        state = stack.wait_run(dag_id, run_id, timeout=args.timeout)
                        tis = stack.task_instances(dag_id, run_id)
                        gaps = figures.start_to_start(tis, n)
                        medians[mode] = figures.median(gaps)
                        ok = ok and state == "success"
                        print(
                            f"{args.executor} {args.profile} {mode:5s} N={n} {pause:g} s stages: {state}, "
                            f"start-to-start median {medians[mode]:.3f} s, "
                            f"p95 {figures.percentile(gaps, 95):.3f} s",
                            flush=True,
                        )
                        print(f"  stage task, median s from start_date: {timeline(stack, tis)}", flush=True)
                        for line in trips.summary(recorded, dag_id, tis) if args.trips else ():
                            print(line, flush=True)
                        deferred, gaps = deferrals(stack, tis)
                        if deferred:
                            print(f"  deferred stage task, median s from start_date: {deferred}", flush=True)
                            print(f"  deferred stage task, median gaps s: {gaps}", flush=True)
                    lines += verdicts(
                        medians,
                        f"{args.executor}, {args.profile}, {args.workload}, N={n}, "
                        f"{pause:g} s stages{', clients pre-imported' if args.preimport else ''}",
                    )
            finally:
                stack.stop()
    finally:
        if args.keep:
            print(f"kept {work} (Airflow home, task logs, cluster)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
