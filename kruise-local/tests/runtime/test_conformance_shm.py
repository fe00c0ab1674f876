"""A pod's /dev/shm is its sandbox's, shared by every container of the pod for the pod's life, as containerd
binds its sandbox's shm into each container (`internal/cri/server/container_create_linux.go`: unless the pod
is hostIPC, and unless the container mounts a volume there): what one container writes in it another reads,
and a container's restart finds it still there. Through the real `kubernetes` client; the oci sandbox only
(bubblewrap and unshare give each container a /dev/shm of its own)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from kruise_local.testing import container, pod_body, running, status_of, wait_for
from test_conformance_layer import run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the oci sandbox needs kruise-local as root")
WAIT = "while [ ! -e /tmp/restart ]; do sleep 0.05; done"


def sh(core: Any, ns: str, pod: str, name: str, script: str) -> str:
    return run(core, ns, pod, ["/bin/sh", "-c", f"{script} 2>&1"], name)


def test_the_pods_containers_share_its_dev_shm_for_the_pods_life(cluster, core, namespace) -> None:
    if cluster.kubelet.runtime.sandbox != "oci":
        pytest.skip(f"the {cluster.kubelet.runtime.sandbox} sandbox gives each container its own /dev/shm")
    own = [{"name": "own", "mountPath": "/dev/shm"}]
    body = pod_body(
        "shm",
        container("a", WAIT),
        container("b", WAIT),
        container("c", WAIT, volumeMounts=own),
        volumes=[{"name": "own", "emptyDir": {"medium": "Memory"}}],
    )
    core.create_namespaced_pod(namespace, body)
    for name in "abc":
        wait_for(lambda name=name: running(core, namespace, "shm", name), timeout=60, what=name)
    assert sh(core, namespace, "shm", "a", "echo from-a > /dev/shm/x; stat -c %a /dev/shm").strip() == "1777"
    assert sh(core, namespace, "shm", "b", "cat /dev/shm/x").strip() == "from-a"
    assert "No such file" in sh(core, namespace, "shm", "c", "cat /dev/shm/x")  # its own volume there
    before = status_of(core, namespace, "shm", "a").restart_count
    sh(core, namespace, "shm", "a", "touch /tmp/restart")
    wait_for(
        lambda: (cs := running(core, namespace, "shm", "a")) is not None and cs.restart_count == before + 1,
        timeout=60,
        what="a's next instance",
    )
    assert sh(core, namespace, "shm", "a", "cat /dev/shm/x").strip() == "from-a"  # the pod's, kept
