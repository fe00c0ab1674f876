"""What a stage task records for monitoring (XCom `chain_state`), and the live view of the chain pod."""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Any

import pytest
from kruise_local import LocalCluster

from airflow_kruise_chain.core import ChainError
from airflow_kruise_chain.core.chainstate import XCOM_KEY, chain_view
from airflow_kruise_chain.core.metrics import max_reads, sample_time
from airflow_kruise_chain.hooks.kruise import KruiseHook
from tests.provider.test_sensor_trigger import NS, chain_run  # noqa: F401  (the fixture)


def test_a_running_stage_shows_live_in_its_slot_then_its_result_and_peak_memory(chain_run):  # noqa: F811
    context = chain_run.context()
    op = chain_run.stage("slow")
    worker = threading.Thread(target=op.execute, args=(context,), daemon=True)
    worker.start()
    xcom = context["ti"].xcom
    deadline = time.monotonic() + 20
    while (xcom.get(XCOM_KEY) or {}).get("state") != "running":
        assert time.monotonic() < deadline, f"no running state published: {xcom.get(XCOM_KEY)}"
        time.sleep(0.05)
    running = dict(xcom[XCOM_KEY])

    hook = KruiseHook(conn_id="kubernetes_default")
    pod = hook.read_pod(running["pod"], NS)
    view = chain_view([running], pod=pod, metrics=hook.pod_metrics(running["pod"], NS))
    slot = next(s for s in view["slots"] if s["slot"] == running["slot"])
    assert view["live"] and view["pod_state"] == "Running"
    assert (slot["stage"], slot["generation"], slot["state"]) == ("slow", 1, "running")
    assert slot["memory_bytes"] > 0  # from the metrics API
    other = next(s for s in view["slots"] if s["slot"] != running["slot"])
    assert other["state"] == "parked"
    assert [p["phase"] for p in view["stages"][0]["phases"]] == ["swap", "pull", "run"]
    assert view["stages"][0]["phases"][-1]["end"] is None  # still running

    worker.join(timeout=30)
    done = xcom[XCOM_KEY]
    assert done["state"] == "succeeded" and done["exit_code"] == 0 and done["duration_seconds"] >= 2
    assert done["memory_samples"] >= 1 and done["memory_peak_bytes"] > 0
    assert done["memory_peak_bytes"] <= done["pod_memory_peak_bytes"]
    assert done["swapped_at"] <= done["started_at"] < done["finished_at"]


def test_a_stage_that_cannot_start_records_why(chain_run):  # noqa: F811
    context = chain_run.context()
    with pytest.raises(ChainError, match="could not start"):
        chain_run.stage("missing").execute(context)
    state = context["ti"].xcom[XCOM_KEY]
    assert state["state"] == "failed" and state["exit_code"] is None
    assert "could not start" in state["error"]
    # why, as the kubelet shows it: ErrImagePull at the failed pull, ImagePullBackOff once it backs off
    # (kuberuntime pullImage / the image back-off), so a loaded machine may first read either; the image and
    # the fix are named both ways
    assert re.search(r"image ghcr\.io/nope/missing:1\): (ErrImagePull|ImagePullBackOff): ", state["error"])
    assert "check that the image reference exists" in state["error"]
    # the swap phase ends when the failure was recorded, not "ongoing"
    (swap,) = chain_view([state])["stages"][0]["phases"]
    assert swap["phase"] == "swap" and swap["end"] == state["updated_at"]


def test_a_stage_reads_the_metrics_api_a_bounded_number_of_times(
    chain_run,  # noqa: F811
    kube_env: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 2 s stage sampled from 0.05 s on, the gap doubling up to 0.4 s: at most max_reads(T) metrics reads
    for a task of T seconds, and no read of a sample the local cluster has not renewed yet (its PodMetrics
    say window 1s, timestamp in whole seconds: one new sample a second), where a clock at 0.05 s made 40."""
    monkeypatch.setenv("AIRFLOW__KRUISE_CHAIN__MEMORY_SAMPLE_INTERVAL", "0.05")
    monkeypatch.setenv("AIRFLOW__KRUISE_CHAIN__MEMORY_SAMPLE_MAX_INTERVAL", "0.4")
    context = chain_run.context()
    reads: list[str] = []

    def tap(request: Any) -> None:
        if request.path.startswith("/apis/metrics.k8s.io/"):
            reads.append(request.path)

    kube_env.fault = tap
    began = time.monotonic()
    try:
        chain_run.stage("slow").execute(context)
    finally:
        kube_env.fault = None
    took = time.monotonic() - began
    done = context["ti"].xcom[XCOM_KEY]
    assert done["state"] == "succeeded" and done["memory_samples"] >= 1 and done["memory_peak_bytes"] > 0
    _, window = sample_time(KruiseHook(conn_id="kubernetes_default").pod_metrics(done["pod"], NS))
    assert window == 1.0
    assert reads and set(reads) == {f"/apis/metrics.k8s.io/v1beta1/namespaces/{NS}/pods/{done['pod']}"}
    assert len(reads) <= min(max_reads(took, 0.05, 0.4), math.ceil(took / window) + 2)
