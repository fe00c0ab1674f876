"""A slot prepared two ahead is said go to as soon as the pod's status shows its new container running, before
its startup probe passed (core/status.py `_prepared_state`): the kubelet killed the old container before it
started the new one, and `runner --go` waits for the new runner to serve. Here the kubelet's startup probe
workers of the chain pod stop once both slots started (as if their next tick never came: on a real kubelet
it comes up to a period later): every restarted container stays running and not `started`, so every stage
after the first two runs in a container whose probe never passed, which no swap would go into before (the
chain waited there until its swap timeout). Not timed: the pod's versions show each go next to its slot's
status."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from airflow_kruise_chain.core.constants import SLOTS
from airflow_kruise_chain.core.podview import ChainPod
from tests.e2e.conftest import xcoms
from tests.e2e.inline import pod_events, run_inline, stage_records, start_markers
from tests.e2e.test_prepare import IMAGES, STEP, sized_chain, versions

pytestmark = pytest.mark.slow

SHORT = STEP.replace("sleep 1", "sleep 0.2")


def hold_startup_probes(cluster: Any, done: threading.Event) -> threading.Thread:
    """Stop the startup probe workers of the chain pod once both its slots started (on the cluster's loop,
    polled from a thread until `done`)."""

    def held() -> bool:
        for worker in cluster.kubelet.workers.values():
            slots = [worker.containers.get(slot) for slot in SLOTS]
            if all(st is not None and st.started for st in slots):
                for slot in SLOTS:
                    probe = worker.probe_workers.get((slot, "startupProbe"))
                    if probe is not None and probe.task is not None:
                        probe.task.cancel()
                return True
        return False

    def hold() -> None:
        while not done.is_set() and not cluster.call(held):
            time.sleep(0.02)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    return thread


def test_a_prepared_slot_is_said_go_to_before_its_startup_probe_passed(e2e_cluster, capfd):
    history = pod_events(e2e_cluster)
    done = threading.Event()
    holder = hold_startup_probes(e2e_cluster, done)
    names = [f"s{k}" for k in range(1, len(IMAGES) + 1)]
    dag = sized_chain("prepare_go_early", SHORT)
    try:
        run = run_inline(dag)
    finally:
        done.set()
        holder.join(timeout=10)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]

    # each stage ran once, in order, on its own image, reading the one before's data
    results = xcoms(run)
    assert [results[f"c.{s}"]["outputs"] for s in names] == [{"count": k} for k in range(1, 6)]
    assert [results[f"c.{s}"]["image"] for s in names] == IMAGES
    pods = versions(history)
    uid = pods[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == list(enumerate(names, start=1))
    assert out.count("via annotations only") == 5 and "via image patch" not in out
    assert out.count("::kruise-chain:: prepare slot=") == 3

    # s3, s4 and s5 each went into the slot prepared for it: the version of the pod its swap made shows that
    # slot's new container (not the one the prepare found) running, its startup probe not passed
    for k in (3, 4, 5):
        swapped = next(pod for pod in pods if f"s{k}" in stage_records(pod["metadata"]["annotations"]))
        record = stage_records(swapped["metadata"]["annotations"])[f"s{k}"]
        slot = record["slot"]
        view = ChainPod.of(swapped).slot(slot)
        status = next(s for s in swapped["status"]["containerStatuses"] if s["name"] == slot)
        assert view.prepare is not None and view.prepare.stage == f"s{k}", (k, view.prepare)
        assert status["containerID"] != view.prepare.previous_container_id, (k, status)
        assert "running" in status["state"] and status.get("started") is False, (k, status)
        assert record["previous_container_id"] == status["containerID"]  # said go to in that container
