"""DAGs written the way KubernetesPodOperator and TaskFlow users write them, under the real scheduler (see
tests/airflow/stack.py): templated image tags.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core.manifest import of_run, pod_name_for
from tests.airflow.stack import AirflowStack

pytestmark = pytest.mark.slow

TEMPLATED_IMAGES = """
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         params={{"tag": "1.36"}}) as dag:
    with KruiseChain("c", namespace="default", keep_pod=True,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        pick = chain.stage("pick", image="busybox:{{{{ params.tag }}}}",
                           cmds=["/bin/sh", "-c", "echo '{{\\"tag\\": \\"3.20\\"}}' > $CHAIN_OUTPUT"])
        use = chain.stage("use", image="alpine:{{{{ ti.xcom_pull(task_ids='c.pick')['outputs']['tag'] }}}}",
                          cmds=["/bin/sh", "-c", "cat /etc/os-release >/dev/null; echo used alpine"])
        pick >> use
"""


def xcom(stack: AirflowStack, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
    path = (
        f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        f"/xcomEntries/{key}?deserialize=true"
    )
    return stack.get(path)["value"]


def test_templated_image_tags_render_in_setup_prewarm_and_their_stage(airflow_stack: AirflowStack) -> None:
    """A tag from params (the run's context) is rendered by setup (the slot's first image: the stage's
    swap is a go) and prewarm; one from an upstream XCom (the stage's own context) only by its stage: its
    slot starts on the runner image and the stage's swap patches it."""
    stack, dag_id = airflow_stack, "authoring_templated_images"
    stack.add_dag(f"{dag_id}.py", TEMPLATED_IMAGES.format(dag_id=dag_id))
    run_id = stack.trigger(dag_id, conf={"tag": "latest"})
    try:
        assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
        (pod,) = [p for p in stack.pods() if p["metadata"]["name"] == pod_name_for("c", dag_id, run_id)]
    finally:
        stack.delete_pod(pod_name_for("c", dag_id, run_id))
    assert xcom(stack, dag_id, run_id, "c.pick")["image"] == "busybox:latest"
    assert xcom(stack, dag_id, run_id, "c.use")["image"] == "alpine:3.20"
    assert xcom(stack, dag_id, run_id, "c.pick", "chain_state")["action"] == "go"
    assert xcom(stack, dag_id, run_id, "c.use", "chain_state")["action"] == "patch"
    assert "only known when its stage renders it" in stack.task_log(dag_id, run_id, "c.setup", 1)
    assert "used alpine" in stack.task_log(dag_id, run_id, "c.use", 1)
    jobs = [j for j in stack.objects(R.IMAGE_PULL_JOBS) if of_run(j["metadata"]["labels"], dag_id, run_id)]
    assert [j["spec"]["image"] for j in jobs] == ["busybox:latest"]  # alpine's tag was not known yet
    assert {c["name"]: c["image"] for c in pod["spec"]["containers"]}["slot-b"] == "alpine:3.20"


TASKFLOW = """
import pendulum
from airflow.sdk import DAG, task
from airflow_kruise_chain.chain import KruiseChain

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         params={{"count": 3}}) as dag:
    @task
    def source() -> list[int]:  # a plain Airflow task upstream of the chain
        return [5, 7]

    with KruiseChain("c", namespace="default",
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        @chain.task(image="python:3.11-slim")
        def expand(values: list[int], count: str) -> list[int]:
            return [v * int(count) for v in values]

        @task.kruise_chain(image="python:3.11-slim", multiple_outputs=True)
        def describe(values: list[int]) -> dict:
            print("describing", values)
            return {{"total": sum(values), "count": len(values)}}

        described = describe(expand(source(), "{{{{ params.count }}}}"))

    @task
    def check(total: int) -> int:  # a plain task downstream reads the stage's XCom
        assert total == 36, total
        return total

    check(described["total"])
"""


def test_taskflow_stages_under_the_scheduler(airflow_stack: AirflowStack) -> None:
    """`@chain.task` and `@task.kruise_chain` functions between plain `@task`s: XComArgs in, templated
    arguments rendered, return values (and `multiple_outputs`) out through XCom, the function's output in
    its task log; every stage in the one chain pod."""
    stack, dag_id = airflow_stack, "authoring_taskflow"
    stack.add_dag(f"{dag_id}.py", TASKFLOW.format(dag_id=dag_id))
    before = stack.pods_created()
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    assert xcom(stack, dag_id, run_id, "c.expand") == [15, 21]
    assert xcom(stack, dag_id, run_id, "c.describe") == {"total": 36, "count": 2}
    assert xcom(stack, dag_id, run_id, "c.describe", "total") == 36
    assert xcom(stack, dag_id, run_id, "check") == 36
    assert xcom(stack, dag_id, run_id, "c.describe", "stage_result")["exit_code"] == 0
    assert "describing [15, 21]" in stack.task_log(dag_id, run_id, "c.describe", 1)
    assert stack.pods_created() - before == 1
