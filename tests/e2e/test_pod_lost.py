"""The chain pod is lost mid-stage (deleted, or its node lost): the stage fails with PodLostError naming it,
later stages do not run and nothing is recreated. The setup task never reuses another run's pod and replaces
a lost pod of its own run with a fresh one."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kruise_local import resources as R
from kruise_local.testing import wait_for

from airflow_kruise_chain.core import PodLostError, build_chain_pod, chain_labels, pod_name_for
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states
from tests.provider.support import make_context

pytestmark = pytest.mark.slow

MID = "echo mid started; sleep 30; echo mid done"


def when_started(cluster: Any, stage: str, then: Any) -> threading.Thread:
    """Call `then(pod)` once `stage` has started in the chain pod (its start marker is in a container log)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pods = cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))
            if pods and any(s == stage for _, s, _ in start_markers(cluster, pods[0]["metadata"]["uid"])):
                then(pods[0])
                return
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def delete_pod(cluster: Any, kubeconfig: Path) -> Any:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    return lambda pod: api.delete_namespaced_pod(pod["metadata"]["name"], "default")


@pytest.mark.parametrize("how", ["deleted", "node-lost"])
def test_a_lost_pod_fails_the_running_stage_and_nothing_later_runs(e2e_cluster, tmp_path, how):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    with DAG(f"chain_pod_{how}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=30, **FAST_POD) as chain:
            first = chain.stage("first", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo first"])
            mid = chain.stage(
                "mid", image="alpine:3.20", cmds=["/bin/sh", "-c", MID], on_failure_callback=failures
            )
            last = chain.stage("last", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo last"])
            first >> mid >> last
    if how == "deleted":
        lose = delete_pod(cluster, tmp_path / "kubeconfig")
    else:
        lose = lambda pod: cluster.lose_node(pod["spec"]["nodeName"])  # noqa: E731
    watcher = when_started(cluster, "mid", lose)
    run = run_inline(dag)
    watcher.join(timeout=5)

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.first"][0] == "success"
    assert states["c.mid"][0] == "failed"
    assert states["c.last"][0] == "upstream_failed"  # later stages do not run
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = failures.errors["c.mid"]
    assert isinstance(error, PodLostError), repr(error)
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    # "while stage 'mid' ran", or "while swapping stage 'mid' in" when the pod vanished before the operator
    # saw the stage's container running (a loaded machine): never "does not exist ... did setup run?"
    lost = f"chain pod default/{pod['metadata']['name']} lost while "
    assert str(error).startswith((lost + "stage 'mid' ran", lost + "swapping stage 'mid' in")), str(error)
    assert "delet" in str(error)  # what happened: deleted, or being deleted (evicted with its node)
    assert "clear the DAG run from the chain's setup task" in str(error)
    assert "c.mid" not in xcoms(run)  # never a silent success
    # nothing was recreated: one pod, and only the stages before the loss ever started
    assert [o["metadata"]["uid"] for k, r, o in history if r is R.PODS and k == "ADDED"] == [
        pod["metadata"]["uid"]
    ]
    assert [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])] == [
        (1, "first"),
        (2, "mid"),
    ]


def setup_operator(dag_id: str) -> Any:
    from airflow_kruise_chain.operators.chain import ChainSetupOperator

    stage = {"name": "only", "image": "busybox:1.36", "cmds": ["/bin/sh", "-c", "echo only"]}
    chain = {"name": "c", "namespace": "default", "stages": [stage], **FAST_POD}
    return ChainSetupOperator(task_id=f"setup-{dag_id}", chain=chain, startup_timeout=60)


def test_setup_refuses_a_pod_of_another_run(e2e_cluster):
    from airflow_kruise_chain.core import ChainError
    from airflow_kruise_chain.core.spec import ChainSpec

    setup = setup_operator("d")
    name = pod_name_for("c", "d", "run-1")
    spec = ChainSpec.from_dict(setup.chain)
    squatter = build_chain_pod(
        spec, pod_name=name, dag_id="d", run_id="run-0", first_images=spec.first_images
    )
    setup.hook.create_pod(squatter, "default")
    with pytest.raises(ChainError, match="not this DAG run's chain pod") as info:
        setup.execute(make_context("d", "run-1"))
    assert "refusing to reuse it" in str(info.value)
    kept = setup.hook.read_pod(name, "default")
    assert kept.labels == chain_labels("d", "run-0", "c")  # untouched


def test_setup_replaces_a_lost_pod_of_its_run_with_a_fresh_one(e2e_cluster):
    cluster = e2e_cluster
    setup = setup_operator("d")
    first = setup.execute(make_context("d", "run-1"))
    old = setup.hook.read_pod(first["pod"], "default")
    setup.hook.patch_pod(first["pod"], "default", {"spec": {"activeDeadlineSeconds": 1}})  # the pod fails
    deadline = time.monotonic() + 30
    while getattr(setup.hook.read_pod(first["pod"], "default"), "phase", None) != "Failed":
        assert time.monotonic() < deadline, "the pod did not fail"
        time.sleep(0.2)

    again = setup.execute(make_context("d", "run-1", try_number=2))  # the DAG run cleared from setup

    assert again["pod"] == first["pod"]
    fresh = setup.hook.read_pod(again["pod"], "default")
    assert fresh.uid != old.uid
    assert fresh.phase == "Running"
    created = [p for m, p, c in cluster.audit if m == "POST" and p.endswith("/pods") and c == 201]
    deleted = [p for m, p, c in cluster.audit if m == "DELETE" and p.endswith(f"/pods/{first['pod']}")]
    assert (len(created), len(deleted)) == (2, 1)
    # a healthy pod of the same run is reused as it is (a retry of setup)
    setup.execute(make_context("d", "run-1", try_number=3))
    assert setup.hook.read_pod(again["pod"], "default").uid == fresh.uid


def test_a_failed_setup_leaves_no_pod(e2e_cluster):
    from airflow_kruise_chain.core import ChainError

    cluster = e2e_cluster
    stage = {"name": "only", "image": "ghcr.io/airflow-kruise-chain/missing:1.0", "cmds": ["true"]}
    from airflow_kruise_chain.operators.chain import ChainSetupOperator

    chain = {"name": "c", "namespace": "default", "stages": [stage], **FAST_POD}
    setup = ChainSetupOperator(task_id="setup", startup_timeout=60, chain=chain)
    with pytest.raises(ChainError, match=r"cannot start: .*(ErrImagePull|ImagePullBackOff)"):
        setup.execute(make_context("d", "run-1"))
    created = [p for m, p, c in cluster.audit if m == "POST" and c == 201]
    # it did create it (and the runner's ConfigMap, nothing else)
    assert [p.rsplit("/", 1)[1] for p in created] == ["configmaps", "pods"]
    pods = lambda: cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))  # noqa: E731
    wait_for(lambda: not pods(), 30, what="the pod to be gone")


def test_setup_replaces_a_pod_built_from_another_definition_of_the_chain(e2e_cluster):
    from airflow_kruise_chain.core.podidentity import SPEC_HASH_ANNOTATION

    first = setup_operator("d")
    pod = first.hook.read_pod(first.execute(make_context("d", "run-1"))["pod"], "default")
    changed = setup_operator("d")  # the DAG file changed: another image for the stage
    changed.chain = {**changed.chain, "stages": [{**changed.chain["stages"][0], "image": "alpine:3.20"}]}

    changed.execute(make_context("d", "run-1", try_number=2))

    fresh = changed.hook.read_pod(pod.name, "default")
    assert fresh.uid != pod.uid
    assert "alpine:3.20" in {slot.image for slot in fresh.slots.values()}
    hashes = [p.annotations[SPEC_HASH_ANNOTATION] for p in (pod, fresh)]
    assert hashes[0] != hashes[1]
