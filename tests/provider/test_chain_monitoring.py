"""What a stage task records for monitoring (XCom `chain_state`), and the live view of the chain pod."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_kruise_chain.core import ChainError
from airflow_kruise_chain.core.chainstate import XCOM_KEY, chain_view
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
    assert done["memory_samples"] >= 2 and done["memory_peak_bytes"] > 0
    assert done["memory_peak_bytes"] <= done["pod_memory_peak_bytes"]
    assert done["swapped_at"] <= done["started_at"] < done["finished_at"]


def test_a_stage_that_cannot_start_records_why(chain_run):  # noqa: F811
    context = chain_run.context()
    with pytest.raises(ChainError, match="could not start"):
        chain_run.stage("missing").execute(context)
    state = context["ti"].xcom[XCOM_KEY]
    assert state["state"] == "failed" and state["exit_code"] is None
    assert "could not start" in state["error"]
    assert "ErrImagePull" in state["error"]
    # the swap phase ends when the failure was recorded, not "ongoing"
    (swap,) = chain_view([state])["stages"][0]["phases"]
    assert swap["phase"] == "swap" and swap["end"] == state["updated_at"]
