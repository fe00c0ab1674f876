"""A chain whose stages all use one image: every swap is an image patch to the image's other spelling
(tag <-> tag@digest), so no ContainerRecreateRequest is made and no slot waits out a crash-loop back-off."""

from __future__ import annotations

import re
from itertools import pairwise

import pendulum
import pytest

from airflow_kruise_chain.local import resources as R
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, pod_events, run_inline, start_markers

pytestmark = pytest.mark.slow

IMAGE = "busybox:1.36"
STAGES = ["one", "two", "three", "four", "five"]
STEP = r"""
n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$CHAIN_SCRATCH/count"
printf '{"count": %s}' $((n + 1)) > "$CHAIN_OUTPUT"
"""


def test_same_image_stages_swap_by_digest_without_crr_or_back_off(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    with DAG("same_image", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            tasks = [chain.stage(name, image=IMAGE, cmds=["/bin/sh", "-c", STEP]) for name in STAGES]
            for before, after in pairwise(tasks):
                before >> after
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]

    # every stage ran once, in order, each reading the one before's data; the result names the user's image
    results = xcoms(run)
    assert [results[f"c.{s}"]["outputs"] for s in STAGES] == [{"count": k} for k in range(1, 6)]
    assert {results[f"c.{s}"]["image"] for s in STAGES} == {IMAGE}
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])] == list(
        enumerate(STAGES, start=1)
    )

    # no ContainerRecreateRequest: each swap patched the slot's image to its other spelling
    assert not [p for m, p, _ in cluster.audit if m == "POST" and "containerrecreaterequests" in p]
    assert out.count("via image patch (same image, by digest:") == len(STAGES)
    spellings = {
        c["image"] for k, r, o in history if r is R.PODS and k == "MODIFIED" for c in o["spec"]["containers"]
    }
    assert IMAGE in spellings and len(spellings) == 2, spellings
    assert re.fullmatch(rf"{re.escape(IMAGE)}@sha256:[0-9a-f]{{64}}", (spellings - {IMAGE}).pop())

    # no slot waited in CrashLoopBackOff: no BackOff event, no such waiting reason in any pod status
    events = [o for k, r, o in history if r is R.EVENTS and o["involvedObject"]["kind"] == "Pod"]
    assert not [e for e in events if e["reason"] == "BackOff"], [e["message"] for e in events]
    assert any(
        e["reason"] == "Killing" for e in events
    )  # the kubelet restarted the slots for the spec change
    waiting = {
        ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        for k, r, o in history
        if r is R.PODS
        for cs in (o.get("status") or {}).get("containerStatuses") or ()
    }
    assert "CrashLoopBackOff" not in waiting

    # the operator waited on the pod watch, not by polling it
    name = pod["metadata"]["name"]
    gets = sum(
        n for req, n in cluster.requests.items() if req == f"GET /api/v1/namespaces/default/pods/{name}"
    )
    assert gets <= 6 * len(STAGES), gets


def test_a_bare_digest_image_falls_back_to_a_crr_per_swap(e2e_cluster, capfd):
    """`repo@sha256:D` has no other spelling known (no tag): each swap restarts its slot with a
    ContainerRecreateRequest, deleted once the stage's container runs."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    image = f"busybox@{cluster.catalogue.lookup(IMAGE).digest}"
    with DAG("bare_digest", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            one, two = (chain.stage(name, image=image, cmds=["/bin/sh", "-c", STEP]) for name in STAGES[:2])
            one >> two
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]

    results = xcoms(run)
    assert [results[f"c.{s}"]["outputs"] for s in STAGES[:2]] == [{"count": 1}, {"count": 2}]
    assert {results[f"c.{s}"]["image"] for s in STAGES[:2]} == {image}
    assert out.count("via ContainerRecreateRequest (same image, no other spelling of it known)") == 2
    crrs = sorted(o["metadata"]["name"] for k, r, o in history if r is R.CRRS and k == "ADDED")
    assert [name.rsplit("-", 2)[1:] for name in crrs] == [["a", "g1"], ["b", "g2"]]
    assert {c["image"] for k, r, o in history if r is R.PODS for c in o["spec"]["containers"]} == {image}
