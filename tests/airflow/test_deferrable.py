"""Deferrable stages with the provider's defaults under the real scheduler (issue 40): a stage shorter than
`defer_after` (by default the trigger's hold, 8 s) is followed on the worker and never deferred; a longer
one is handed to the triggerer, which logs its output live, frees the worker while it runs and ends the task
itself when the stage succeeds (no second task start). Each stage runs once. Stages of 2, 12 and 60 s, in
one chain; tests/production/test_celery_deferrable.py runs the same on CeleryExecutor. What a deferral costs
is measured by `bench/scheduler.py --pause 2,12,60` (docs/operations.md), not here."""

from __future__ import annotations

import pytest

from tests.airflow.stack import AirflowStack
from tests.airflow.test_scheduler import container_logs_contain, nothing_left

pytestmark = pytest.mark.slow

LENGTHS = {"s2": 2, "s12": 12, "s60": 60}
"""stage -> its length in seconds"""
LENGTHS_DAG = """
import pendulum
from airflow.sdk import DAG, task
from airflow_kruise_chain.chain import KruiseChain

STAGE = ('echo "{{name}} begins"; sleep {{half}}; echo "{{name}} half-way"; sleep {{half}}; '
         'echo "{{name}}" >> "$CHAIN_SCRATCH/runs"; echo "ran: $(tr "\\\\n" " " < "$CHAIN_SCRATCH/runs")"')

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    # deferrable, every other option the provider's default (defer_after among them)
    with KruiseChain("c", namespace="default", prewarm=False, deferrable=True,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        previous = None
        for name, seconds in {lengths!r}.items():
            cmds = ["/bin/sh", "-c", STAGE.format(name=name, half=seconds / 2)]
            stage = chain.stage(name, image="busybox:1.36", cmds=cmds)
            if previous is not None:
                previous >> stage
            previous = stage

        @task
        def report(result: dict) -> None:  # the XCom the trigger pushed, as the SDK reads it
            seconds = round(result["duration_seconds"])
            print(f"report: {{result['stage']}} exited {{result['exit_code']}} after {{seconds}} s")

        report(previous.output)
"""
PARSED = "Worker startup parse complete"
"""what a task process logs once it has parsed the DAG file: once per start on a worker"""


def run_lengths(stack: AirflowStack, dag_id: str) -> str:
    """Run LENGTHS_DAG and check what issue 40 asks of deferrable stages with the provider's defaults; the
    DAG run's id."""
    stack.add_dag(f"{dag_id}.py", LENGTHS_DAG.format(dag_id=dag_id, lengths=LENGTHS))
    run_id = stack.trigger(dag_id)
    uid = stack.chain_pod(dag_id, run_id)["metadata"]["uid"]
    state = lambda: stack.task_instances(dag_id, run_id)["c.s60"]["state"]  # noqa: E731

    # the 60 s stage frees its worker (deferred) and its lines reach the task log while it runs
    stack.wait(lambda: state() == "deferred", 300, "the 60 s stage's task to defer")
    stack.wait(lambda: "s60 half-way" in stack.task_log(dag_id, run_id, "c.s60", 1), 120, "the half-way line")
    assert state() == "deferred"
    assert not container_logs_contain(stack, uid, "ran: s2 s12 s60")  # the stage has not ended

    assert stack.wait_run(dag_id, run_id, timeout=600) == "success", stack.states(dag_id, run_id)
    tis = stack.task_instances(dag_id, run_id)
    assert all(ti["try_number"] == 1 and ti["state"] == "success" for ti in tis.values()), tis
    logs = {name: stack.task_log(dag_id, run_id, f"c.{name}", 1) for name in LENGTHS}
    assert "ran: s2 s12 s60 " in logs["s60"]  # each stage once, in order: exactly once across hand-overs
    assert "report: s60 exited 0 after 60 s" in stack.task_log(dag_id, run_id, "c.report", 1)
    # shorter than defer_after: followed on the worker, never deferred
    assert "Pausing task as DEFERRED" not in logs["s2"] and logs["s2"].count(PARSED) == 1
    for name in ("s12", "s60"):
        log = logs[name]
        # deferred once, ended by its trigger: one start on a worker, no resumption
        assert log.count("Pausing task as DEFERRED") == 1, log
        assert "(ended from the triggerer: no second task start)" in log, log
        assert log.count(PARSED) == 1, log
        assert log.count(f"{name} half-way") == 1 and log.count(f"::kruise-chain:: end stage={name} ") == 1
    stack.wait(lambda: nothing_left(stack, dag_id, run_id), 60, "the run's pod to be gone")
    return run_id


def test_deferrable_stages_of_2_12_and_60_s_with_the_providers_defaults(airflow_stack: AirflowStack) -> None:
    run_lengths(airflow_stack, "chain_deferrable_lengths")
