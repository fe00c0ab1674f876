"""A container whose command cannot be run (runc's exec fails: containerd marks it exited, reason StartError,
exit code 128) and that its restartPolicy will not start again shows that termination, not the waiting
reason of its failed start: the kubelet's `convertToAPIContainerStatuses` puts the reasonCache's
RunContainerError over a container only when `ShouldContainerBeRestarted`. Through the real client."""

from __future__ import annotations

from kruise_local.testing import container, pod_body, status_of, wait_for


def test_a_never_restarted_container_that_failed_to_start_is_terminated_with_start_error(core, namespace):
    body = pod_body("p", {**container("c", ""), "command": ["/no/such/binary"]}, restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Failed", 30, what="Failed")
    cs = status_of(core, namespace, "p", "c")
    assert cs.state.waiting is None and cs.restart_count == 0
    term = cs.state.terminated
    assert (term.exit_code, term.reason) == (128, "StartError")
    assert 'exec: "/no/such/binary": stat /no/such/binary: no such file or directory' in term.message


def test_a_restarted_one_waits_with_the_reason_of_its_failed_start(core, namespace):
    body = pod_body("p", {**container("c", ""), "command": ["/no/such/binary"]}, restart="OnFailure")
    core.create_namespaced_pod(namespace, body)

    def waiting() -> object:
        cs = status_of(core, namespace, "p", "c")
        return cs if cs and cs.state.waiting and cs.state.waiting.reason != "ContainerCreating" else None

    cs = wait_for(waiting, 30, what="a failed start")
    assert cs.state.waiting.reason in ("RunContainerError", "CrashLoopBackOff")
    assert cs.last_state.terminated.reason == "StartError"
    assert core.read_namespaced_pod("p", namespace).status.phase in ("Pending", "Running")
