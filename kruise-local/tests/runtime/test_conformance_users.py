"""A container's process runs as the user of its security context (`users.py`): the container's
`runAsUser` / `runAsGroup` over the pod's, the group from the image's `/etc/passwd` (else 0) when only a user
is named, as containerd builds the OCI process user and runc switches to it before it execs the command; a
process that is not root holds no capability; an exec into the container runs as that user too. Files it
writes into a volume are its user's on the node. Through the real `kubernetes` client; kruise-local must run
as root (oci or bwrap) to switch users."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kruise_local.testing import container, log_of, pod_body, wait_for
from kruise_local.users import ProcessUser, container_user, passwd_gid

SHOW = "id -u; id -g; touch /data/$(id -u); grep CapEff /proc/self/status; sleep 30"


def test_the_process_user_is_the_containers_over_the_pods(tmp_path: Path) -> None:
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0::/root:/bin/sh\napp:x:1000:1500::/home/app:/bin/sh\n")
    assert container_user({}, {}) == ProcessUser(0, 0, ())  # the image's user: root
    pod = {
        "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "supplementalGroups": [4000], "fsGroup": 5}
    }
    assert container_user(pod, {}) == ProcessUser(1000, 3000, (5, 4000))  # fsGroup first
    override = {"securityContext": {"runAsUser": 0}}
    assert container_user(pod, override).uid == 0 and container_user(pod, override).gid == 3000
    assert container_user({}, {"securityContext": {"runAsUser": 1000}}, passwd) == ProcessUser(1000, 1500)
    assert passwd_gid(2000, passwd) == 0 and passwd_gid(1000, None) == 0  # not found, no /etc/passwd: 0


@pytest.mark.skipif(os.geteuid() != 0, reason="switching a container's user needs kruise-local as root")
def test_a_container_runs_and_is_execd_into_as_its_security_contexts_user(cluster, core, namespace) -> None:
    if cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("only the oci and bwrap sandboxes switch users")
    mount = [{"name": "data", "mountPath": "/data"}]
    body = pod_body(
        "users",
        container("app", SHOW, volumeMounts=mount),
        container("root", SHOW, volumeMounts=mount, securityContext={"runAsUser": 0}),
        restart="Never",
        volumes=[{"name": "data", "emptyDir": {}}],
        securityContext={"runAsUser": 1000, "runAsGroup": 3000},
    )
    core.create_namespaced_pod(namespace, body)
    logs = {
        name: wait_for(
            lambda name=name: (lines := log_of(core, namespace, "users", name).splitlines())[2:] and lines,
            timeout=60,
            what=f"{name}'s user",
        )
        for name in ("app", "root")
    }
    assert logs["app"] == ["1000", "3000", "CapEff:\t0000000000000000"]  # no capability as non-root
    assert logs["root"][:2] == ["0", "3000"] and logs["root"][2] != "CapEff:\t0000000000000000"
    uid = core.read_namespaced_pod("users", namespace).metadata.uid
    data = cluster.kubelet.root / "pods" / uid / "volumes" / "data"
    assert (data / "1000").stat().st_uid == 1000 and (data / "1000").stat().st_gid == 3000  # on the node
    from kubernetes.stream import stream

    out = stream(
        core.connect_get_namespaced_pod_exec,
        "users",
        namespace,
        container="app",
        command=["sh", "-c", "id -u; id -g"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert out.split() == ["1000", "3000"]


def test_the_images_user_is_the_default_and_passes_run_as_non_root(cluster, core, namespace) -> None:
    """Without a `runAsUser` the image's config `User` ("uid:gid") is the process user, and the kubelet's
    runAsNonRoot check reads it (`verifyRunAsNonRoot`: an image of a non-root user passes)."""
    assert container_user({}, {}, None, "65532:65532") == ProcessUser(65532, 65532, ())
    assert container_user({"securityContext": {"runAsUser": 7}}, {}, None, "65532:65532").uid == 7
    if os.geteuid() != 0 or cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("switching a container's user needs kruise-local as root (oci or bwrap)")
    show = "import os, time; print(os.getuid(), os.getgid(), flush=True); time.sleep(30)"
    body = pod_body(
        "imageuser",
        {"name": "app", "image": "gcr.io/distroless/python3-debian12:nonroot", "args": ["-c", show]},
        restart="Never",
        securityContext={"runAsNonRoot": True},
    )
    core.create_namespaced_pod(namespace, body)
    out = wait_for(lambda: log_of(core, namespace, "imageuser", "app").split(), timeout=60, what="its user")
    assert out == ["65532", "65532"]
