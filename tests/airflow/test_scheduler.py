"""Chains under the real scheduler: DAG runs triggered and cleared through the REST API, checked from its
records.

See conftest.py for the stack (scheduler, dag-processor, triggerer, api-server, LocalExecutor, SQLite, and
`kruise-local` in this process). Tests share one stack and run in file order; each uses its own DAG.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core.manifest import pod_name_for
from tests.airflow.stack import AirflowStack

pytestmark = pytest.mark.slow

EXAMPLE = "example_kruise_chain"
EXAMPLE_STAGES = ["generate", "transform", "aggregate", "report"]


def test_example_dag_succeeds_with_one_pod(airflow_stack: AirflowStack) -> None:
    before = airflow_stack.pods_created()
    run_id = airflow_stack.trigger(EXAMPLE)
    assert airflow_stack.wait_run(EXAMPLE, run_id) == "success", airflow_stack.states(EXAMPLE, run_id)
    states = airflow_stack.states(EXAMPLE, run_id)
    assert states == {f"etl.{t}": "success" for t in ["setup", "prewarm", *EXAMPLE_STAGES, "teardown"]}
    assert airflow_stack.pods_created() - before == 1
    log = airflow_stack.task_log(EXAMPLE, run_id, "etl.report", 1)
    assert "top region:" in log
    assert nothing_left(airflow_stack, EXAMPLE, run_id)


CHAIN_DAG = """
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False, keep_pod={keep_pod!r},
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        first = chain.stage("first", image={image!r}, cmds=["/bin/sh", "-c", {first!r}])
        second = chain.stage("second", image="alpine:3.20", cmds=["/bin/sh", "-c", {second!r}])
        first >> second
"""
FIRST = 'echo data > "$CHAIN_SCRATCH/data.txt"; echo first wrote data'
SECOND = 'cat "$CHAIN_SCRATCH/data.txt"; echo second read data'


def chain_dag(dag_id: str, *, image: str = "busybox:1.36", keep_pod: bool = False) -> str:
    return CHAIN_DAG.format(dag_id=dag_id, image=image, keep_pod=keep_pod, first=FIRST, second=SECOND)


def nothing_left(stack: AirflowStack, dag_id: str, run_id: str) -> bool:
    """No pod of this DAG run's chain `c` (and no ConfigMap: a chain creates none) is left in the cluster."""
    pod = pod_name_for("c", dag_id, run_id)
    names = {o["metadata"]["name"] for o in stack.pods() + stack.objects(R.CONFIGMAPS)}
    return not names & {pod, f"{pod}-runner"}


def test_a_failed_setup_leaves_nothing_and_clearing_it_after_the_fix_runs_in_a_new_pod(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_fix_setup"
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id, image="ghcr.io/airflow-kruise-chain/missing:1.0"))
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "failed"
    states = stack.states(dag_id, run_id)
    assert states["c.setup"] == "failed" and states["c.teardown"] == "failed", states
    assert states["c.first"] == states["c.second"] == "upstream_failed"
    assert "cannot start" in stack.task_log(dag_id, run_id, "c.setup", 1)
    teardown_log = stack.task_log(dag_id, run_id, "c.teardown", 1)
    # the failed setup removed its pod; the teardown finds none and its verdict says so
    assert "was already gone" in teardown_log and "c.setup (failed)" in teardown_log
    assert "The chain pod was not there to delete" in teardown_log
    assert stack.pods_created() - before == 1
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the failed setup's pod and ConfigMap to go")

    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id))  # the fix: an image that exists
    cleared = stack.clear(dag_id, run_id, ["c.setup"], downstream=True)
    assert cleared == ["c.first", "c.second", "c.setup", "c.teardown"]
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    assert "second read data" in stack.task_log(dag_id, run_id, "c.second", 1)
    assert stack.pods_created() - before == 2  # a new pod, not the broken one
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")


def test_clearing_one_stage_without_keep_pod_fails_it_for_its_missing_inputs(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_clear_stage"
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id))
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")

    # Airflow clears the stage's setup and teardown with it: setup makes a fresh, empty pod
    assert stack.clear(dag_id, run_id, ["c.second"]) == ["c.second", "c.setup", "c.teardown"]
    assert stack.wait_run(dag_id, run_id) == "failed"  # never a silent success
    states = stack.states(dag_id, run_id)
    assert states == {
        "c.setup": "success",
        "c.first": "success",
        "c.second": "failed",
        "c.teardown": "failed",  # it deleted the pod, then failed the run: a stage of its chain failed
    }
    log = stack.task_log(dag_id, run_id, "c.second", 2)
    assert "needs the output of stage(s) 'first', which did not run in chain pod" in log
    assert "Clear from `c.setup` with downstream" in log
    assert "second read data" not in log  # it failed before any swap
    assert stack.task_instances(dag_id, run_id)["c.second"]["try_number"] == 2
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the fresh pod to be gone")


def test_keep_pod_reruns_a_cleared_stage_in_the_kept_pod_and_clear_from_setup_reruns_every_stage(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_clear_kept"
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id, keep_pod=True))
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    name = pod_name_for("c", dag_id, run_id)
    (pod,) = [p for p in stack.pods() if p["metadata"]["name"] == name]
    try:
        # one stage: it runs again as a new generation in the kept pod, on the scratch the earlier stages left
        stack.clear(dag_id, run_id, ["c.second"])
        assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
        log = stack.task_log(dag_id, run_id, "c.second", 2)
        assert "already succeeded for an earlier try of this task" in log
        assert "second read data" in log
        assert "adopting result" not in log
        # from setup with downstream: every stage runs again, in the same (healthy, unchanged) pod
        stack.clear(dag_id, run_id, ["c.setup"], downstream=True)
        assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
        assert "first wrote data" in stack.task_log(dag_id, run_id, "c.first", 2)
        assert "second read data" in stack.task_log(dag_id, run_id, "c.second", 3)
        (kept,) = [p for p in stack.pods() if p["metadata"]["name"] == name]
        assert kept["metadata"]["uid"] == pod["metadata"]["uid"]
    finally:
        stack.delete_pod(name)


THREE_STAGES = """
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        first = chain.stage("first", image="busybox:1.36", cmds=["/bin/sh", "-c", {first!r}])
        second = chain.stage("second", image="alpine:3.20", cmds=["/bin/sh", "-c", {second!r}])
        third = chain.stage("third", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo third ran"])
        first >> second >> third
"""


def test_clearing_a_middle_stage_without_keep_pod_fails_the_run_though_the_last_stage_kept_its_success(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_clear_middle"
    stack.add_dag(f"{dag_id}.py", THREE_STAGES.format(dag_id=dag_id, first=FIRST, second=SECOND))
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")

    assert stack.clear(dag_id, run_id, ["c.second"]) == ["c.second", "c.setup", "c.teardown"]
    assert stack.wait_run(dag_id, run_id) == "failed", stack.states(dag_id, run_id)
    assert stack.states(dag_id, run_id) == {
        "c.setup": "success",
        "c.first": "success",
        "c.second": "failed",
        "c.third": "success",  # from the first run: Airflow alone would call the run a success
        "c.teardown": "failed",
    }
    assert "needs the output of stage(s) 'first'" in stack.task_log(dag_id, run_id, "c.second", 2)
    log = stack.task_log(dag_id, run_id, "c.teardown", 2)
    assert "did not succeed in this DAG run: c.second (failed)" in log
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the fresh pod to be gone")


KILLED_DAG = '''
from datetime import timedelta
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

WORK = """
echo "before the kill"
while [ ! -f "$CHAIN_SCRATCH/gate" ]; do sleep 0.2; done
for i in 1 2 3; do echo "after the kill $i"; done
"""

with DAG("chain_killed_worker", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False,
                     pod_template={"spec": {"terminationGracePeriodSeconds": 2}}) as chain:
        chain.stage("work", image="busybox:1.36", cmds=["/bin/sh", "-c", WORK],
                    retries=1, retry_delay=timedelta(0))
'''


def container_logs_contain(stack: AirflowStack, uid: str, text: str) -> bool:
    folder = stack.cluster.root / "pods" / uid / "containers"
    return any(text in log.read_text(errors="replace") for log in folder.rglob("*.log"))


def test_a_killed_workers_stage_output_is_complete_in_the_next_tries_log(airflow_stack: AirflowStack) -> None:
    stack, dag_id = airflow_stack, "chain_killed_worker"
    stack.add_dag(f"{dag_id}.py", KILLED_DAG)
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    pod = stack.chain_pod(dag_id, run_id)
    uid = pod["metadata"]["uid"]
    stack.wait(lambda: container_logs_contain(stack, uid, "before the kill"), 180, "the stage to start")
    task = stack.wait(
        lambda: (ti := stack.task_instances(dag_id, run_id)["c.work"])["pid"] and ti, 60, "the task's pid"
    )
    # the worker dies: the LocalExecutor's worker process (the supervisor) and its task process
    supervisor = int(Path(f"/proc/{task['pid']}/stat").read_text().rsplit(")", 1)[1].split()[1])
    for pid in (supervisor, task["pid"]):
        os.kill(pid, signal.SIGKILL)
    # the stage goes on without a worker following it and ends before the scheduler notices
    (stack.cluster.root / "pods" / uid / "volumes" / "scratch" / "gate").write_text("go\n")
    stack.wait(lambda: container_logs_contain(stack, uid, "after the kill 3"), 60, "the stage to end")

    assert stack.wait_run(dag_id, run_id, timeout=420) == "success", stack.states(dag_id, run_id)
    assert stack.task_instances(dag_id, run_id)["c.work"]["try_number"] == 2
    log = stack.task_log(dag_id, run_id, "c.work", 2)
    assert "adopting result of generation 1 from try 1, not re-running" in log
    for line in ("before the kill", "after the kill 1", "after the kill 2", "after the kill 3"):
        assert line in log
    assert stack.pods_created() - before == 1
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")


DEFERRED_DAG = '''
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

WORK = """
echo "live: before deferring"
sleep 3
echo "live: while deferred"
while [ ! -f "$CHAIN_SCRATCH/gate" ]; do sleep 0.2; done
echo "live: after the gate"
"""
AGAIN = ["/bin/sh", "-c", "echo live: second stage"]

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    # deferred after 1 s: "live: while deferred" (at 3 s) is the trigger's to log
    with KruiseChain("c", namespace="default", prewarm=False, deferrable=True, defer_after=1,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        work = chain.stage("work", image="busybox:1.36", cmds=["/bin/sh", "-c", WORK])
        if {second!r}:
            work >> chain.stage("again", image="alpine:3.20", cmds=AGAIN)
'''
LIVE = ("live: before deferring", "live: while deferred", "live: after the gate")
END_LINE = "::kruise-chain:: end stage=work"


def run_deferred_live(stack: AirflowStack, dag_id: str, *, second: bool = False) -> str:
    """Run DEFERRED_DAG (`second`: with a second stage `again`) and check that the deferred stage's lines
    are in its task log while it runs, and each once after; the DAG run's id."""
    stack.add_dag(f"{dag_id}.py", DEFERRED_DAG.format(dag_id=dag_id, second=second))
    run_id = stack.trigger(dag_id)
    pod = stack.chain_pod(dag_id, run_id)
    uid = pod["metadata"]["uid"]
    state = lambda: stack.task_instances(dag_id, run_id)["c.work"]["state"]  # noqa: E731
    stack.wait(lambda: state() == "deferred", 180, "the stage task to defer")

    # the trigger logs the stage's line into the task's log as it comes: the API server shows it while the
    # stage still runs (it waits for the gate) and the task is still deferred
    log = stack.wait(
        lambda: (text := stack.task_log(dag_id, run_id, "c.work", 1)) and LIVE[1] in text and text,
        120,
        "the stage's line in the task log",
    )
    assert state() == "deferred"
    assert not container_logs_contain(stack, uid, LIVE[2])  # the stage has not ended
    assert log.count(LIVE[1]) == 1

    (stack.cluster.root / "pods" / uid / "volumes" / "scratch" / "gate").write_text("go\n")
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    # the trigger ends the task, then its last lines reach the task's log (the triggerer forwards them on its
    # own): the run's success may be seen first (CI on 31963d9 read the log between the two)
    log = stack.wait(
        lambda: (text := stack.task_log(dag_id, run_id, "c.work", 1)) and END_LINE in text and text,
        60,
        "the trigger's end line in the task log",
    )
    for line in LIVE:  # each line once: the worker, the trigger and the resumed task never log one twice
        assert log.count(line) == 1, (line, log)
    assert log.index(LIVE[0]) < log.index(LIVE[1]) < log.index(LIVE[2])
    return run_id


def test_a_deferred_stages_output_is_in_the_task_log_while_it_runs_and_once_after(
    airflow_stack: AirflowStack,
) -> None:
    run_id = run_deferred_live(airflow_stack, "chain_deferred_live")
    airflow_stack.wait(
        lambda: nothing_left(airflow_stack, "chain_deferred_live", run_id), 60, "the run's pod to be gone"
    )


QUICK_DEFERRED = """
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

STAGE = 'sleep 1; echo "{name}" >> "$CHAIN_SCRATCH/runs"; echo "ran: $(tr "\\n" " " < "$CHAIN_SCRATCH/runs")"'

with DAG("chain_deferred_quick", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False, deferrable=True, defer_after=0,
                     pod_template={"spec": {"terminationGracePeriodSeconds": 2}}) as chain:
        previous = None
        for i in range(4):
            cmds = ["/bin/sh", "-c", STAGE.format(name=f"s{i}")]
            stage = chain.stage(f"s{i}", image="busybox:1.36", cmds=cmds)
            if previous is not None:
                previous >> stage
            previous = stage
"""


def test_deferred_stages_whose_trigger_fires_at_once_succeed_without_a_retry(
    airflow_stack: AirflowStack,
) -> None:
    """apache/airflow#72716 (open; Airflow 3.3.2 here): the executor's late success event of a deferral's exit
    fails a task whose trigger fired and whose resumed try was queued before the scheduler read that event
    (a retry does not help: the resumed try, still queued in the executor, runs next to it). Stages of 1 s
    deferred at once (`defer_after=0`), four of them: failed at the first stage before the trigger held its
    event for `[workers] min_heartbeat_interval` + 3 s after the deferral."""
    stack, dag_id = airflow_stack, "chain_deferred_quick"
    stack.add_dag(f"{dag_id}.py", QUICK_DEFERRED)
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    tis = stack.task_instances(dag_id, run_id)
    stages = [f"c.s{i}" for i in range(4)]
    assert {task: (ti["state"], ti["try_number"]) for task, ti in tis.items()} == {
        task: ("success", 1) for task in ("c.setup", *stages, "c.teardown")
    }
    for i, task in enumerate(stages):
        log = stack.task_log(dag_id, run_id, task, 1)
        assert "Pausing task as DEFERRED" in log, log  # each stage was deferred, and resumed
        assert f"::kruise-chain:: end stage=s{i} generation=" in log, log
    assert "ran: s0 s1 s2 s3 " in stack.task_log(dag_id, run_id, "c.s3", 1)  # each stage once, in order
    assert stack.pods_created() - before == 1
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")
