"""Prewarming when OpenKruise's ImagePullJobGate feature gate is off (its default)."""

from __future__ import annotations

import pytest
from kruise_local import resources as R
from kruise_local.imageref import normalize

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

IMAGES = (
    "ghcr.io/airflow-kruise-chain/generate:1.0",
    "ghcr.io/airflow-kruise-chain/transform:2.1",
    "ghcr.io/airflow-kruise-chain/report:0.9",
)


def gated_dag(dag_id: str, failures: Failures, **chain_kwargs):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        default_args={"retries": 2, "retry_delay": 0},
    ) as dag:
        with KruiseChain("c", namespace="default", prewarm=True, **FAST_POD, **chain_kwargs) as chain:
            previous = None
            for i, image in enumerate(IMAGES):
                task = chain.stage(f"s{i}", image=image, cmds=["/bin/sh", "-c", f"echo stage {i}"])
                if previous is not None:
                    previous >> task
                previous = task
        chain.prewarm_task.on_failure_callback = [failures]
    return dag


def test_prewarm_fails_with_how_to_enable_the_gate(e2e_cluster):
    cluster = e2e_cluster
    cluster.gates["ImagePullJobGate"] = False
    failures = Failures()
    history = pod_events(cluster)
    run = run_inline(gated_dag("chain_gate_off", failures))

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.prewarm"][:2] == ("failed", 1)  # not retried (retries=2): retrying cannot help
    assert {states[f"c.s{i}"][0] for i in range(3)} == {"upstream_failed"}
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    message = str(failures.errors["c.prewarm"])
    assert "ImagePullJobGate" in message
    assert "featureGates" in message and "ImagePullJobGate=true" in message  # how to enable it
    assert "on_prewarm_unavailable" in message and "prewarm=False" in message  # how to skip it
    assert "403" in message or "not enabled" in message  # what the cluster said
    assert [o for k, r, o in history if r is R.IMAGE_PULL_JOBS] == []  # refused by the webhook: none exists
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert cluster.call(lambda: cluster.store.peek(R.PODS, "default", pod["metadata"]["name"])) is None


def test_skip_when_the_gate_is_off_runs_the_stages_pulling_on_demand(e2e_cluster, capfd):
    cluster = e2e_cluster
    cluster.gates["ImagePullJobGate"] = False
    history = pod_events(cluster)
    # the third image is pulled by its own stage's swap, not prepared ahead while the second runs
    dag = gated_dag("chain_gate_skip", Failures(), on_prewarm_unavailable="skip", prepare_next=False)
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "success"
    assert {state for state, _, _ in task_states(run).values()} == {"success"}
    assert "prewarm skipped" in out and "ImagePullJobGate" in out  # a warning says what was skipped and why
    assert xcoms(run)["c.prewarm"] == {}
    assert [o for k, r, o in history if r is R.IMAGE_PULL_JOBS] == []
    results = xcoms(run)
    assert [results[f"c.s{i}"]["exit_code"] for i in range(3)] == [0, 0, 0]

    # the kubelet pulled each image itself: the first two with the pod, the third at its stage's swap
    node = cluster.kubelet.nodes["kruise-local"]
    for image in IMAGES:
        assert normalize(image) in node.pulled_at, image
    swapped_in = results["c.s2"]["started_at"]
    from datetime import datetime

    assert node.pulled_at[normalize(IMAGES[2])] <= datetime.fromisoformat(swapped_in)
    assert node.pulled_at[normalize(IMAGES[2])] > datetime.fromisoformat(results["c.s1"]["finished_at"])
