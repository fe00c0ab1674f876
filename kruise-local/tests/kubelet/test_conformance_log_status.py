"""`pods/log` serves the container the kubelet's status names, not the runtime's newest, through the real
`kubernetes` client on the realistic profile.

Upstream: `kubelet_pods.go` `GetKubeletContainerLogs` takes the pod's status from the status manager
(`statusManager.GetPodStatus`, the API pod's status when it has none) and `validateContainerLogStatus` picks
the container ID from it: the running container's, else the terminated one's, else `lastState`'s, else a
`waiting to start: REASON` error (400). The status manager's status is the one `generateAPIPodStatus` made
as a sync began (`SyncPod`), so a container the runtime started in that sync (`startContainer`, its
postStart hook run inside it) is not in it until the PLEG's relist saw it and the next sync began. An exec
(`GetExec`: `findContainer` over the runtime's running containers) reaches the new container meanwhile.
Here each container's postStart hook holds its start 3 s, and each instance prints its own number."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kruise_local.testing import container, exec_output, pod_body, read_log, status_of, wait_for
from kubernetes.client.rest import ApiException

SHARED = {"name": "shared", "emptyDir": {}}
MOUNT = [{"name": "shared", "mountPath": "/shared"}]
# each instance takes the next number from the shared volume, prints it and stays up
SCRIPT = (
    "n=$(ls /shared | wc -l); touch /shared/s$n; echo instance-$n; "
    "trap 'exit 0' TERM; while :; do sleep 0.05; done"
)
HOOK = {"postStart": {"exec": {"command": ["/bin/sh", "-c", "sleep 3"]}}}


def spec() -> dict[str, Any]:
    return container("c", SCRIPT, lifecycle=HOOK, volumeMounts=MOUNT)


def started(core: Any, ns: str, instance: str) -> bool:
    """Whether instance `instance` runs, through an exec (refused before any container runs)."""
    try:
        return instance in exec_output(core, ns, "p", "c", ["ls", "/shared"]).split()
    except (ApiException, AttributeError):  # the client fails to decode a refused exec's empty body
        return False


def wait_started(core: Any, ns: str, instance: str) -> None:
    wait_for(lambda: started(core, ns, instance), timeout=60, interval=0.05, what=f"instance {instance}")


def test_a_container_not_yet_in_the_status_has_no_log_yet(realistic: Any, realistic_ns: str) -> None:
    core, ns = realistic, realistic_ns
    core.create_namespaced_pod(ns, pod_body("p", spec(), volumes=[SHARED]))
    # the first instance runs (the exec reaches it) while its postStart hook holds the status at waiting
    wait_started(core, ns, "s0")
    before = status_of(core, ns, "p", "c")
    with pytest.raises(ApiException) as err:
        read_log(core, ns, "p", "c")
    after = status_of(core, ns, "p", "c")
    assert before.state.waiting is not None and after.state.waiting is not None
    assert err.value.status == 400
    message = json.loads(err.value.body)["message"]
    assert message == 'container "c" in pod "p" is waiting to start: ContainerCreating'
    wait_for(lambda: status_of(core, ns, "p", "c").state.running, timeout=30, interval=0.05, what="running")
    assert "instance-0" in read_log(core, ns, "p", "c")


def test_a_restarted_container_logs_the_old_one_until_the_status_shows_the_new(
    realistic: Any, realistic_ns: str
) -> None:
    core, ns = realistic, realistic_ns
    core.create_namespaced_pod(ns, pod_body("p", spec(), volumes=[SHARED]))
    first = wait_for(
        lambda: (cs := status_of(core, ns, "p", "c")) and cs.state.running and cs.container_id and cs,
        timeout=60,
        interval=0.05,
        what="the first container shown running",
    )
    assert "instance-0" in read_log(core, ns, "p", "c")

    core.patch_namespaced_pod("p", ns, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}})
    wait_started(core, ns, "s1")
    # the runtime runs the new container (the exec reached it); the status still names the old one, and
    # so does the log
    before = status_of(core, ns, "p", "c")
    log = read_log(core, ns, "p", "c")
    after = status_of(core, ns, "p", "c")
    old = {first.container_id}
    assert before.container_id == after.container_id == first.container_id
    assert "instance-0" in log and "instance-1" not in log

    new = wait_for(
        lambda: (cs := status_of(core, ns, "p", "c")).state.running and cs.container_id not in old and cs,
        timeout=30,
        interval=0.05,
        what="the new container shown",
    )
    assert new.last_state.terminated.container_id == first.container_id
    log = read_log(core, ns, "p", "c")
    assert "instance-1" in log and "instance-0" not in log
    assert "instance-0" in read_log(core, ns, "p", "c", previous=True)
