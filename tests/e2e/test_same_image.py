"""Chains whose stages share images: a slot that already holds a stage's image runs it with no container
restart (the operator changes only annotations; the long-lived runner reads them from its downwardAPI
volume), so no start can fall in the kubelet's restart back-off: no BackOff event, no CrashLoopBackOff."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, pod_events, restarts_and_back_offs, run_inline, start_markers

pytestmark = pytest.mark.slow

A = "busybox:1.36"
B = "alpine:3.20"
STEP = r"""
n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$CHAIN_SCRATCH/count"
printf '{"count": %s}' $((n + 1)) > "$CHAIN_OUTPUT"
sleep 0.2
"""


def run_chain(
    cluster: Any, capfd: Any, images: list[str], history: list | None = None, **options: Any
) -> tuple[Any, list, str]:
    from airflow.sdk import DAG

    history = pod_events(cluster) if history is None else history
    names = [f"s{k:02d}" for k in range(1, len(images) + 1)]
    with DAG("same_image", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        from airflow_kruise_chain.chain import KruiseChain

        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **options) as chain:
            tasks = [
                chain.stage(name, image=image, cmds=["/bin/sh", "-c", STEP])
                for name, image in zip(names, images, strict=True)
            ]
            for before, after in pairwise(tasks):
                before >> after
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]

    # every stage ran once, in order, each reading the one before's data
    results = xcoms(run)
    assert [results[f"c.{s}"]["outputs"] for s in names] == [{"count": k} for k in range(1, len(names) + 1)]
    assert [results[f"c.{s}"]["image"] for s in names] == images
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])] == list(
        enumerate(names, start=1)
    )
    return run, history, out


def assert_no_restart_and_no_back_off(cluster: Any, history: list, out: str, stages: int) -> None:
    # no ContainerRecreateRequest, no image patch: every swap changed annotations only
    assert not [p for m, p, _ in cluster.audit if m == "POST" and "containerrecreaterequests" in p]
    assert out.count("via annotations only") == stages
    images = {
        tuple(c["image"] for c in o["spec"]["containers"])
        for k, r, o in history
        if r is R.PODS and k == "MODIFIED"
    }
    assert len(images) == 1, images

    # no start delayed: no BackOff or Killing event (but the pod's teardown's), no CrashLoopBackOff in any
    # status, no restart
    assert not (found := restarts_and_back_offs(history)), [e["message"] for e in found]
    statuses = [
        cs
        for k, r, o in history
        if r is R.PODS
        for cs in (o.get("status") or {}).get("containerStatuses") or ()
    ]
    assert "CrashLoopBackOff" not in {
        ((cs.get("state") or {}).get("waiting") or {}).get("reason") for cs in statuses
    }
    assert {cs.get("restartCount", 0) for cs in statuses} == {0}


def test_twenty_stages_on_one_image_never_restart_a_slot(e2e_cluster, capfd):
    images = [A] * 20
    _, history, out = run_chain(e2e_cluster, capfd, images)
    assert_no_restart_and_no_back_off(e2e_cluster, history, out, len(images))


def test_alternating_images_stay_in_their_slots(e2e_cluster, capfd):
    images = [A, B] * 5
    _, history, out = run_chain(e2e_cluster, capfd, images)
    assert_no_restart_and_no_back_off(e2e_cluster, history, out, len(images))
