"""Container lifecycle hooks as the kubelet runs them (`kuberuntime_container.go` `startContainer` step 4,
`killContainer`, `executePreStopHook`; `lifecycle/handlers.go`): postStart right after the start, in the
same sync (the pod's next container and the status wait for it), preStop before the stop signal, their
failures' events and effects. Through the real `kubernetes` client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kruise_local.testing import container, log_of, pod_body, read_log, running, status_of, wait_for


def _events(core: Any, namespace: str, pod: str) -> list[tuple[str, str, str]]:
    items = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return [(e.reason, e.message, e.involved_object.field_path or "") for e in items]


def _volume(cluster: Any, core: Any, namespace: str, pod: str) -> Path:
    uid = core.read_namespaced_pod(pod, namespace).metadata.uid
    return cluster.kubelet.root / "pods" / uid / "volumes" / "data"


DATA = {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}


def test_post_start_runs_before_the_next_container_starts_and_the_status_waits(cluster, core, namespace):
    """The hook of `a` waits for a file the test creates: meanwhile `a` shows waiting ContainerCreating, the
    pod Pending, and `b` is not created; once the hook ends `a` runs and `b` starts and sees its work."""
    hook = "echo hooked > /data/hook; while [ ! -e /data/go ]; do sleep 0.05; done"
    a = container(
        "a", "sleep 300", lifecycle={"postStart": {"exec": {"command": ["sh", "-c", hook]}}}, **DATA
    )
    b = container("b", "cat /data/hook; sleep 300", **DATA)
    core.create_namespaced_pod(namespace, pod_body("p", a, b, volumes=[{"name": "data", "emptyDir": {}}]))
    data = wait_for(lambda: (v := _volume(cluster, core, namespace, "p")) and (v / "hook").exists() and v)
    started = wait_for(
        lambda: any(r == "Started" and "{a}" in f for r, _, f in _events(core, namespace, "p")),
        what="a started",
    )
    assert started
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.status.phase == "Pending"
    assert status_of(core, namespace, "p", "a").state.waiting.reason == "ContainerCreating"
    assert not any("{b}" in f for _, _, f in _events(core, namespace, "p"))  # not even pulled
    (data / "go").touch()
    wait_for(lambda: running(core, namespace, "p", "b"), what="b running")
    assert running(core, namespace, "p", "a") is not None
    assert wait_for(lambda: read_log(core, namespace, "p", "b")) == "hooked\n"


def test_a_failed_post_start_kills_the_container_and_waits_as_post_start_hook_error(cluster, core, namespace):
    hook = {"postStart": {"exec": {"command": ["sh", "-c", "echo oops; exit 3"]}}}
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 300", lifecycle=hook)))

    def failed() -> Any:
        cs = status_of(core, namespace, "p", "c")
        return cs if cs and cs.state.waiting and cs.state.waiting.reason == "PostStartHookError" else None

    cs = wait_for(failed, timeout=30, what="PostStartHookError")
    uid = core.read_namespaced_pod("p", namespace).metadata.uid
    assert cs.state.waiting.message == (
        f'Exec lifecycle hook ([sh -c echo oops; exit 3]) for Container "c" in Pod "p_{namespace}({uid})" '
        "failed - error: command 'sh -c echo oops; exit 3' exited with 3: , message: \"oops\\n\""
    )
    # sleep, pid 1 with no SIGTERM handler, lasts the pod's grace period (2 s) and is SIGKILLed
    assert cs.last_state.terminated.exit_code == 137 and cs.restart_count == 0
    events = _events(core, namespace, "p")
    assert ("FailedPostStartHook", "PostStartHook failed", "spec.containers{c}") in events  # no message leak
    assert ("Killing", "FailedPostStartHook", "spec.containers{c}") in events
    # restartPolicy Always: started again (each start's hook fails again)
    wait_for(lambda: status_of(core, namespace, "p", "c").restart_count >= 1, timeout=30, what="a restart")


def test_a_failed_post_start_under_restart_policy_never_ends_the_pod(core, namespace):
    """The kill stops the container for good: terminated (SIGKILLed after the grace period, or ended by its
    SIGTERM trap if the shell set it before the hook failed), never restarted, the pod Failed or Succeeded."""
    hook = {"postStart": {"exec": {"command": ["/no/such/hook"]}}}
    c = container("c", "trap 'exit 0' TERM; sleep 300 & wait", lifecycle=hook)
    core.create_namespaced_pod(namespace, pod_body("p", c, restart="Never"))
    done = ("Succeeded", "Failed")
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase in done, 30, what="the pod's end")
    cs = status_of(core, namespace, "p", "c")
    assert cs.state.waiting is None and cs.restart_count == 0
    assert cs.state.terminated.exit_code in (0, 137)
    events = _events(core, namespace, "p")
    assert ("FailedPostStartHook", "PostStartHook failed", "spec.containers{c}") in events


def test_pre_stop_runs_before_the_stop_signal(core, namespace):
    """An image patch kills the container: its preStop hook writes to the container's stdout, then the
    SIGTERM the kill sends runs the trap; both are in the previous instance's log, in that order."""
    script = "trap 'echo term; exit 0' TERM; echo up; sleep 300 & wait"
    hook = {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop > /proc/1/fd/1"]}}}
    core.create_namespaced_pod(namespace, pod_body("p", container("c", script, lifecycle=hook)))
    first = wait_for(lambda: running(core, namespace, "p", "c")).container_id
    wait_for(lambda: read_log(core, namespace, "p", "c") == "up\n", what="the trap set")
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    )
    wait_for(
        lambda: (cs := running(core, namespace, "p", "c")) and cs.container_id != first, 30, what="restart"
    )
    assert read_log(core, namespace, "p", "c", previous=True) == "up\nprestop\nterm\n"
    assert status_of(core, namespace, "p", "c").last_state.terminated.exit_code == 0


def test_a_failed_pre_stop_is_an_event_and_the_stop_goes_on(core, namespace):
    hook = {"preStop": {"exec": {"command": ["sh", "-c", "exit 1"]}}}
    c = container("c", "trap 'exit 0' TERM; echo up; sleep 300 & wait", lifecycle=hook)
    core.create_namespaced_pod(namespace, pod_body("p", c))
    wait_for(lambda: log_of(core, namespace, "p", "c") == "up\n", what="the trap set")
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    )
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "c")) and cs.restart_count == 1, 30, what="restart"
    )
    events = _events(core, namespace, "p")
    assert ("FailedPreStopHook", "PreStopHook failed", "spec.containers{c}") in events
    assert status_of(core, namespace, "p", "c").last_state.terminated.exit_code == 0  # its SIGTERM trap


def test_http_hooks_get_from_the_pod_and_fail_only_without_an_answer(core, namespace):
    """A preStop httpGet reaches the container's server (a 404 is an answer: the hook passed); a postStart
    httpGet to a port nobody listens on fails with the transport's error."""
    serve = "import http.server as h; h.test(h.SimpleHTTPRequestHandler, port=8080, bind='0.0.0.0')"
    hook = {"preStop": {"httpGet": {"path": "/stopping", "port": 8080}}}
    server = {"name": "c", "image": "python:3.11-slim", "command": ["python3", "-u", "-c", serve]}
    core.create_namespaced_pod(namespace, pod_body("p", {**server, "lifecycle": hook}))
    wait_for(lambda: "Serving HTTP" in log_of(core, namespace, "p", "c"), 30, what="the server up")
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "debian:bookworm-slim"}]}}
    )
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "c")) and cs.restart_count == 1, 30, what="restart"
    )
    previous = read_log(core, namespace, "p", "c", previous=True)
    assert '"GET /stopping HTTP/1.1" 404' in previous
    assert not any(r == "FailedPreStopHook" for r, _, _ in _events(core, namespace, "p"))

    hook = {"postStart": {"httpGet": {"path": "/started", "port": 9}}}
    core.create_namespaced_pod(namespace, pod_body("q", container("c", "sleep 300", lifecycle=hook)))

    def waiting() -> Any:
        cs = status_of(core, namespace, "q", "c")
        return (
            cs.state.waiting
            if cs and cs.state.waiting and cs.state.waiting.reason != "ContainerCreating"
            else None
        )

    found = wait_for(waiting, 30, what="the hook's failure")
    pod = core.read_namespaced_pod("q", namespace)
    ident = json.dumps(f"q_{namespace}({pod.metadata.uid})")
    assert found.reason == "PostStartHookError"
    assert found.message.startswith(
        f'HTTP lifecycle hook (/started) for Container "c" in Pod {ident} failed - error: '
    )
    assert "connect: connection refused" in found.message
