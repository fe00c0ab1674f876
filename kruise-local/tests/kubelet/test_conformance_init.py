"""Conformance of the local cluster's init containers (`kuberuntime_manager.go` `computePodActions`,
`kuberuntime_container.go` `computeInitContainerActions`): run one at a time, in order, each to a zero
exit, before any app container starts; a failed one is restarted per restartPolicy with the restart
back-off, or fails the pod under Never. Driven only through the real `kubernetes` client."""

from __future__ import annotations

from kruise_local.testing import container, log_of, pod_body, read_log, running, wait_for


def _init_status(core, namespace: str, pod: str, name: str):
    statuses = core.read_namespaced_pod(pod, namespace).status.init_container_statuses or []
    return next((s for s in statuses if s.name == name), None)


def test_init_containers_run_in_order_before_the_app_containers(core, namespace):
    volume = [{"name": "shared", "mountPath": "/shared"}]
    body = pod_body(
        "p",
        container("app", "cat /shared/order; sleep 30", volumeMounts=volume),
        initContainers=[
            container("first", "sleep 0.5; echo first >> /shared/order", volumeMounts=volume),
            container("second", "echo second >> /shared/order", volumeMounts=volume),
        ],
        volumes=[{"name": "shared", "emptyDir": {}}],
    )
    core.create_namespaced_pod(namespace, body)
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.status.phase == "Pending"
    wait_for(lambda: running(core, namespace, "p", "app"), what="app running")
    wait_for(lambda: "second" in log_of(core, namespace, "p", "app"), what="app log")
    assert log_of(core, namespace, "p", "app").split() == ["first", "second"]
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.status.phase == "Running"
    for name in ("first", "second"):
        status = _init_status(core, namespace, "p", name)
        assert status.state.terminated.exit_code == 0
        assert status.state.terminated.reason == "Completed"
        assert status.restart_count == 0 and status.ready
    conditions = {c.type: c.status for c in pod.status.conditions}
    assert conditions["Initialized"] == "True"
    assert read_log(core, namespace, "p", "first") == ""


def test_app_containers_wait_in_pod_initializing(core, namespace):
    body = pod_body("p", container("app", "sleep 30"), initContainers=[container("slow", "sleep 3")])
    core.create_namespaced_pod(namespace, body)
    wait_for(
        lambda: (s := _init_status(core, namespace, "p", "slow")) and s.state.running, what="init running"
    )
    pod = core.read_namespaced_pod("p", namespace)
    app = pod.status.container_statuses[0]
    assert app.state.waiting.reason == "PodInitializing"
    assert {c.type: c.status for c in pod.status.conditions}["Initialized"] == "False"
    assert pod.status.phase == "Pending"


def test_failed_init_container_is_restarted_with_back_off_under_always(core, namespace):
    body = pod_body("p", container("app", "sleep 30"), initContainers=[container("bad", "exit 3")])
    core.create_namespaced_pod(namespace, body)
    status = wait_for(
        lambda: (
            (s := _init_status(core, namespace, "p", "bad"))
            and s.state.waiting is not None
            and s.state.waiting.reason == "CrashLoopBackOff"
            and s
        ),
        what="init CrashLoopBackOff",
    )
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.status.phase == "Pending"
    assert pod.status.container_statuses[0].state.waiting.reason == "PodInitializing"


def test_failed_init_container_fails_the_pod_under_never(core, namespace):
    body = pod_body(
        "p", container("app", "sleep 30"), restart="Never", initContainers=[container("bad", "exit 3")]
    )
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Failed", what="Failed")
    status = _init_status(core, namespace, "p", "bad")
    assert status.state.terminated.exit_code == 3
    assert core.read_namespaced_pod("p", namespace).status.container_statuses[0].state.running is None


def test_app_container_restart_does_not_rerun_init_containers(core, namespace):
    volume = [{"name": "shared", "mountPath": "/shared"}]
    body = pod_body(
        "p",
        container("app", "cat /shared/runs; sleep 30", volumeMounts=volume),
        initContainers=[container("once", "echo run >> /shared/runs", volumeMounts=volume)],
        volumes=[{"name": "shared", "emptyDir": {}}],
    )
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: running(core, namespace, "p", "app"), what="app running")
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "app", "image": "alpine:3.20"}]}}
    )
    wait_for(
        lambda: (s := running(core, namespace, "p", "app")) and s.restart_count == 1, what="app restarted"
    )
    wait_for(lambda: "run" in log_of(core, namespace, "p", "app"), what="app log")
    assert log_of(core, namespace, "p", "app").split() == ["run"]
    assert _init_status(core, namespace, "p", "once").restart_count == 0
