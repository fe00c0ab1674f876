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


def xcom(
    stack: AirflowStack,
    dag_id: str,
    run_id: str,
    task_id: str,
    key: str = "return_value",
    map_index: int = -1,
) -> Any:
    path = (
        f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        f"/xcomEntries/{key}?deserialize=true&map_index={map_index}"
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


MAPPED = '''
from datetime import timedelta
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

EACH = """
i=$1
echo "index $i ran"
if [ "$i" = 7 ] && [ ! -e "$CHAIN_SCRATCH/failed-7" ]; then touch "$CHAIN_SCRATCH/failed-7"; exit 3; fi
echo "$i" >> "$CHAIN_SCRATCH/done"
printf '{{"i": %s}}' "$i" > "$CHAIN_OUTPUT"
"""

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", keep_pod=True,
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        first = chain.stage("first", image="busybox:1.36",
                            cmds=["/bin/sh", "-c", "touch $CHAIN_SCRATCH/done"])
        each = chain.stage.partial(
            "each", image="busybox:1.36", cmds=["/bin/sh", "-c", EACH, "each"], retries=1,
            retry_delay=timedelta(seconds=1),
        ).expand(arguments=[[str(i)] for i in range({count})])
        last = chain.stage("last", image="alpine:3.20",
                           cmds=["/bin/sh", "-c", "echo \\"$(wc -l < $CHAIN_SCRATCH/done) lines\\""])
        first >> each >> last
'''


def mapped_tis(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
    path = (
        f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}/listMapped?limit=100"
    )
    return sorted(stack.get(path)["task_instances"], key=lambda ti: ti["map_index"])


def failed_logs(stack: AirflowStack, dag_id: str, run_id: str, tis: list[dict[str, Any]]) -> str:
    """The last lines of each failed map index's log (for an assertion's message)."""
    return "\n".join(
        f"--- index {ti['map_index']} try {ti['try_number']}:\n"
        + stack.task_log(dag_id, run_id, ti["task_id"], ti["try_number"], map_index=ti["map_index"])[-3000:]
        for ti in tis
        if ti["state"] != "success"
    )


def most_at_once(tis: list[dict[str, Any]]) -> int:
    """The most task instances running at one moment, from their start and end dates."""
    events = sorted(
        [(ti["start_date"], 1) for ti in tis] + [(ti["end_date"], -1) for ti in tis],
        key=lambda e: (e[0], e[1]),
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_twenty_map_indexes_over_two_slots_with_a_retry_and_a_clear(airflow_stack: AirflowStack) -> None:
    """20 map indexes of one mapped stage share the chain pod's 2 slots: at most 2 run at once (the others
    wait in the scheduler, holding no worker, and none waits for a slot on its worker); index 7 fails once
    and its retry succeeds; each index has its own XCom; clearing index 3 alone runs it again in the kept
    pod while the others keep their results."""
    stack, dag_id = airflow_stack, "authoring_mapped"
    stack.add_dag(f"{dag_id}.py", MAPPED.format(dag_id=dag_id, count=20))
    run_id = stack.trigger(dag_id)
    name = pod_name_for("c", dag_id, run_id)
    try:
        state = stack.wait_run(dag_id, run_id, timeout=900)
        tis = mapped_tis(stack, dag_id, run_id, "c.each")
        assert state == "success", failed_logs(stack, dag_id, run_id, tis)
        assert [ti["map_index"] for ti in tis] == list(range(20))
        assert all(ti["state"] == "success" for ti in tis)
        assert {ti["map_index"]: ti["try_number"] for ti in tis if ti["try_number"] != 1} == {7: 2}
        assert most_at_once(tis) <= 2
        for ti in tis:
            log = stack.task_log(dag_id, run_id, "c.each", ti["try_number"], map_index=ti["map_index"])
            assert f"index {ti['map_index']} ran" in log and f"stage each-{ti['map_index']} generation" in log
            assert "waiting:" not in log  # never held a worker waiting for a slot
        assert "exit code 3" in stack.task_log(dag_id, run_id, "c.each", 1, map_index=7)
        # the retry knows from the failed try (task_state_store), not from a slot other indexes ran in since
        assert "failed in an earlier try of this task" in stack.task_log(
            dag_id, run_id, "c.each", 2, map_index=7
        )
        assert [xcom(stack, dag_id, run_id, "c.each", map_index=i)["outputs"] for i in (0, 7, 19)] == [
            {"i": 0},
            {"i": 7},
            {"i": 19},
        ]
        assert "20 lines" in stack.task_log(dag_id, run_id, "c.last", 1)  # a line per index, in one scratch

        cleared = stack.clear(dag_id, run_id, [["c.each", 3]])
        assert "c.each" in cleared and "c.last" not in cleared
        assert stack.wait_run(dag_id, run_id, timeout=600) == "success", stack.states(dag_id, run_id)
        tis = mapped_tis(stack, dag_id, run_id, "c.each")
        assert {ti["map_index"]: ti["try_number"] for ti in tis if ti["try_number"] != 1} == {3: 2, 7: 2}
        log = stack.task_log(dag_id, run_id, "c.each", 2, map_index=3)
        assert "already succeeded for an earlier try of this task" in log and "index 3 ran" in log
    finally:
        stack.delete_pod(name)
