"""Per-stage volume mounts on shared slots.

The chain declares pod volumes (`KruiseChain(volumes=[...])`), each stage the mounts it uses
(`chain.stage(volume_mounts=[...])`). A running pod cannot gain volumes or mounts, and any stage may run in
either slot, so both slots mount the union of the stages' mounts when the pod is created: two stages may mount
one volume at different paths, but not two different mounts at one path (refused at parse, naming both).
A stage sees every mount of its slot: put stages of different trust in different chains.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ChainConfigError

MOUNT_FIELDS = {"name", "mountPath", "readOnly", "subPath"}
RESERVED_PATHS = ("/scratch", "/kruise-chain", "/dev/termination-log", "/tmp", "/dev/shm", "/etc/hosts")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _check_volumes(volumes: Sequence[Any]) -> set[str]:
    names: set[str] = set()
    for i, volume in enumerate(volumes):
        where = f"volumes[{i}]"
        if not isinstance(volume, Mapping) or len(volume) != 2 or "name" not in volume:
            raise ChainConfigError(where, "must be a pod volume: {'name': ..., '<source>': {...}}")
        name = volume["name"]
        if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            raise ChainConfigError(f"{where}.name", "must be a DNS label")
        if name == "scratch" or name.startswith(("kc-", "kruise-chain")):
            raise ChainConfigError(f"{where}.name", f"{name!r} is the chain's own: choose another name")
        if name in names:
            raise ChainConfigError(f"{where}.name", f"duplicate volume name {name!r}")
        names.add(name)
    return names


def _check_mount(where: str, mount: Any, names: set[str]) -> None:
    if not isinstance(mount, Mapping) or not {"name", "mountPath"} <= set(mount) <= MOUNT_FIELDS:
        raise ChainConfigError(
            where,
            "must be a dict with name and mountPath (and optionally readOnly, subPath)",
        )
    if mount["name"] not in names:
        raise ChainConfigError(
            f"{where}.name",
            f"{mount['name']!r} is not a volume of the chain: declare it in KruiseChain(volumes=[...])",
        )
    path = mount["mountPath"]
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/") or ":" in path:
        raise ChainConfigError(f"{where}.mountPath", "must be an absolute path")
    if (
        path.rstrip("/") in ("", *RESERVED_PATHS)
        or path.startswith(tuple(p + "/" for p in RESERVED_PATHS))
        or path.startswith("/kruise-chain")
    ):
        raise ChainConfigError(f"{where}.mountPath", f"{path!r} is the chain's own: choose another path")


def check(volumes: Sequence[Any], stages: Sequence[Any]) -> None:
    """Raise ChainConfigError naming the first invalid volume or mount, or two mounts at one path."""
    names = _check_volumes(volumes)
    taken: dict[str, tuple[str, dict[str, Any]]] = {}
    for i, stage in enumerate(stages):
        for j, mount in enumerate(stage.volume_mounts):
            where = f"stages[{i}].volume_mounts[{j}]"
            _check_mount(where, mount, names)
            path = mount["mountPath"].rstrip("/")
            if path in taken and taken[path][1] != dict(mount, mountPath=path):
                other, _ = taken[path]
                raise ChainConfigError(
                    f"{where}.mountPath",
                    f"{path!r} is where stage {other!r} mounts another volume or sub-path; both slots mount "
                    "every stage's mounts (a running pod cannot change them), so one path holds one mount: "
                    "use another path",
                )
            taken.setdefault(path, (stage.name, dict(mount, mountPath=path)))


def slot_mounts(stages: Sequence[Any]) -> list[dict[str, Any]]:
    """The union of the stages' mounts, one per path, in declaration order: what each slot mounts."""
    seen: dict[str, dict[str, Any]] = {}
    for stage in stages:
        for mount in stage.volume_mounts:
            seen.setdefault(
                mount["mountPath"].rstrip("/"),
                dict(copy.deepcopy(mount), mountPath=mount["mountPath"].rstrip("/")),
            )
    return list(seen.values())
