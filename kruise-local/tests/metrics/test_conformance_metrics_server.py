"""Conformance of the realistic profile's metrics API with metrics-server as shipped (resolution 15 s),
through the real `kubernetes` client: no metrics for a container younger than 10 s or with one scrape, the
window between two scrapes, the reading of the last scrape, and after a restart only points of the new
container."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from kruise_local.testing import container, pod_body, running, wait_for
from kubernetes.client import ApiException


def _metrics(core: Any, ns: str) -> dict[str, Any] | None:
    from kubernetes import client

    try:
        return client.CustomObjectsApi(core.api_client).get_namespaced_custom_object(
            "metrics.k8s.io", "v1beta1", ns, "pods", "p"
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _seconds(window: str) -> float:
    return float(window.removesuffix("s"))  # under a minute: Go writes "15.0001s"


def test_pod_metrics_follow_metrics_server_scrapes(realistic: Any, realistic_ns: str) -> None:
    core, ns = realistic, realistic_ns
    core.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 3600")))
    wait_for(lambda: running(core, ns, "p", "c"), timeout=60, what="running")
    started = time.monotonic()
    assert _metrics(core, ns) is None  # younger than 10 s: no scrape can have two points for it
    from kubernetes import client

    listed = client.CustomObjectsApi(core.api_client).list_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", ns, "pods"
    )
    assert listed["items"] == []
    first = wait_for(lambda: _metrics(core, ns), timeout=45, interval=0.5, what="metrics")
    assert time.monotonic() - started > 9.0  # never before the container is 10 s old
    assert 10.0 <= _seconds(first["window"]) <= 15.5, first["window"]
    again = _metrics(core, ns)
    assert again is not None
    if again["timestamp"] == first["timestamp"]:  # the same scrape: the same reading, not a live one
        assert again["containers"] == first["containers"] and again["window"] == first["window"]
    patch = {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    before = running(core, ns, "p", "c").container_id
    core.patch_namespaced_pod("p", ns, patch)
    wait_for(
        lambda: (cs := running(core, ns, "p", "c")) and cs.container_id != before, timeout=30, what="restart"
    )
    restarted = time.time()

    def after_restart() -> dict[str, Any] | None:
        m = _metrics(core, ns)
        return m if m is not None and _epoch(m["timestamp"]) >= restarted + 1 else None

    m = wait_for(after_restart, timeout=40, interval=0.5, what="a reading of the new container")
    # its window never reaches back to a point of the container before the restart
    assert _epoch(m["timestamp"]) + 1 - _seconds(m["window"]) >= restarted - 1.5, m


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
