"""Each container instance has its own writable layer over its image, as containerd's overlayfs snapshotter
gives it (`snapshots/overlay/overlay.go`: a fresh upper directory per container over the image's read-only
layers) and runc mounts it (`libcontainer/rootfs_linux.go` `prepareRootfs`, `pivotRoot`; `finalizeRootfs`
`setReadonly` for `readOnlyRootFilesystem`): the image's files keep their owners and modes, a root process
rewrites `/bin/sh` and site-packages in its layer, a non-root one cannot write root's files; the changes are
the instance's alone, seen by every `exec` into it, and gone at the next container start (a restart is a new
instance); `readOnlyRootFilesystem: true` makes the layer read-only while the volumes stay writable. `$HOME`
is the user's home in the image's `/etc/passwd`, else `/` (runc `init_linux.go` `setupUser`), and `/tmp` is
the image's folder, in the layer. Through the real `kubernetes` client; the layer needs kruise-local as root
(`sandbox="oci"`)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from kruise_local.testing import container, exec_output, pod_body, running, status_of, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the writable layer needs kruise-local as root")

IMAGE = "python:3.11-slim"
WAIT = "while [ ! -e /tmp/restart ]; do sleep 0.05; done"
"""A container's command that ends when an exec creates /tmp/restart (in its layer): the kubelet then starts a
new instance (restartPolicy Always)."""


@pytest.fixture(autouse=True)
def _layered(cluster: Any) -> None:
    if not cluster.kubelet.runtime.layered:
        pytest.skip(f"the {cluster.kubelet.runtime.sandbox} sandbox has no writable layer")


def run(core: Any, ns: str, pod: str, argv: list[str], name: str = "c") -> str:
    """Run `argv` in the container through pods/exec; its output (stdout and stderr)."""
    return exec_output(core, ns, pod, name, argv)


def sh(core: Any, ns: str, pod: str, script: str, name: str = "c") -> str:
    """Run `script` with the image's /bin/sh; its output and `rc=N`."""
    return run(core, ns, pod, ["/bin/sh", "-c", f'{script}\necho "rc=$?"'], name)


def start(core: Any, ns: str, pod: str, *containers: dict[str, Any], **spec: Any) -> None:
    core.create_namespaced_pod(ns, pod_body(pod, *containers, **spec))
    for c in containers:
        wait_for(lambda c=c: running(core, ns, pod, c["name"]), timeout=60, what=f"{c['name']} running")


def restarted(core: Any, ns: str, pod: str, name: str = "c") -> None:
    """End the container's instance (its command waits for /tmp/restart) and wait for the next one."""
    before = status_of(core, ns, pod, name).restart_count
    sh(core, ns, pod, "touch /tmp/restart", name)
    wait_for(
        lambda: (cs := running(core, ns, pod, name)) is not None and cs.restart_count == before + 1,
        timeout=60,
        what="the next instance",
    )


def test_a_root_process_rewrites_the_images_files_in_its_own_layer(core, namespace) -> None:
    start(core, namespace, "layer", container("c", WAIT, IMAGE))
    stat = "stat -L -c '%U:%G %a %n' /usr/bin/dash /usr/bin/python3 /root /tmp /"
    owners = sh(core, namespace, "layer", stat)
    assert owners.splitlines() == [
        "root:root 755 /usr/bin/dash",
        "root:root 755 /usr/bin/python3",
        "root:root 700 /root",
        "root:root 1777 /tmp",
        "root:root 755 /",
        "rc=0",
    ]
    site = "/usr/local/lib/python3.11/dist-packages"
    plant = (  # a new /bin/sh renamed into place (rewriting the running shell's file is ETXTBSY)
        "printf '#!/usr/bin/dash\\necho hijacked-sh\\n' > /usr/bin/sh.new && chmod 755 /usr/bin/sh.new"
        f" && mv -f /usr/bin/sh.new /bin/sh && mkdir -p {site}"
        f" && echo 'import sys; print(\"hijacked-py\")' > {site}/zz.pth"
        " && mkdir -p /root/.local && echo mine > /root/.local/plant && echo mine > /tmp/plant"
    )
    assert sh(core, namespace, "layer", plant) == "rc=0\n"
    # every exec into the instance sees its layer as it was left
    assert run(core, namespace, "layer", ["cat", "/root/.local/plant", "/tmp/plant"]) == "mine\nmine\n"
    assert sh(core, namespace, "layer", "true") == "hijacked-sh\n"  # /bin/sh itself was rewritten
    assert run(core, namespace, "layer", ["python3", "-c", "print('own')"]) == "hijacked-py\nown\n"

    # the next instance starts from the image again
    before = status_of(core, namespace, "layer", "c").restart_count
    run(core, namespace, "layer", ["/usr/bin/dash", "-c", "touch /tmp/restart"])
    wait_for(
        lambda: (cs := running(core, namespace, "layer", "c")) is not None and cs.restart_count == before + 1,
        timeout=60,
        what="the next instance",
    )
    fresh = sh(core, namespace, "layer", f"ls -A /tmp /root {site} 2>&1; readlink /bin/sh")
    assert "plant" not in fresh and "zz.pth" not in fresh and "hijacked" not in fresh, fresh
    assert fresh.endswith("dash\nrc=0\n")
    assert run(core, namespace, "layer", ["python3", "-c", "print('own')"]) == "own\n"


def test_a_non_root_process_cannot_write_roots_files(core, namespace) -> None:
    user = {"runAsUser": 2000, "runAsGroup": 2000}
    start(core, namespace, "nonroot", container("c", WAIT, IMAGE, securityContext=user))
    out = sh(
        core,
        namespace,
        "nonroot",
        'echo "$HOME"; id -u; for f in /usr/bin/dash /usr/bin/kl /etc/passwd /root/kl /kl; do '
        '{ echo x >> "$f"; } 2>/dev/null && echo "wrote $f" || echo "refused $f"; done; '
        "echo x > /tmp/kl && stat -c '%u:%g %n' /tmp/kl",
    )
    assert out.splitlines() == [
        "/",  # uid 2000 is not in the image's /etc/passwd: runc's default home
        "2000",
        "refused /usr/bin/dash",
        "refused /usr/bin/kl",
        "refused /etc/passwd",
        "refused /root/kl",
        "refused /kl",
        "2000:2000 /tmp/kl",
        "rc=0",
    ]


def test_home_is_the_users_in_the_images_passwd_unless_the_pod_sets_it(core, namespace) -> None:
    start(
        core,
        namespace,
        "home",
        container("root", WAIT, IMAGE),
        container("app", WAIT, IMAGE, securityContext={"runAsUser": 1000}),
        container("set", WAIT, IMAGE, env=[{"name": "HOME", "value": "/work"}]),
    )
    homes = {name: sh(core, namespace, "home", 'echo "$HOME"', name) for name in ("root", "app", "set")}
    passwd_home = next(
        line.split(":")[5] for line in open("/etc/passwd").read().splitlines() if line.split(":")[2] == "1000"
    )
    assert homes == {"root": "/root\nrc=0\n", "app": f"{passwd_home}\nrc=0\n", "set": "/work\nrc=0\n"}


def test_changes_are_private_to_the_container_instance(core, namespace) -> None:
    start(core, namespace, "private", container("a", WAIT, IMAGE), container("b", WAIT, IMAGE))
    assert sh(core, namespace, "private", "echo a > /etc/kl-mine && echo a > /tmp/kl", "a") == "rc=0\n"
    assert sh(
        core, namespace, "private", "cat /etc/kl-mine /tmp/kl 2>&1 | wc -l; ls /etc/kl-mine 2>&1", "b"
    ) == (
        "2\nls: cannot access '/etc/kl-mine': No such file or directory\nrc=2\n"
    )  # one stream (2>&1): the client may interleave two streams in any order
    assert not os.path.exists("/etc/kl-mine")  # the node's own files are the image's lower layer, untouched
    restarted(core, namespace, "private", "a")
    assert "No such file" in sh(core, namespace, "private", "cat /etc/kl-mine", "a")


def test_a_read_only_root_filesystem_leaves_the_volumes_writable(core, namespace) -> None:
    start(
        core,
        namespace,
        "readonly",
        container(
            "c",
            "sleep 3600",
            IMAGE,
            securityContext={"readOnlyRootFilesystem": True},
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
        ),
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    out = sh(
        core,
        namespace,
        "readonly",
        "for f in /usr/bin/kl /tmp/kl /root/kl /etc/kl /data/kl /dev/kl /dev/termination-log; do "
        '{ echo x >> "$f"; } 2>/dev/null && echo "wrote $f" || echo "refused $f"; done',
    )
    assert out.splitlines() == [
        "refused /usr/bin/kl",
        "refused /tmp/kl",  # the image's /tmp is in the layer
        "refused /root/kl",
        "refused /etc/kl",
        "wrote /data/kl",  # volumes stay writable
        "wrote /dev/kl",  # /dev is the runtime's tmpfs, not the layer (runc remounts only / read-only)
        "wrote /dev/termination-log",
        "rc=0",
    ]
    assert "Read-only file system" in sh(core, namespace, "readonly", "touch /usr/kl")
    # runc mknods the devices on its /dev tmpfs (binds them only in a user namespace): root may replace one
    devices = "stat -c '%F %t:%T' /dev/null; rm /dev/null && : > /dev/null && stat -c %F /dev/null"
    replaced = "character special file 1:3\nregular empty file\nrc=0\n"
    assert sh(core, namespace, "readonly", devices) == replaced


def test_a_scratch_images_root_holds_only_its_files(core, namespace) -> None:
    start(core, namespace, "scratch", container("c", "sleep 3600", "busybox:1.36.1-musl"))
    script = "ls -A /; ls -A /etc; stat -c '%a %n' /tmp /root; echo x > /bin/kl && ls /bin/kl"
    out = sh(core, namespace, "scratch", script)
    lines = out.splitlines()
    assert lines[-7:] == ["hostname", "hosts", "resolv.conf", "1777 /tmp", "700 /root", "/bin/kl", "rc=0"]
    assert not {"usr", "lib"} & set(" ".join(lines[:-7]).split())  # no host userland
    # /etc holds only the mount points the runtime made for the pod's files (runc `createIfNotExists`)
