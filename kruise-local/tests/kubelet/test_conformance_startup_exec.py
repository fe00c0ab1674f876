"""A container restarted in place on a new image, before its startup probe passed, through the real
`kubernetes` client on the realistic profile.

Upstream: the image patch makes `kuberuntime_manager.go` `computePodActions` list the old container to kill
and the new one to start; `SyncPod` kills first (`killContainer` returns once the runtime stopped it) and
then starts (`startContainer`). The status shows the new container (its own containerID, running, the old
one in lastState) once the PLEG's relist (`pleg/generic.go`) saw it, with `started` false: the startup
probe worker (`prober/worker.go` `doProbe`) probes a container only once the status manager's status
shows it, at its ticker's next tick, and `started` turns true only with a success. An exec
(`pods/exec`, the CRI's `Exec`) needs only a running container: it reaches the new container meanwhile.
The provider relies on this (core/status.py `_prepared_state`: a slot prepared ahead is said go to as soon
as its new container runs). Each container's probe passes only once a file named after its pid 1's start
time (/proc/1/stat field 22, its own in its pid namespace) exists: the old container's is made at once, the
new container's only by the exec below."""

from __future__ import annotations

from typing import Any

from kruise_local.testing import container, exec_output, pod_body, status_of, wait_for

STAMP = "cut -d' ' -f22 /proc/1/stat"
SHARED = {"name": "shared", "emptyDir": {}}
MOUNT = [{"name": "shared", "mountPath": "/shared"}]


def test_a_restarted_container_runs_before_it_is_started_and_an_exec_reaches_it(
    realistic: Any, realistic_ns: str
) -> None:
    core, ns = realistic, realistic_ns
    probe = {
        "exec": {"command": ["/bin/sh", "-c", f'test -e "/shared/up-$({STAMP})"']},
        "periodSeconds": 1,
        "failureThreshold": 120,
    }
    script = "trap 'exit 0' TERM; while :; do sleep 0.05; done"
    spec = container("c", script, startupProbe=probe, volumeMounts=MOUNT)
    core.create_namespaced_pod(ns, pod_body("p", spec, volumes=[SHARED]))

    def shown(container_id: str = "") -> Any:
        cs = status_of(core, ns, "p", "c")
        running = cs is not None and cs.state.running is not None and cs.container_id
        return cs if running and cs.container_id != container_id else None

    first = wait_for(shown, timeout=60, interval=0.02, what="the first container running")
    assert not first.started  # its probe cannot pass yet: no file
    exec_output(core, ns, "p", "c", ["/bin/sh", "-c", f'touch "/shared/up-$({STAMP})"'])
    wait_for(lambda: status_of(core, ns, "p", "c").started, timeout=30, interval=0.02, what="started")

    core.patch_namespaced_pod("p", ns, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}})
    new = wait_for(lambda: shown(first.container_id), timeout=60, interval=0.02, what="the new container")
    # shown running with its own id, the old one stopped before it started, and not started: its probe
    # has not passed (it cannot: no file for the new pid 1 yet)
    assert new.started is False and new.ready is False
    assert (
        new.last_state.terminated is not None and new.last_state.terminated.container_id == first.container_id
    )
    assert new.image.endswith("alpine:3.20")  # the runtime names it in full: docker.io/library/...

    # the exec reaches the new container (its pid 1 is another than the first container's) while not started
    stamps = exec_output(
        core, ns, "p", "c", ["/bin/sh", "-c", f'ls /shared; {STAMP}; touch "/shared/up-$({STAMP})"']
    )
    *made, own = stamps.split()
    assert len(made) == 1 and made[0] != f"up-{own}"  # the first container's file; its own pid 1 is another
    assert status_of(core, ns, "p", "c").container_id == new.container_id
    wait_for(
        lambda: status_of(core, ns, "p", "c").started, timeout=30, interval=0.02, what="the new one started"
    )
    assert status_of(core, ns, "p", "c").container_id == new.container_id
