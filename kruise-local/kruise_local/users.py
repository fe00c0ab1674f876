"""The user a container's process runs as, as the kubelet and containerd compute it.

The kubelet merges the pod's and the container's security contexts (`pkg/securitycontext/util.go`
`DetermineEffectiveSecurityContext`: the container's `runAsUser` / `runAsGroup` over the pod's) and sends
the runtime the user, the group and the supplemental groups (`pkg/kubelet/kuberuntime/security_context.go`
`determineEffectiveSecurityContext`: the pod's `fsGroup`, then its `supplementalGroups`). containerd makes
them the OCI process user (`internal/cri/server/container_create_linux.go`, `oci.WithUser` / `WithUserID`):
without a `runAsUser` the image's user (its config's `User`, the catalogue's `user`: "uid" or "uid:gid";
none is root); a user without a group (a `runAsUser` without a `runAsGroup`, or an image user "uid") takes
the user's group from the image's `/etc/passwd`, or 0 when the image has none or no such user. runc then
switches to that user after setting up the container (`libcontainer/init_linux.go` `setupUser`) and execs
the command: a process that is not root holds no capability after that exec (no ambient set), whatever the
container's capabilities say.

Not modelled: the groups the image's `/etc/group` gives the user (containerd's `WithAdditionalGIDs`),
`runAsUsername`, `supplementalGroupsPolicy` and the groups of volumes' `pv.beta.kubernetes.io/gid`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ProcessUser:
    """The OCI process user: uid, gid and supplemental groups."""

    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()

    @property
    def is_default(self) -> bool:
        """Root with group 0 and no supplemental groups: what the runtime's own process already is."""
        return self == ProcessUser()


def passwd_gid(uid: int, passwd: Path | None) -> int:
    """The group of `uid` in an image's `/etc/passwd` (containerd `WithUserID`), 0 when not found."""
    if passwd is None:
        return 0
    try:
        lines = passwd.read_text(errors="replace").splitlines()
    except OSError:
        return 0
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 4 and fields[2] == str(uid) and fields[3].isdigit():
            return int(fields[3])
    return 0


def image_uid(image_user: str) -> int:
    """The uid of an image's config `User` ("uid" or "uid:gid"; "" is root), as the CRI's image status
    reports it (`getImageUser`)."""
    return int(image_user.split(":", 1)[0]) if image_user else 0


def container_user(
    pod_spec: Mapping[str, Any],
    container: Mapping[str, Any],
    passwd: Path | None = None,
    image_user: str = "",
) -> ProcessUser:
    """The user `container` of a pod with spec `pod_spec` runs as; `passwd` is its image's `/etc/passwd`
    on the host (None: the image has none), `image_user` its config's `User`."""
    pod_sc = pod_spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    if uid is None and image_user:
        uid = image_uid(image_user)
        if gid is None and ":" in image_user:
            gid = int(image_user.split(":", 1)[1])
    uid = 0 if uid is None else int(uid)
    if gid is None:
        gid = passwd_gid(uid, passwd) if uid else 0
    groups: list[int] = []
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    groups += [int(g) for g in pod_sc.get("supplementalGroups") or ()]
    return ProcessUser(uid, int(gid), tuple(groups))
