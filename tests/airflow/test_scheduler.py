"""Chains under the real scheduler: DAG runs triggered and cleared through the REST API, checked from its
records.

See conftest.py for the stack (scheduler, dag-processor, triggerer, api-server, LocalExecutor, SQLite, and
`kruise-local` in this process). Tests share one stack and run in file order; each uses its own DAG.
"""

from __future__ import annotations

import pytest

from airflow_kruise_chain.local import resources as R
from tests.airflow.conftest import AirflowStack

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
    assert airflow_stack.pods() == [] and airflow_stack.objects(R.CONFIGMAPS) == []


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


def nothing_left(stack: AirflowStack) -> bool:
    return not stack.pods() and not stack.objects(R.CONFIGMAPS)


def test_a_failed_setup_leaves_nothing_and_clearing_it_after_the_fix_runs_in_a_new_pod(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_fix_setup"
    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id, image="ghcr.io/airflow-kruise-chain/missing:1.0"))
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "failed"
    states = stack.states(dag_id, run_id)
    assert states["c.setup"] == "failed" and states["c.teardown"] == "success", states
    assert states["c.first"] == states["c.second"] == "upstream_failed"
    assert "cannot start" in stack.task_log(dag_id, run_id, "c.setup", 1)
    assert stack.pods_created() - before == 1
    stack.wait(lambda: nothing_left(stack), 60, "the failed setup's pod and ConfigMap to be gone")

    stack.add_dag(f"{dag_id}.py", chain_dag(dag_id))  # the fix: an image that exists
    cleared = stack.clear(dag_id, run_id, ["c.setup"], downstream=True)
    assert cleared == ["c.first", "c.second", "c.setup", "c.teardown"]
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    assert "second read data" in stack.task_log(dag_id, run_id, "c.second", 1)
    assert stack.pods_created() - before == 2  # a new pod, not the broken one
    stack.wait(lambda: nothing_left(stack), 60, "the run's pod to be gone")
