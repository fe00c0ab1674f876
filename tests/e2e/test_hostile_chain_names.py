"""Two chains of one name in one DAG (issue 12, item 1): in different task groups each has its own pod, labels
and stage records (its full task-group path identifies it); a clash that would still share a pod is refused
when the DAG is parsed."""

from __future__ import annotations

import pendulum
import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core import ChainConfigError
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, pod_events, run_inline, task_states

START = pendulum.datetime(2026, 1, 1, tz="UTC")
GROUPS = {"g1": "busybox:1.36", "g2": "alpine:3.20"}


@pytest.mark.slow
def test_same_named_chains_in_two_task_groups_get_their_own_pods_and_results(e2e_cluster) -> None:
    from airflow.sdk import DAG, TaskGroup

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core import CHAIN_LABEL
    from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

    history = pod_events(e2e_cluster)
    with DAG("hostile_same_chain_name", schedule=None, start_date=START) as dag:
        for group, image in GROUPS.items():
            with TaskGroup(group), KruiseChain("etl", namespace="default", prewarm=True, **FAST_POD) as chain:
                stage = chain.stage(
                    "s",
                    image=image,
                    cmds=["/bin/sh", "-c", f"""printf '{{"group": "{group}"}}' >"$CHAIN_OUTPUT\""""],
                )
                seen = HotSwapSensor(
                    task_id="seen", chain_name="etl", namespace="default", stage="s", poke_interval=1
                )
                stage >> seen
        outside = HotSwapSensor(
            task_id="outside", chain_name="etl", chain_path="g2.etl", namespace="default", stage="s"
        )
        stage >> outside >> chain.teardown_task  # g2's chain: its pod is there until `outside` is done
    run = run_inline(dag)

    states = task_states(run)
    assert str(run.state) == "success", states
    results = xcoms(run)
    for group, image in GROUPS.items():
        result = results[f"{group}.etl.s"]
        # its own stage ran (not a "reattach" to the other chain's generation): its image and its output
        assert (result["image"], result["outputs"], result["generation"]) == (image, {"group": group}, 1)
        assert states[f"{group}.etl.seen"][0] == "success"  # the sensor watched its own chain's pod
    assert states["outside"][0] == "success"  # a sensor outside the groups names the chain by its path
    created = [o for kind, r, o in history if r is R.PODS and kind == "ADDED"]
    assert len({p["metadata"]["name"] for p in created}) == 2  # one pod per chain
    assert sorted(p["metadata"]["labels"][CHAIN_LABEL] for p in created) == ["g1.etl", "g2.etl"]
    states_xcom = xcoms(run, "chain_state")
    assert {states_xcom[f"{g}.etl.s"]["chain"] for g in GROUPS} == {"g1.etl", "g2.etl"}
    assert states_xcom["g1.etl.s"]["pod"] != states_xcom["g2.etl.s"]["pod"]


def test_a_second_setup_of_the_same_chain_is_refused_at_parse() -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.operators.chain import ChainSetupOperator

    with pytest.raises(ChainConfigError) as err, DAG("hostile_clash", schedule=None, start_date=START):
        ChainSetupOperator(task_id="setup", chain={"name": "etl", "namespace": "default", "stages": []})
        with KruiseChain("etl", namespace="default") as chain:
            chain.stage("s", image="busybox:1.36", cmds=["true"])
    assert err.value.field == "name"
    assert "already has a setup task (setup)" in str(err.value)

    with pytest.raises(ChainConfigError), DAG("hostile_clash_2", schedule=None, start_date=START):
        ChainSetupOperator(task_id="a", chain={"name": "etl", "namespace": "default", "stages": []})
        ChainSetupOperator(task_id="b", chain={"name": "etl", "namespace": "other", "stages": []})

    with DAG("no_clash", schedule=None, start_date=START):  # a chain in a group is another chain
        from airflow.sdk import TaskGroup

        ChainSetupOperator(task_id="setup", chain={"name": "etl", "namespace": "default", "stages": []})
        with TaskGroup("g"), KruiseChain("etl", namespace="default") as chain:
            chain.stage("s", image="busybox:1.36", cmds=["true"])
