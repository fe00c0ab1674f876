"""Chains on a production-shaped Airflow (tests/production/stack.py): PostgreSQL, Redis, CeleryExecutor with
two workers on hosts of their own, the triggerer on its own. Checked from Airflow's records (REST API) and the
cluster (its store and audit log). Tests share one deployment and run in file order; each uses its own DAG."""

from __future__ import annotations

import time

import pytest

from tests.airflow.test_scheduler import run_deferred_live
from tests.production.stack import WORKERS, ProductionStack

pytestmark = [pytest.mark.slow, pytest.mark.production]

EXAMPLE = "example_kruise_chain"

# Every stage appends its name to a file in the scratch volume and the last one prints the file: each stage's
# name must appear exactly once (a stage run twice, or lost, shows there).
CHAIN_DAG = """
import pendulum
from datetime import timedelta
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

STAGE = 'echo "{{name}}" >> "$CHAIN_SCRATCH/runs"; echo "stage {{name}} on its way"'
LAST = STAGE + '; echo "runs: $(tr "\\\\n" " " < "$CHAIN_SCRATCH/runs")"'

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         max_active_runs=16) as dag:
    with KruiseChain("c", namespace="default", prewarm=False,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        previous = None
        for i in range({stages}):
            name = f"s{{i}}"
            script = (LAST if i == {stages} - 1 else STAGE).replace("{{name}}", name)
            stage = chain.stage(name, image="busybox:1.36", cmds=["/bin/sh", "-c", script],
                                {routing})
            if previous is not None:
                previous >> stage
            previous = stage
"""


def chain_dag(dag_id: str, stages: int, *, routed: bool) -> str:
    """A chain of `stages` stages; `routed`: stage i on the queue of worker i % 2, else on the default one."""
    queues = list(WORKERS.values())
    routing = f"queue={queues!r}[i % 2]" if routed else ""
    return CHAIN_DAG.format(dag_id=dag_id, stages=stages, routing=routing)


def ran_once_each(stack: ProductionStack, dag_id: str, run_id: str, stages: int) -> None:
    log = stack.task_log(dag_id, run_id, f"c.s{stages - 1}", 1)
    runs = next(line for line in log.splitlines() if "runs: " in line).split("runs: ", 1)[1].split()
    assert runs == [f"s{i}" for i in range(stages)], log


def hostnames(stack: ProductionStack, dag_id: str, run_id: str) -> dict[str, str]:
    return {
        task: ti["hostname"]
        for task, ti in stack.task_instances(dag_id, run_id).items()
        if task.startswith("c.s") or task.startswith("etl.")
    }


def test_the_example_dag_succeeds_with_one_pod_on_postgres_and_celery(
    production_stack: ProductionStack,
) -> None:
    stack = production_stack
    before = stack.pods_created()
    run_id = stack.trigger(EXAMPLE)
    assert stack.wait_run(EXAMPLE, run_id) == "success", stack.states(EXAMPLE, run_id)
    assert stack.pods_created() - before == 1
    assert "top region:" in stack.task_log(EXAMPLE, run_id, "etl.report", 1)
    assert set(hostnames(stack, EXAMPLE, run_id).values()) <= set(WORKERS)


def test_a_ten_stage_chain_spread_over_both_workers_runs_each_stage_once_in_one_pod(
    production_stack: ProductionStack,
) -> None:
    stack, dag_id, stages = production_stack, "celery_ten_stages", 10
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id, stages, routed=True))
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    assert stack.pods_created() - before == 1
    hosts = hostnames(stack, dag_id, run_id)
    assert {hosts[f"c.s{i}"] for i in range(stages)} == set(WORKERS), hosts
    for i in range(stages):  # stage i on the worker of its queue: the other host read the chain's state
        assert hosts[f"c.s{i}"] == list(WORKERS)[i % 2], hosts
    assert all(ti["try_number"] == 1 for ti in stack.task_instances(dag_id, run_id).values())
    ran_once_each(stack, dag_id, run_id, stages)


KILLED_DAG = '''
import pendulum
from datetime import timedelta
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

WORK = """
echo "before the kill"
while [ ! -f "$CHAIN_SCRATCH/gate" ]; do sleep 0.2; done
for i in 1 2 3; do echo "after the kill $i"; done
echo work >> "$CHAIN_SCRATCH/runs"
"""

with DAG("celery_killed_worker", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False,
                     pod_template={"spec": {"terminationGracePeriodSeconds": 2}}) as chain:
        work = chain.stage("work", image="busybox:1.36", cmds=["/bin/sh", "-c", WORK],
                           retries=1, retry_delay=timedelta(0))
        last = chain.stage("last", image="busybox:1.36",
                           cmds=["/bin/sh", "-c", 'echo "runs: $(cat "$CHAIN_SCRATCH/runs")"'])
        work >> last
'''


def test_a_killed_workers_stage_is_adopted_by_the_other_worker_with_its_whole_output(
    production_stack: ProductionStack,
) -> None:
    stack, dag_id = production_stack, "celery_killed_worker"
    stack.add_dag(f"{dag_id}.py", KILLED_DAG)
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    pod = stack.chain_pod(dag_id, run_id)
    scratch = stack.cluster.root / "pods" / pod["metadata"]["uid"] / "volumes" / "scratch"
    ti = stack.wait(
        lambda: (
            (t := stack.task_instances(dag_id, run_id)["c.work"])["state"] == "running"
            and t["hostname"]
            and t
        ),
        180,
        "the stage task to run on a worker",
    )
    stack.wait(
        lambda: "before the kill" in stack.task_log(dag_id, run_id, "c.work", 1), 120, "the stage to start"
    )
    dead = ti["hostname"]
    stack.kill_worker(dead)  # the whole host: its Celery worker, pool and task processes
    try:
        (scratch / "gate").write_text("go\n")  # the stage ends while no worker follows it
        assert stack.wait_run(dag_id, run_id, timeout=420) == "success", stack.states(dag_id, run_id)
    finally:
        stack.start_worker(dead)
        stack.wait(stack.workers_ready, 120, "the restarted worker")
    work = stack.task_instances(dag_id, run_id)["c.work"]
    assert work["try_number"] == 2
    assert work["hostname"] == next(h for h in WORKERS if h != dead)
    log = stack.task_log(dag_id, run_id, "c.work", 2)
    assert "adopting result of generation 1 from try 1, not re-running" in log
    for line in ("before the kill", "after the kill 1", "after the kill 2", "after the kill 3"):
        assert line in log
    assert "runs: work" in stack.task_log(dag_id, run_id, "c.last", 1)  # the stage ran once
    assert stack.pods_created() - before == 1


def test_ten_runs_of_a_five_stage_chain_at_once_each_in_its_pod_each_stage_once(
    production_stack: ProductionStack,
) -> None:
    stack, dag_id, stages, runs = production_stack, "celery_ten_runs", 5, 10
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id, stages, routed=False))
    stack.wait_dag(dag_id)
    audit_before, pods_before = len(stack.cluster.audit), stack.pods_created()
    requests_before = sum(stack.cluster.requests.values())
    started = time.monotonic()
    run_ids = [stack.trigger(dag_id) for _ in range(runs)]
    for run_id in run_ids:
        assert stack.wait_run(dag_id, run_id, timeout=600) == "success", stack.states(dag_id, run_id)
    elapsed = time.monotonic() - started
    assert stack.pods_created() - pods_before == runs
    for run_id in run_ids:
        ran_once_each(stack, dag_id, run_id, stages)
        assert all(ti["try_number"] == 1 for ti in stack.task_instances(dag_id, run_id).values())
    conflicts = sum(1 for _, _, code in stack.cluster.audit[audit_before:] if code == 409)
    requests = sum(stack.cluster.requests.values()) - requests_before
    per_stage = requests / (runs * stages)
    hosts = {h for run_id in run_ids for h in hostnames(stack, dag_id, run_id).values()}
    print(f"{runs} runs x {stages} stages in {elapsed:.0f} s: {requests} API requests, {per_stage:.1f} per")
    print(f"stage (setup and teardown included), {conflicts} conflicts, hosts {sorted(hosts)}")
    assert conflicts <= runs  # no 409 storm: at most about one re-read per chain
    assert per_stage < 40


def test_a_deferrable_chain_with_the_triggerer_on_its_own_shows_live_lines_and_runs_each_stage_once(
    production_stack: ProductionStack,
) -> None:
    stack, dag_id = production_stack, "celery_deferred_live"
    run_id = run_deferred_live(stack, dag_id, second=True)
    assert stack.task_log(dag_id, run_id, "c.again", 1).count("live: second stage") == 1
    assert all(ti["try_number"] == 1 for ti in stack.task_instances(dag_id, run_id).values())
