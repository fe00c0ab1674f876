"""A chain written the way KubernetesPodOperator tasks are written (its argument names, `kubernetes.client`
models, `image_pull_secrets` as a comma-separated string), run end to end: the pod gets what the arguments
mean, `skip_on_exit_code` skips its task, `on_finish_action="delete_succeeded_pod"` keeps the pod of a
chain that failed."""

from __future__ import annotations

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import run_inline, task_states

pytestmark = pytest.mark.slow
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def test_a_chain_written_with_kpo_arguments_runs_with_their_meaning(e2e_cluster) -> None:
    from airflow.sdk import DAG
    from kruise_local import resources as R
    from kubernetes.client import models as k8s

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core.manifest import pod_name_for

    with DAG("kpo_style", schedule=None, start_date=START) as dag:
        with KruiseChain(
            "kpo",
            namespace="default",
            prewarm=False,
            on_finish_action="delete_succeeded_pod",
            image_pull_secrets="regcred, mirror",
            tolerations=[k8s.V1Toleration(key="dedicated", operator="Exists", effect="NoSchedule")],
            labels={"team": "data"},
            termination_grace_period=2,
        ) as chain:
            greet = chain.stage(
                "greet",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c"],
                arguments=['printf \'{"said": "%s"}\' "$GREETING" > "$CHAIN_OUTPUT"'],
                env_vars=[k8s.V1EnvVar(name="GREETING", value="hello")],
                container_resources=k8s.V1ResourceRequirements(limits={"memory": "64Mi"}),
                get_logs=True,
                startup_timeout_seconds=120,
            )
            maybe = chain.stage(
                "maybe", image="busybox:1.36", cmds=["/bin/sh", "-c", "exit 3"], skip_on_exit_code=3
            )
            broken = chain.stage("broken", image="busybox:1.36", cmds=["/bin/sh", "-c", "exit 1"])
            greet >> [maybe, broken]

    run = run_inline(dag)
    states = {task: state for task, (state, _, _) in task_states(run).items()}
    assert states["kpo.greet"] == "success"
    assert states["kpo.maybe"] == "skipped"
    assert states["kpo.broken"] == "failed"
    assert states["kpo.teardown"] == "failed"  # the verdict: a stage failed
    assert xcoms(run)["kpo.greet"]["outputs"] == {"said": "hello"}
    name = pod_name_for("kpo", "kpo_style", run.run_id)
    pods = e2e_cluster.call(lambda: list(e2e_cluster.store.items(R.PODS, "default")))
    (pod,) = [p for p in pods if p["metadata"]["name"] == name]  # kept: the chain did not succeed
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
    assert {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["terminationGracePeriodSeconds"] == 2
    assert pod["metadata"]["labels"]["team"] == "data"
