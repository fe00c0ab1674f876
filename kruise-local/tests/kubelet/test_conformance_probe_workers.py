"""Conformance of the kubelet's probe workers, through the real `kubernetes` client (`pkg/kubelet/prober`).

Upstream (`prober_manager.go` `AddPod`, `worker.go` `run` / `doProbe`): one worker per container name and
probe type, made when the pod is added and living across the container's restarts, probes on a ticker of
periodSeconds whose phase is set when the worker starts; its first `doProbe` (at once) finds no container
in the status manager's status. Only a readiness worker is triggered at once (`UpdatePodStatus`, for a
started container that has no readiness result yet); a startup worker waits for its next tick. The bounds
are one-sided: a loaded machine only delays a probe."""

from __future__ import annotations

import time
from typing import Any

from kruise_local.testing import container, exec_output, pod_body, read_log, running, status_of, wait_for

LOG = "date +%s.%N >> /shared/probes"
SHARED = {"name": "shared", "emptyDir": {}}
MOUNT = [{"name": "shared", "mountPath": "/shared"}]


def _probe(period: int) -> dict[str, Any]:
    """A startup probe that passes and records when it ran (epoch seconds) in the pod's emptyDir."""
    return {"exec": {"command": ["/bin/sh", "-c", LOG]}, "periodSeconds": period, "failureThreshold": 30}


def _started(core: Any, ns: str) -> bool:
    cs = status_of(core, ns, "p", "c")
    return bool(cs is not None and cs.state.running is not None and cs.started)


def test_a_startup_probe_first_runs_a_period_after_the_pod_was_added(
    cluster: Any, core: Any, namespace: str
) -> None:
    """The startup worker starts with the pod (`AddPod`): its first `doProbe` finds no container, the next
    runs at its first tick, periodSeconds later. So a container with a startup probe of periodSeconds 4 is
    not started before 4 s after the pod's creation (the local kubelet once probed as the status showed the
    container running, about 0.1 s after it started). (On a kubelet up for less than a period, `run` first
    sleeps a random part of it and may then find the container at once: the test waits that out.)"""
    time.sleep(max(0.0, cluster.kubelet.started_at + 4.5 - time.monotonic()))
    spec = container("c", "sleep 3600", startupProbe=_probe(4), volumeMounts=MOUNT)
    created = time.time()
    core.create_namespaced_pod(namespace, pod_body("p", spec, volumes=[SHARED]))
    wait_for(lambda: running(core, namespace, "p", "c"), timeout=30, what="running")
    assert not status_of(core, namespace, "p", "c").ready
    wait_for(lambda: _started(core, namespace), timeout=30, interval=0.02, what="started")
    seen = time.time()
    first = float(exec_output(core, namespace, "p", "c", ["cat", "/shared/probes"]).split()[0])
    assert first - created >= 4.0 and seen - created >= 4.0, (created, first, seen)
    wait_for(lambda: status_of(core, namespace, "p", "c").ready, timeout=30, what="ready")


def test_a_restarted_container_is_probed_at_its_worker_s_next_tick(core: Any, namespace: str) -> None:
    """A container restarted in place (its image patched) keeps its probe workers (`doProbe` resets the
    result on the new container ID): the new container's first startup probe comes at a tick of the same
    ticker, a whole period (4 s) after the probe that started the one before, not as soon as the status
    shows the new container. (The old container's probe may run up to 1.5 s behind its tick on a loaded
    machine: the bound leaves that.)"""
    script = "echo start $(date +%s.%N); trap 'exit 0' TERM; while :; do sleep 0.05; done"
    spec = container("c", script, startupProbe=_probe(4), volumeMounts=MOUNT)
    core.create_namespaced_pod(namespace, pod_body("p", spec, volumes=[SHARED]))
    wait_for(lambda: _started(core, namespace), timeout=30, interval=0.02, what="started")
    patch = {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    core.patch_namespaced_pod("p", namespace, patch)

    def restarted() -> bool:
        cs = status_of(core, namespace, "p", "c")
        return bool(cs is not None and cs.restart_count == 1 and cs.state.running is not None and cs.started)

    wait_for(restarted, timeout=30, interval=0.02, what="the new container started")
    start = float(read_log(core, namespace, "p", "c").split()[1])
    probes = [float(t) for t in exec_output(core, namespace, "p", "c", ["cat", "/shared/probes"]).split()]
    before, after = [t for t in probes if t < start], [t for t in probes if t >= start]
    assert before and after, (start, probes)
    assert after[0] - before[-1] >= 4.0 - 1.5, (before, start, after)


def test_a_readiness_worker_is_triggered_as_the_started_container_shows_in_the_status(
    core: Any, namespace: str
) -> None:
    """`UpdatePodStatus` triggers a readiness worker at once for a started container without a readiness
    result (`manualTriggerCh`): a readiness probe of periodSeconds 20 makes the container Ready long before
    its first tick could."""
    probe = {"exec": {"command": ["/bin/sh", "-c", "true"]}, "periodSeconds": 20}
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 3600", readinessProbe=probe)))
    wait_for(lambda: running(core, namespace, "p", "c"), timeout=30, what="running")
    shown = time.time()
    wait_for(lambda: status_of(core, namespace, "p", "c").ready, timeout=30, interval=0.02, what="ready")
    assert time.time() - shown < 15.0
