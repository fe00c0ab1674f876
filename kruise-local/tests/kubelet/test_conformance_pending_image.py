"""Conformance of the local kubelet's pending update with the real one, for an image patched and patched back:
`pod_workers.go` `UpdatePod` keeps one `pendingUpdate` per pod and a newer update replaces it, so a sync
that is busy (here: killing a container that ignores SIGTERM, grace period 4 s) ends and the next sync gets
the newest pod only. An image A -> B -> A within that sync leaves a spec whose hash (`HashContainer`: name and
image) is the running container's: `computePodActions` restarts nothing. (The provider must not count on a
restart there: `airflow_kruise_chain/core/swap.py` `_back_unseen`.) Through the real `kubernetes` client."""

from __future__ import annotations

import time
from typing import Any

from kruise_local.testing import container, pod_body, running, status_of, wait_for

A, B = "busybox:1.36", "alpine:3.20"


def _image(core: Any, ns: str, name: str, image: str) -> None:
    core.patch_namespaced_pod("p", ns, {"spec": {"containers": [{"name": name, "image": image}]}})


def _killing(core: Any, ns: str, name: str) -> bool:
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=p").items
    return any(e.reason == "Killing" and name in (e.message or "") for e in events)


def test_an_image_patched_and_back_within_a_busy_sync_restarts_nothing(
    realistic: Any, realistic_ns: str
) -> None:
    core, ns = realistic, realistic_ns
    stubborn = container("k", 'trap "" TERM; while :; do sleep 0.2; done')
    body = pod_body("p", stubborn, container("c", "sleep 3600", image=A), terminationGracePeriodSeconds=4)
    core.create_namespaced_pod(ns, body)
    wait_for(lambda: running(core, ns, "p", "c") and running(core, ns, "p", "k"))
    before, k = (status_of(core, ns, "p", name).container_id for name in ("c", "k"))
    _image(core, ns, "k", B)  # the sync that kills k takes its 4 s grace period
    wait_for(lambda: _killing(core, ns, "k"), interval=0.05, what="k's kill")
    _image(core, ns, "c", B)  # pending...
    _image(core, ns, "c", A)  # ...and replaced: the sync after the kill gets c on A
    wait_for(lambda: (s := running(core, ns, "p", "k")) and s.container_id != k, timeout=30, what="k on B")
    time.sleep(3)  # a relist and a sync more: any restart of c would show by now
    after = status_of(core, ns, "p", "c")
    assert after.container_id == before and after.restart_count == 0 and after.state.running is not None
