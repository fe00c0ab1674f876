"""DAG files written the way KubernetesPodOperator and TaskFlow users write them, under the real scheduler
(tests/airflow/stack.py): parsed by the DAG processor and run, or refused at parse with an import error that
names the counterpart."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core.manifest import of_run
from tests.airflow.stack import AirflowStack
from tests.airflow.test_authoring import xcom

pytestmark = pytest.mark.slow

USERS = """
import pendulum
from airflow.sdk import DAG, task
from kubernetes.client import models as k8s
from airflow_kruise_chain.chain import KruiseChain

FAST = {{"spec": {{"terminationGracePeriodSeconds": 2}}}}

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         params={{"tag": "1.36", "n": 3}}) as dag:
    @task
    def argv() -> list[str]:
        return ["hello", "{{{{ ds }}}}"]

    with KruiseChain("kpo", namespace="default", pod_template=FAST, labels={{"team": "data"}}) as kpo:
        first = kpo.stage(
            task_id="print_env",
            name="print-env",
            image="busybox:{{{{ params.tag }}}}",
            cmds=["sh", "-c"],
            arguments=['echo "tag=$TAG"; printf \\'{{"tag": "%s"}}\\' "$TAG" > "$CHAIN_OUTPUT"'],
            env_vars=[k8s.V1EnvVar(name="TAG", value="{{{{ var.value.stage_tag }}}}")],
            container_resources=k8s.V1ResourceRequirements(limits={{"memory": "64Mi"}}),
        )
        echo = kpo.stage(task_id="echo_argv", image="alpine:{{{{ var.value.stage_tag }}}}", cmds=["echo"],
                         arguments=argv())
        first >> echo

    with KruiseChain("tf", namespace="default", prewarm=False, pod_template=FAST) as tf:
        @task.kruise_chain(image="python:3.11-slim", name="numbers_pod")
        def numbers(n: str) -> list[int]:
            return list(range(1, int(n) + 1))

        @tf.task(image="python:3.11-slim")
        def square(x: int) -> int:
            return x * x

        @tf.task(image="python:3.11-slim", multiple_outputs=True)
        def summary(values: list[int]) -> dict:
            return {{"total": sum(values), "count": len(values)}}

        failing = tf.stage("failing", image="busybox:1.36", cmds=["sh", "-c", "exit 4"])
        cleanup = tf.stage("cleanup", image="busybox:1.36", cmds=["true"], trigger_rule="all_done")
        totals = summary(square.expand(x=numbers("{{{{ params.n }}}}")))
        totals >> failing >> cleanup

    @task
    def report(total: int) -> int:
        return total

    report(totals["total"])
"""

REFUSED = {
    "users_refused_xcom_file": (
        """
        with KruiseChain("c", namespace="default") as chain:
            chain.stage(task_id="write_xcom", image="alpine:3.20", do_xcom_push=True,
                        cmds=["sh", "-c", "mkdir -p /airflow/xcom/; echo '[1]' > /airflow/xcom/return.json"])
""",
        "$CHAIN_OUTPUT",
    ),
    "users_refused_context": (
        """
        with KruiseChain("c", namespace="default") as chain:
            @chain.task(image="python:3.11-slim")
            def today():
                from airflow.sdk import get_current_context
                return get_current_context()["ds"]
            today()
""",
        "'{{ ds }}'",
    ),
}
REFUSED_HEAD = """
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    if True:"""


def import_errors(stack: AirflowStack) -> dict[str, str]:
    errors = stack.get("/api/v2/importErrors?limit=100")["import_errors"]
    return {e["filename"].rsplit("/", 1)[-1]: e["stack_trace"] for e in errors}


def test_kpo_and_taskflow_dags_parse_and_run_under_the_scheduler(airflow_stack: AirflowStack) -> None:
    """A KPO-shaped chain (task_id with KPO's name, a tag from params and one from a Variable, both
    prewarmed, V1EnvVar and V1ResourceRequirements, an XComArg as arguments) and a TaskFlow chain without
    prewarm (@task.kruise_chain with KPO's name, a stage mapped over an earlier stage's list,
    multiple_outputs, a failing stage with an all_done clean-up after it), a plain @task reading a key."""
    stack, dag_id = airflow_stack, "users_scheduler"
    stack.request("POST", "/api/v2/variables", {"key": "stage_tag", "value": "3.20"})
    stack.add_dag(f"{dag_id}.py", USERS.format(dag_id=dag_id))
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id, timeout=600) == "failed"  # the tf chain's verdict: a stage failed
    states = stack.states(dag_id, run_id)
    assert [states[f"tf.{t}"] for t in ("failing", "cleanup", "teardown")] == ["failed", "success", "failed"]
    assert all(s == "success" for t, s in states.items() if t not in ("tf.failing", "tf.teardown")), states
    first = xcom(stack, dag_id, run_id, "kpo.print_env")
    assert [first[k] for k in ("stage", "image", "outputs")] == ["print-env", "busybox:1.36", {"tag": "3.20"}]
    echoed = xcom(stack, dag_id, run_id, "kpo.echo_argv")
    # what an XCom gives is passed as it is, not rendered again (as for any template field)
    assert echoed["image"] == "alpine:3.20" and echoed["log_tail"] == ["hello {{ ds }}"]
    jobs = [j for j in stack.objects(R.IMAGE_PULL_JOBS) if of_run(j["metadata"]["labels"], dag_id, run_id)]
    assert sorted(j["spec"]["image"] for j in jobs) == ["alpine:3.20", "busybox:1.36"]  # rendered, pulled
    assert xcom(stack, dag_id, run_id, "tf.numbers") == [1, 2, 3]
    assert [xcom(stack, dag_id, run_id, "tf.square", map_index=i) for i in range(3)] == [1, 4, 9]
    assert xcom(stack, dag_id, run_id, "tf.summary", "total") == 14
    assert xcom(stack, dag_id, run_id, "report") == 14
    assert xcom(stack, dag_id, run_id, "tf.numbers", "stage_result")["stage"] == "numbers"


def test_refused_dags_are_import_errors_naming_the_counterpart(airflow_stack: AirflowStack) -> None:
    stack = airflow_stack
    for dag_id, (body, _) in REFUSED.items():
        stack.add_dag(f"{dag_id}.py", REFUSED_HEAD.format(dag_id=dag_id) + body)

    def reported() -> dict[str, str] | None:
        errors = import_errors(stack)
        return errors if all(f"{d}.py" in errors for d in REFUSED) else None

    errors: dict[str, Any] = stack.wait(reported, 180, "the refused DAG files' import errors")
    for dag_id, (_, says) in REFUSED.items():
        assert "ChainConfigError" in errors[f"{dag_id}.py"] and says in errors[f"{dag_id}.py"]
        status, _ = stack.call("GET", f"/api/v2/dags/{quote(dag_id)}")
        assert status == 404
