"""`KubeConnection`: one value from the DAG author's keyword arguments to every task, trigger and hook."""

from __future__ import annotations

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.connection import KubeConnection
from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseHook
from airflow_kruise_chain.operators.base import ChainBaseOperator
from airflow_kruise_chain.operators.chain import KruiseChainOperator
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor
from airflow_kruise_chain.triggers.chain import StageTrigger

CONN = KubeConnection("k8s_data", "/etc/kube/config", "prod", False)
STAGE = {"image": "busybox:1.36", "cmds": ["/bin/sh", "-c", "true"]}


def test_round_trip_through_a_dict() -> None:
    assert KubeConnection.from_dict(CONN.to_dict()) == CONN
    assert KubeConnection.from_dict({}) == KubeConnection()
    assert KubeConnection().kubernetes_conn_id == "kubernetes_default"


def test_an_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match=r"unknown key 'conn_id'; choose from cluster_context, config_file"):
        KubeConnection.from_dict({"conn_id": "x"})


@pytest.mark.parametrize("make", [KubeConnection.hook, KubeConnection.async_hook], ids=["sync", "async"])
def test_hooks_get_the_connection(make) -> None:
    hook = make(CONN)
    assert isinstance(hook, (KruiseHook, AsyncKruiseHook))
    assert (hook.conn_id, hook.config_file, hook.cluster_context, hook.in_cluster) == (
        "k8s_data",
        "/etc/kube/config",
        "prod",
        False,
    )


def test_every_task_of_a_chain_gets_the_chains_connection() -> None:
    with DAG("conn", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("etl", namespace="data", **CONN.to_dict()) as chain:
            chain.stage("a", **STAGE)
            HotSwapSensor(task_id="wait", chain_name="etl", namespace="data", stage="a", **CONN.to_dict())
    tasks = [t for t in dag.tasks if isinstance(t, ChainBaseOperator)]
    assert {t.task_id for t in tasks} == {"etl.setup", "etl.prewarm", "etl.a", "etl.wait", "etl.teardown"}
    assert all(t.connection == CONN for t in tasks)


def test_config_file_is_templated_into_the_connection() -> None:
    task = KruiseChainOperator(
        task_id="a", chain_name="etl", namespace="data", stage_name="a", config_file="{{ cfg }}", **STAGE
    )
    assert "config_file" in task.template_fields
    task.render_template_fields({"cfg": "/rendered/config"})
    assert task.connection == KubeConnection(config_file="/rendered/config")
    assert task.hook.config_file == "/rendered/config"


def test_a_trigger_keeps_its_connection_through_serialization() -> None:
    trigger = StageTrigger(pod_name="p", namespace="data", stage="a", connection=CONN)
    _, kwargs = trigger.serialize()
    assert kwargs["connection"] == CONN.to_dict()
    assert StageTrigger(**kwargs).connection == CONN
    assert StageTrigger(pod_name="p", namespace="data", stage="a").connection == KubeConnection()


def test_a_dags_default_args_reach_the_connection() -> None:
    args = {"kubernetes_conn_id": "k8s_from_default_args", "config_file": "/from/default/args"}
    with DAG("conn", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), default_args=args):
        with KruiseChain("etl", namespace="data", kubernetes_conn_id=None) as chain:
            stage = chain.stage("a", **STAGE)
        sensor = HotSwapSensor(task_id="wait", chain_name="etl", namespace="data", stage="a")
    assert sensor.connection == KubeConnection("k8s_from_default_args", "/from/default/args")
    # a chain hands all of its own connection arguments to its tasks
    assert stage.connection == KubeConnection(None)
