"""The pod's `fsGroup` on its volumes (`pkg/volume/volume_linux.go` `ChangePermissions`, as the emptyDir,
configMap, secret, downwardAPI and projected plugins call it with no `fsGroupChangePolicy`), the group the
container's process gets from it, and the API data volumes mounted read-only (`kubelet_pods.go`
`makeMounts`). Through the real `kubernetes` client; kruise-local must run as root with bwrap to switch
users."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from kruise_local.testing import container, log_of, pod_body, wait_for
from kruise_local.volumes import set_volume_ownership

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching a container's user needs root")

MOUNTS = [
    {"name": "secret", "mountPath": "/secret"},
    {"name": "config", "mountPath": "/config"},
    {"name": "down", "mountPath": "/down"},
    {"name": "proj", "mountPath": "/proj"},
    {"name": "data", "mountPath": "/data"},
]


def _volumes(ns_secret: str, ns_config: str) -> list[dict[str, Any]]:
    annotations = {"path": "ann", "fieldRef": {"fieldPath": "metadata.annotations"}}
    return [
        {"name": "secret", "secret": {"secretName": ns_secret, "defaultMode": 0o400}},
        {"name": "config", "configMap": {"name": ns_config, "defaultMode": 0o400}},
        {"name": "down", "downwardAPI": {"items": [annotations], "defaultMode": 0o400}},
        {
            "name": "proj",
            "projected": {"sources": [{"secret": {"name": ns_secret}}], "defaultMode": 0o400},
        },
        {"name": "data", "emptyDir": {}},
    ]


def _objects(core: Any, namespace: str) -> None:
    password = base64.b64encode(b"hunter2").decode()
    core.create_namespaced_secret(namespace, {"metadata": {"name": "creds"}, "data": {"password": password}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "conf"}, "data": {"level": "debug"}})


def _bwrap(cluster: Any) -> None:
    if cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("only the oci and bwrap sandboxes switch users")


def _volume_dir(cluster: Any, core: Any, namespace: str, pod: str, volume: str) -> Path:
    uid = core.read_namespaced_pod(pod, namespace).metadata.uid
    return cluster.kubelet.root / "pods" / uid / "volumes" / volume


READ = (
    "id -G; for f in /secret/password /config/level /down/ann /proj/password; do "
    "cat $f >/dev/null 2>&1 && echo read $f || echo denied $f; done; "
    "touch /data/made && echo wrote; sleep 30"
)


def test_fsgroup_makes_the_volumes_the_groups_and_the_process_a_member(cluster, core, namespace) -> None:
    """Files of defaultMode 0400 become 0440 and group fsGroup: a non-root user reads a Secret's keys; the
    emptyDir is group-writable with setgid, so what the container creates there is the group's."""
    _bwrap(cluster)
    _objects(core, namespace)
    body = pod_body(
        "fsg",
        container("app", READ, volumeMounts=MOUNTS),
        volumes=_volumes("creds", "conf"),
        securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
    )
    core.create_namespaced_pod(namespace, body)
    lines = wait_for(
        lambda: (out := log_of(core, namespace, "fsg", "app").splitlines())[5:] and out, 60, what="the reads"
    )
    # the primary group, then the fsGroup as a supplemental one (which bwrap's user namespace shows as the
    # overflow gid: kruise-local README; access is decided by the real id, 2000, as the reads show)
    groups = lines[0].split()
    assert groups == ["3000", "2000"] if cluster.kubelet.runtime.sandbox == "oci" else len(groups) == 2
    assert lines[1:5] == [
        f"read /{p}" for p in ("secret/password", "config/level", "down/ann", "proj/password")
    ]
    assert lines[5] == "wrote"
    secret = _volume_dir(cluster, core, namespace, "fsg", "secret")
    info = (secret / "password").stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o440, 0, 2000)
    data_dir = (secret / "..data").resolve()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o2755 and data_dir.stat().st_gid == 2000
    assert os.lstat(secret / "..data").st_gid == 2000  # Lchown: the symlinks too
    data = _volume_dir(cluster, core, namespace, "fsg", "data")
    assert stat.S_IMODE(data.stat().st_mode) == 0o2777 and data.stat().st_gid == 2000
    made = (data / "made").stat()
    assert (made.st_uid, made.st_gid) == (1000, 2000)  # the setgid folder's group, not the user's 3000


def test_without_fsgroup_a_root_owned_0400_secret_is_out_of_a_non_root_users_reach(
    cluster, core, namespace
) -> None:
    _bwrap(cluster)
    _objects(core, namespace)
    body = pod_body(
        "nofsg",
        container("app", READ, volumeMounts=MOUNTS),
        volumes=_volumes("creds", "conf"),
        securityContext={"runAsUser": 1000, "runAsGroup": 3000},
    )
    core.create_namespaced_pod(namespace, body)
    lines = wait_for(
        lambda: (out := log_of(core, namespace, "nofsg", "app").splitlines())[5:] and out, 60, what="reads"
    )
    assert lines[0].split() == ["3000"]
    assert lines[1:5] == [
        f"denied /{p}" for p in ("secret/password", "config/level", "down/ann", "proj/password")
    ]
    info = (_volume_dir(cluster, core, namespace, "nofsg", "secret") / "password").stat()
    assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o400, 0)


def test_api_data_volumes_are_mounted_read_only_whatever_the_volume_mount_says(
    cluster, core, namespace
) -> None:
    _objects(core, namespace)
    write = (
        "for d in /secret /config /down /proj /data; do touch $d/new 2>/dev/null && echo rw || echo ro; done"
    )
    body = pod_body(
        "ro", container("app", write + "; sleep 30", volumeMounts=MOUNTS), volumes=_volumes("creds", "conf")
    )
    core.create_namespaced_pod(namespace, body)
    lines = wait_for(
        lambda: (out := log_of(core, namespace, "ro", "app").split())[4:] and out, 60, what="writes"
    )
    assert lines == ["ro", "ro", "ro", "ro", "rw"]  # root (the image's user) too: a read-only mount


def test_a_secret_update_is_owned_again_whatever_the_fsgroupchangepolicy(cluster, core, namespace) -> None:
    """The secret plugin's `setPerms` passes no policy: `OnRootMismatch` (whose root already matches after
    the first write) does not skip the walk, so a rewritten key is the group's too."""
    _bwrap(cluster)
    _objects(core, namespace)
    body = pod_body(
        "upd",
        container("app", "sleep 60", volumeMounts=MOUNTS[:1]),
        volumes=_volumes("creds", "conf")[:1],
        securityContext={"runAsUser": 1000, "fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch"},
    )
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("upd", namespace).status.phase == "Running", 60, what="Running")
    secret = _volume_dir(cluster, core, namespace, "upd", "secret")
    first = (secret / "..data").resolve()
    new = base64.b64encode(b"changed").decode()
    core.patch_namespaced_secret("creds", namespace, {"data": {"password": new, "token": new}})
    # a pod update makes a sync, which rewrites the pod's volumes (else the periodic sync, a minute later)
    core.patch_namespaced_pod("upd", namespace, {"metadata": {"annotations": {"resync": "1"}}})
    wait_for(lambda: (secret / "..data").resolve() != first, 30, what="the secret's rewrite")
    for key in ("password", "token"):
        info = (secret / key).stat()
        assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o440, 2000)


def test_ownership_walk_changes_group_and_modes_but_follows_no_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("x")
    outside.chmod(0o600)
    vol = tmp_path / "vol"
    (vol / "sub").mkdir(parents=True)
    (vol / "sub" / "f").write_text("x")
    (vol / "sub" / "f").chmod(0o400)
    (vol / "link").symlink_to(outside)
    set_volume_ownership(vol, 4321, read_only=False)
    assert stat.S_IMODE((vol / "sub" / "f").stat().st_mode) == 0o660
    assert stat.S_IMODE((vol / "sub").stat().st_mode) & 0o2770 == 0o2770
    assert (vol / "sub" / "f").stat().st_gid == 4321 and os.lstat(vol / "link").st_gid == 4321
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600 and outside.stat().st_gid != 4321
    set_volume_ownership(vol, None, read_only=True)  # no fsGroup: nothing changes
    assert stat.S_IMODE((vol / "sub" / "f").stat().st_mode) == 0o660
