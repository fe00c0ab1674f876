"""DAGs written the way KubernetesPodOperator and TaskFlow users write them (shapes from cncf.kubernetes'
example DAGs and Airflow's TaskFlow and mapping docs), parsed: each builds its chain, or is refused at parse
with a message naming the counterpart, never with a TypeError or Airflow's generic "Invalid arguments"."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pendulum
import pytest
from airflow.providers.cncf.kubernetes.secret import Secret
from airflow.sdk import DAG, task
from kubernetes.client import models as k8s

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError, ChainSpec
from airflow_kruise_chain.templating import STAND_IN_IMAGE

START = pendulum.datetime(2026, 1, 1, tz="UTC")
SCALE = 3  # a name of the DAG file, which a TaskFlow stage's source does not carry into the pod


def build(body: Callable[[KruiseChain], Any], **chain: Any) -> DAG:
    with DAG("users", schedule=None, start_date=START, params={"tag": "1.36"}) as dag:
        with KruiseChain("c", **{"namespace": "default", **chain}) as c:
            body(c)
    return dag


def spec(dag: DAG) -> ChainSpec:
    return ChainSpec.from_dict(dag.task_dict["c.setup"].chain)


def refused(body: Callable[[KruiseChain], Any], **chain: Any) -> ChainConfigError:
    with pytest.raises(ChainConfigError) as err:
        build(body, **chain)
    assert "Invalid arguments" not in str(err.value)
    return err.value


def test_kpos_example_task_as_a_stage_task_id_and_pod_name_included() -> None:
    """example_kubernetes.py's task, its arguments given to chain.stage as they are (the chain-wide ones on
    the chain): `task_id` is the task's id, KPO's `name` the stage's name in the pod (made a DNS label, as
    KPO makes a pod name)."""
    volume = k8s.V1Volume(
        name="test-volume",
        persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(claim_name="test-volume"),
    )

    def body(chain: KruiseChain) -> None:
        chain.stage(
            namespace="default",
            image="ubuntu:16.04",
            cmds=["bash", "-cx"],
            arguments=["echo", "10"],
            secrets=[Secret("env", "SQL_CONN", "airflow-secrets", "sql_alchemy_conn")],
            volume_mounts=[
                k8s.V1VolumeMount(name="test-volume", mount_path="/root/mount_file", read_only=True)
            ],
            env_from=[k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name="test-configmap-1"))],
            name="airflow_test_pod",
            task_id="task",
            on_finish_action="delete_pod",
            hostnetwork=False,
            get_logs=True,
        )
        chain.stage(task_id="write_xcom", image="alpine:3.20", cmds=["true"])

    dag = build(body, volumes=[volume], labels={"foo": "bar"})
    assert dag.task_dict["c.task"].stage_name == "airflow-test-pod"
    assert dag.task_dict["c.write_xcom"].stage_name == "write-xcom"  # a task id as KPO users write them
    assert [s.name for s in spec(dag).stages] == ["airflow-test-pod", "write-xcom"]


def test_a_stage_named_twice_is_refused() -> None:
    err = refused(lambda chain: chain.stage("a", task_id="b", image="busybox:1.36", cmds=["true"]))
    assert err.field == "stages[0].task_id" and "give one" in err.message
    err = refused(lambda chain: chain.stage(image="busybox:1.36", cmds=["true"]))
    assert err.field == "stages[0].task_id" and "chain.stage('extract'" in err.message


def test_a_mapped_stage_with_kpos_partial_shape() -> None:
    """`KubernetesPodOperator.partial(task_id=..., name=...)` as `chain.stage.partial(...)`."""
    dag = build(
        lambda chain: chain.stage.partial(
            task_id="count_lines", name="count", image="busybox:1.36", cmds=["wc", "-l"]
        ).expand(arguments=[["/etc/hosts"], ["/etc/passwd"]])
    )
    assert dag.task_dict["c.count_lines"].partial_kwargs["stage_name"] == "count"
    assert spec(dag).stages[0].name == "count"


def test_taskflow_stage_takes_task_kubernetes_arguments() -> None:
    """example_kubernetes_decorator.py's `@task.kubernetes(image=..., name=..., namespace=...)` as
    `@task.kruise_chain`: KPO's pod `name` is accepted (a TaskFlow stage's name is its task id)."""

    def body(chain: KruiseChain) -> None:
        @task.kruise_chain(image="python:3.11-slim", name="k8s_test", namespace="default")
        def execute_in_k8s_pod() -> None:
            import time

            print("Hello from k8s pod")
            time.sleep(0)

        execute_in_k8s_pod()

    dag = build(body)
    assert dag.task_dict["c.execute_in_k8s_pod"].stage_name == "execute-in-k8s-pod"


def test_xcomargs_in_template_fields_resolve_when_the_stage_runs() -> None:
    """An XComArg where KPO takes one (any template field: `arguments=upstream()`, an env value, a word of
    `cmds`, the image): resolved when the stage renders, checked then; the upstream task runs first."""

    def body(chain: KruiseChain) -> None:
        @task
        def argv() -> list[str]:
            return ["a", "b"]

        @task
        def word() -> str:
            return "w"

        @task
        def image() -> str:
            return "alpine:3.20"

        chain.stage("whole", image="busybox:1.36", cmds=["echo"], arguments=argv())
        chain.stage("items", image="busybox:1.36", cmds=["echo", word()], env_vars={"W": word()})
        chain.stage("picked", image=image(), cmds=["true"])

    dag = build(body)
    assert "c.argv" in dag.task_dict["c.whole"].upstream_task_ids
    assert {"c.word", "c.word__1"} <= dag.task_dict["c.items"].upstream_task_ids
    assert "c.image" in dag.task_dict["c.picked"].upstream_task_ids
    assert dag.task_dict["c.prewarm"].images == ["busybox:1.36"]  # the XCom image: set by its swap
    chain = spec(dag)
    assert chain.stages[2].image == STAND_IN_IMAGE
    json.dumps(dag.task_dict["c.setup"].chain)  # the setup's chain holds no XComArg


def test_container_resources_as_kpo_users_give_them() -> None:
    """Numbers where Kubernetes takes a quantity (`{"cpu": 1}`, as the client serialises them) and
    extended resources, in a dict or a V1ResourceRequirements."""

    def body(chain: KruiseChain) -> None:
        chain.stage(
            "train",
            image="busybox:1.36",
            cmds=["true"],
            container_resources=k8s.V1ResourceRequirements(
                requests={"cpu": 0.5, "memory": "1Gi"}, limits={"cpu": 1, "memory": "2Gi"}
            ),
        )
        chain.stage(
            "infer",
            image="busybox:1.36",
            cmds=["true"],
            container_resources={"limits": {"nvidia.com/gpu": 1, "memory": "512Mi"}},
        )

    stages = spec(build(body)).stages
    assert stages[0].resources == {
        "requests": {"cpu": "0.5", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "2Gi"},
    }
    assert stages[1].resources == {"limits": {"nvidia.com/gpu": "1", "memory": "512Mi"}}


def test_kpos_xcom_file_is_refused_naming_chain_output() -> None:
    """KPO's `do_xcom_push=True` pushes what the container wrote to /airflow/xcom/return.json; a chain
    stage does not read that file (it would outlive the stage in its slot): refused at parse, naming
    `$CHAIN_OUTPUT`, for a stage and a mapped stage. `False` asks for nothing more than a stage does."""
    write = ["sh", "-c", "mkdir -p /airflow/xcom/;echo '[1,2,3,4]' > /airflow/xcom/return.json"]
    for body in (
        lambda chain: chain.stage("write-xcom", image="alpine:3.20", cmds=write, do_xcom_push=True),
        lambda chain: chain.stage.partial("w", image="alpine:3.20", cmds=write, do_xcom_push=True).expand(
            arguments=[["a"]]
        ),
    ):
        err = refused(body)
        assert err.field == "stages[0].do_xcom_push"
        assert "/airflow/xcom/return.json" in err.message and "$CHAIN_OUTPUT" in err.message
        assert "['outputs']" in err.message
    build(lambda chain: chain.stage("quiet", image="alpine:3.20", cmds=["true"], do_xcom_push=False))


def test_a_refused_model_is_named_as_kubernetes_writes_it() -> None:
    err = refused(
        lambda chain: chain.stage(
            "web",
            image="busybox:1.36",
            cmds=["true"],
            ports=[k8s.V1ContainerPort(name="http", container_port=80)],
        )
    )
    assert "[{'containerPort': 80, 'name': 'http'}]" in err.message and "\n" not in err.message


# -- TaskFlow functions that could not run in the pod: refused at parse, naming what to do instead ---------
def uses_context() -> str:
    from airflow.sdk import get_current_context

    return get_current_context()["ds"]


def reads_a_variable() -> str:
    from airflow.sdk import Variable

    return Variable.get("bucket")


def reads_a_connection() -> str:
    from airflow.hooks.base import BaseHook

    return BaseHook.get_connection("db").password


def uses_a_dag_file_name(x: int = 1) -> int:
    return x * SCALE


def uses_a_module_of_the_dag_file(data: dict[str, int] | None = None) -> str:
    return json.dumps(data)


def default_from_the_dag_file(x: int = SCALE) -> int:
    return x


def self_contained(
    values: list[int], *rest: int, scale: int = 2, decoder: json.JSONDecoder | None = None, **named: int
) -> dict[str, Any]:
    import statistics

    from airflow.sdk import literal  # an Airflow import the image may serve (not the Task SDK's runtime)

    assert literal

    def twice(v: int) -> int:
        return 2 * v

    total = sum(twice(v) for v in values) * scale + len(rest) + len(named)
    return {"total": total, "median": statistics.median(values), "max": max(values), "self": self_contained}


def closure_of(factor: int) -> Callable[..., int]:
    def scaled(x: int = 1) -> int:
        return x * factor

    return scaled


@pytest.mark.parametrize(
    ("function", "says"),
    [
        (uses_context, "get_current_context()"),
        (reads_a_variable, "'{{ var.value.KEY }}'"),
        (reads_a_connection, "secrets=[Secret("),
        (uses_a_dag_file_name, "'SCALE'"),
        (uses_a_module_of_the_dag_file, "import json"),
        (default_from_the_dag_file, "'SCALE'"),
        (closure_of(3), "'factor'"),
    ],
)
def test_a_taskflow_function_that_needs_what_stays_behind_is_refused(function: Any, says: str) -> None:
    err = refused(lambda chain: chain.task(image="python:3.11-slim")(function)())
    assert err.field == function.__name__ and says in err.message
    assert "only the function's source" in err.message or "without Airflow" in err.message


def test_a_self_contained_taskflow_function_is_taken() -> None:
    """Builtins, imports inside the function, nested functions, comprehensions, recursion by its own name,
    varargs and defaults of literals."""
    dag = build(lambda chain: chain.task(image="python:3.11-slim")(self_contained)([1, 2], 3, scale=1, k=4))
    assert dag.task_dict["c.self_contained"].stage_name == "self-contained"


def test_a_stage_with_another_trigger_rule_follows_the_stages_before_it() -> None:
    """`trigger_rule="all_done"` on a stage after others (a clean-up), with or without the prewarm: Airflow
    wants a setup task's direct downstream to be all_success, so such a stage follows the chain's setup
    through the stages before it (Airflow still holds it while the setup has not succeeded); a stage no
    other stage precedes cannot have one without the prewarm, refused naming the field."""
    for prewarm in (False, True):

        def body(chain: KruiseChain) -> None:
            work = chain.stage("work", image="busybox:1.36", cmds=["true"])
            mapped = chain.stage.partial("each", image="busybox:1.36", cmds=["echo"], trigger_rule="all_done")
            cleanup = chain.stage("cleanup", image="busybox:1.36", cmds=["true"], trigger_rule="all_done")
            work >> mapped.expand(arguments=[["a"]]) >> cleanup

        dag = build(body, prewarm=prewarm)
        dag.validate()  # what dag.test() and the DAG processor do
        first = "c.prewarm" if prewarm else "c.setup"
        assert dag.task_dict["c.cleanup"].upstream_task_ids == {"c.each"} | ({first} if prewarm else set())
        assert first in dag.task_dict["c.work"].upstream_task_ids

    err = refused(
        lambda chain: chain.stage("alone", image="busybox:1.36", cmds=["true"], trigger_rule="all_done"),
        prewarm=False,
    )
    assert err.field == "stages[0].trigger_rule" and "after another stage" in err.message


def test_a_stage_declared_after_its_chains_block_is_refused() -> None:
    """A `@chain.task` function (or `chain.stage`) called after the `with` block: the chain's pod is defined
    when the block ends."""
    with DAG("users", schedule=None, start_date=START):
        with KruiseChain("c", namespace="default") as chain:

            @chain.task(image="python:3.11-slim")
            def half(total: int) -> int:
                return total // 2

            half(4)
        for late in (lambda: half(2), lambda: chain.stage("late", image="busybox:1.36", cmds=["true"])):
            with pytest.raises(ChainConfigError) as err:
                late()
            assert "inside `with KruiseChain" in err.value.message


def test_a_chain_in_a_mapped_task_group_is_refused_naming_mapped_stages() -> None:
    """`@task_group` ... `.expand()` around a chain: its map indexes would share the run's one chain pod
    (each setup finds it, each teardown deletes it under the others); map the stages instead."""
    from airflow.sdk import task_group

    with DAG("users", schedule=None, start_date=START), pytest.raises(ChainConfigError) as err:

        @task_group
        def per_file(path: str) -> None:
            with KruiseChain("c", namespace="default") as chain:
                chain.stage("cat", image="busybox:1.36", cmds=["cat"], arguments=[path])

        per_file.expand(path=["/a", "/b"])
    assert err.value.field == "c" and "chain.stage.partial(" in err.value.message


def test_a_mapped_stages_kpo_env_vars_and_its_expanded_env_are_one_field() -> None:
    """`partial(env_vars=...)` (KPO's name of `env`) with `.expand(env=...)`: a field given twice, as Airflow
    refuses a partial's argument expanded too (it dropped the partial's before); `expand(env_vars=...)`
    names `env`, the field a mapped stage expands."""
    err = refused(
        lambda chain: chain.stage.partial(
            "each", image="busybox:1.36", cmds=["env"], env_vars={"A": "1"}
        ).expand(env=[{"B": "2"}])
    )
    assert err.field == "stages[0].env" and "given both in partial(...) and expanded" in err.message
    err = refused(
        lambda chain: chain.stage.partial("each", image="busybox:1.36", cmds=["env"]).expand(
            env_vars=[{"B": "2"}]
        )
    )
    assert err.field == "stages[0].env_vars" and "expand(env=" in err.message


def test_taskflow_arguments_that_cannot_travel_as_json_are_refused_at_parse() -> None:
    """A literal argument JSON cannot carry (a set, a datetime) fails when the DAG is parsed, naming it, not
    when the stage runs; templates and XComArgs are checked once rendered."""
    import datetime

    def body(value: Any) -> Callable[[KruiseChain], Any]:
        return lambda chain: chain.task(image="python:3.11-slim")(self_contained)([1], 2, k=value)

    for value in ({1, 2}, datetime.date(2026, 1, 1)):
        err = refused(body(value))
        assert err.field == "k" and "is not JSON" in err.message
    build(body(3))


def test_a_chain_of_many_mapped_stages_is_told_about_max_map_length() -> None:
    """Four mapped TaskFlow stages (each counting its `max_map_length` records in the pod's annotations, 128
    by default) outgrow the annotations: the refusal names `max_map_length`, and lowering it is enough."""

    def body(limit: int | None) -> Callable[[KruiseChain], Any]:
        def declare(chain: KruiseChain) -> None:
            for name in ("one", "two", "three", "four"):
                extra = {"max_map_length": limit} if limit else {}
                chain.task(image="python:3.11-slim", task_id=name, **extra)(self_contained).expand(
                    values=[[1], [2]]
                )

        return declare

    err = refused(body(None))
    assert "max_map_length" in err.message and "one, two, three, four" in err.message
    build(body(32))
