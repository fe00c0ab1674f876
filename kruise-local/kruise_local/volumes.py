"""A pod's volumes on the local kubelet (`pkg/kubelet/volumemanager`; `pkg/volume/emptydir`, `configmap`,
`secret`, `downwardapi`, `projected`): set up before the containers start, configMap, secret, downwardAPI and
projected files written with the atomic writer and rewritten when the pod, the configMap or the secret
changes; downward-API field paths (`pkg/fieldpath`); the pod's `fsGroup` applied to them
(`set_volume_ownership`) and the API data volumes mounted read-only (`mounts`)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import stat
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

from . import resources as R
from .atomicwriter import write_atomically
from .cri import Mount
from .etcfiles import hosts_mount
from .store import Obj

_FIELD_ANN = re.compile(r"^metadata\.(annotations|labels)\['(.+)'\]\Z")
API_DATA_KINDS = ("configMap", "secret", "downwardAPI", "projected")
"""The volume plugins whose `GetAttributes().ReadOnly` is true: the kubelet mounts them read-only in every
container whatever the volumeMount says (`kubelet_pods.go` `makeMounts`: `mount.ReadOnly || mustMountRO`), and
their fsGroup ownership gives the group read, not write."""
_RW_MASK, _RO_MASK, _EXEC_MASK = 0o660, 0o440, 0o110


def set_volume_ownership(root: Path, fs_group: int | None, read_only: bool) -> None:
    """`pkg/volume/volume_linux.go` `VolumeOwnership.ChangePermissions` with no `fsGroupChangePolicy`, as
    the emptyDir, configMap, secret, downwardAPI and projected plugins call it (their `SetUpAt` passes nil:
    the pod's `fsGroupChangePolicy` is for the volumes whose plugin passes it on, CSI and block volumes,
    which the local cluster does not have): with an `fs_group`, every entry under `root` (`walkDeep`,
    children before their folder) is given that group (`Lchown(path, -1, fsGroup)`, symlinks included) and,
    unless it is a symlink, its mode ORed with 0660 (0440 for a read-only volume) and, for a folder, the
    setgid bit and 0110 (`changeFilePermission`), so that the files the container creates in it are the
    group's too. Failures are logged upstream and ignored."""
    if fs_group is None:
        return
    mask = _RO_MASK if read_only else _RW_MASK
    for path, info in _walk_deep(str(root)):
        try:
            os.lchown(path, -1, fs_group)
            if not stat.S_ISLNK(info.st_mode):
                extra = mask | (stat.S_ISGID | _EXEC_MASK if stat.S_ISDIR(info.st_mode) else 0)
                os.chmod(path, stat.S_IMODE(info.st_mode) | extra)
        except OSError:
            continue


def _walk_deep(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """`walkDeep`: every entry under `path` (symlinks not followed), a folder after its children."""
    try:
        info = os.lstat(path)
        names = os.listdir(path) if stat.S_ISDIR(info.st_mode) else []
    except OSError:
        return
    for name in names:
        yield from _walk_deep(os.path.join(path, name))
    yield path, info


def _fs_group(pod: Obj) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return None if value is None else int(value)


def resolve_field(pod: Obj, path: str) -> str:
    """The value of a downward-API fieldRef on `pod` as the kubelet sees it now."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    m = _FIELD_ANN.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    if path in ("metadata.annotations", "metadata.labels"):
        items = meta.get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs") or []),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs") or []),
    }
    return str(simple.get(path) or "")


def downward_payload(
    items: list[dict[str, Any]], pod: Obj, default_mode: int
) -> dict[str, tuple[bytes, int]]:
    """`pkg/volume/downwardapi` `CollectData`: a file per fieldRef item, mode `items[].mode` else
    `default_mode` (a downwardAPI volume's own, or the projected volume's)."""
    payload: dict[str, tuple[bytes, int]] = {}
    for item in items:
        ref = item.get("fieldRef")
        if ref:
            payload[item["path"]] = (
                resolve_field(pod, ref["fieldPath"]).encode(),
                item.get("mode", default_mode),
            )
    return payload


class VolumeLoops:
    """The volume manager's two loops on a node's kubelet (`pkg/kubelet/volumemanager`): a sync's
    `WaitForAttachAndMount` calls `ReprocessPod`; the desired-state populator, on its next pass
    (`desiredStateOfWorldPopulatorLoopSleepPeriod`, 100 ms), re-processes the pod as the pod manager has it
    then (`processPodVolumes`: `AddPodToVolume` keeps that pod object) and marks its remountable volumes
    (configMap, secret, downwardAPI, projected) `MarkRemountRequired`; the reconciler, on its next pass
    (`reconcilerLoopSleepPeriod`, 100 ms), sets them up again: their files are rewritten atomically from that
    pod object and the configMaps and secrets as the kubelet has them then. With `period` 0 (fast-profile
    shortcut) the files are rewritten at once."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.to_reprocess: dict[str, PodVolumes] = {}
        self.remount_required: dict[str, tuple[PodVolumes, Obj | None]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if self.period > 0 and not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._populator()), loop.create_task(self._reconciler())]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def reprocess_pod(self, pod: PodVolumes) -> None:
        """`ReprocessPod`: the populator will process the pod again."""
        if not self._tasks:
            pod.refresh_volumes()
            return
        self.to_reprocess[pod.uid] = pod

    def populate(self) -> None:
        """One populator pass: the pods to reprocess, each as it is now, marked for a remount."""
        batch, self.to_reprocess = self.to_reprocess, {}
        self.remount_required.update({uid: (pod, pod.pod()) for uid, pod in batch.items()})

    def reconcile(self) -> None:
        """One reconciler pass: the marked pods' volumes rewritten from the pod objects the populator took."""
        batch, self.remount_required = self.remount_required, {}
        for pod, seen in batch.values():
            pod.refresh_volumes(seen=seen)

    async def _populator(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            self.populate()

    async def _reconciler(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            self.reconcile()


class VolumeError(Exception):
    """A volume could not be set up (the kubelet retries and reports FailedMount)."""


class PodVolumes:
    """The volume manager's part of a pod worker: its volumes and their mounts."""

    uid: str
    dir: Path
    pod_ip: str

    def setup_volumes(self, names: Container[str] | None = None) -> None:
        """Set up the pod's volumes (those of `names` only, if given; `mounting.py` mounts one at a time)."""
        pod = self.pod()
        if pod is None:
            return
        for vol in pod["spec"].get("volumes") or []:
            if names is not None and vol["name"] not in names:
                continue
            host = self.dir / "volumes" / vol["name"]
            if "emptyDir" in vol:
                host.mkdir(parents=True, exist_ok=True)
                host.chmod(0o777)  # pkg/volume/emptydir/empty_dir.go setupDir: 0777, whatever the umask
                set_volume_ownership(host, _fs_group(pod), read_only=False)
            elif "configMap" in vol:
                self.write_configmap(vol, host, pod)
            elif "secret" in vol:
                self.write_secret(vol, host, pod)
            elif "downwardAPI" in vol:
                self.write_downward(vol, host, pod)
            elif "projected" in vol:
                self.write_projected(vol, host, pod)
            elif "hostPath" in vol:
                host = Path(vol["hostPath"]["path"])
            else:
                kind = next((k for k in vol if k != "name"), "unknown")
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol["name"]}" : volume type {kind} is '
                    "not supported by the local cluster"
                )
            self.volumes[vol["name"]] = host

    def write_configmap(self, vol: dict[str, Any], host: Path, pod: Obj) -> None:
        src = vol["configMap"]
        payload = self.configmap_payload(vol, src, src.get("name", ""), src.get("defaultMode", 0o644), False)
        if payload is None:
            host.mkdir(parents=True, exist_ok=True)
            return
        self.write_payload(vol, host, payload, pod)

    def configmap_payload(
        self, vol: dict[str, Any], src: dict[str, Any], name: str, default_mode: int, projected: bool
    ) -> dict[str, tuple[bytes, int]] | None:
        """`pkg/volume/configmap` `MakePayload`: a file per key (or per `items` entry); None for a missing
        optional configMap. `projected`: the error is the API's NotFound (`projected.go` `collectData`)."""
        cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, name)
        if cm is None:
            if src.get("optional"):
                return None
            missing = f'configmaps "{name}" not found' if projected else f'configmap "{name}" not found'
            raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : {missing}')
        data = cm.get("data") or {}
        items = src.get("items") or [{"key": k, "path": k} for k in data]
        payload: dict[str, tuple[bytes, int]] = {}
        for item in items:
            if item["key"] not in data:
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol["name"]}" : configmap references '
                    f"non-existent config key: {item['key']}"
                )
            mode = item.get("mode", default_mode)
            payload[item["path"]] = (data[item["key"]].encode(), mode)
        return payload

    def write_secret(self, vol: dict[str, Any], host: Path, pod: Obj) -> None:
        """`pkg/volume/secret` `SetUpAt`: a file per key (or per `items` entry) with the decoded bytes, mode
        `items[].mode`, else `defaultMode`, else 0644; a missing secret or key fails the mount unless
        `optional`."""
        src = vol["secret"]
        payload = self.secret_payload(
            vol, src, src.get("secretName", ""), src.get("defaultMode", 0o644), False
        )
        if payload is None:
            host.mkdir(parents=True, exist_ok=True)
            return
        self.write_payload(vol, host, payload, pod)

    def secret_payload(
        self, vol: dict[str, Any], src: dict[str, Any], name: str, default_mode: int, projected: bool
    ) -> dict[str, tuple[bytes, int]] | None:
        """`pkg/volume/secret` `MakePayload`; None for a missing optional secret."""
        secret = self.kubelet.store.peek(R.SECRETS, self.ns, name)
        optional = bool(src.get("optional"))
        if secret is None:
            if optional:
                return None
            missing = f'secrets "{name}" not found' if projected else f'secret "{name}" not found'
            raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : {missing}')
        data = secret.get("data") or {}
        items = src.get("items") or [{"key": k, "path": k} for k in data]
        payload: dict[str, tuple[bytes, int]] = {}
        for item in items:
            if item["key"] not in data:
                if optional:
                    continue
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol["name"]}" : references non-existent secret '
                    f"key: {item['key']}"
                )
            mode = item.get("mode", default_mode)
            payload[item["path"]] = (base64.b64decode(data[item["key"]]), mode)
        return payload

    def write_downward(self, vol: dict[str, Any], host: Path, pod: Obj) -> None:
        src = vol["downwardAPI"]
        self.write_payload(
            vol, host, downward_payload(src.get("items") or [], pod, src.get("defaultMode", 0o644)), pod
        )

    def write_projected(self, vol: dict[str, Any], host: Path, pod: Obj) -> None:
        """`pkg/volume/projected` `collectData`: the files of every source in one payload, written with one
        atomic write; an item's `mode`, else the projected volume's `defaultMode` (each source's own has
        none). A missing optional configMap or secret adds nothing; a failing source fails the mount.
        Service account token sources are not modelled (kruise-local issues no tokens)."""
        src = vol["projected"]
        default_mode = src.get("defaultMode", 0o644)
        payload: dict[str, tuple[bytes, int]] = {}
        for source in src.get("sources") or []:
            if "downwardAPI" in source:
                payload.update(downward_payload(source["downwardAPI"].get("items") or [], pod, default_mode))
            elif "configMap" in source:
                cm = source["configMap"]
                payload.update(self.configmap_payload(vol, cm, cm.get("name", ""), default_mode, True) or {})
            elif "secret" in source:
                sec = source["secret"]
                payload.update(self.secret_payload(vol, sec, sec.get("name", ""), default_mode, True) or {})
            else:
                kind = next(iter(source), "unknown")
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol["name"]}" : projected source {kind} is not '
                    "supported by the local cluster"
                )
        self.write_payload(vol, host, payload, pod)

    @staticmethod
    def write_payload(
        vol: dict[str, Any], host: Path, payload: dict[str, tuple[bytes, int]], pod: Obj
    ) -> None:
        """The atomic write with the volume's `setPerms`: the fsGroup ownership of the whole volume."""
        fs_group = _fs_group(pod)

        def set_perms(root: Path) -> None:
            set_volume_ownership(root, fs_group, read_only=True)

        try:
            write_atomically(host, payload, set_perms if fs_group is not None else None)
        except ValueError as e:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : {e}') from None

    def refresh_volumes(
        self,
        kinds: tuple[str, ...] = ("configMap", "secret", "downwardAPI", "projected"),
        seen: Obj | None = None,
    ) -> None:
        """Rewrite the projected volumes of `kinds` from the API (the periodic sync does all of them), from
        the pod object `seen` (the volume populator's) or the current one."""
        pod = self.pod() if seen is None else seen
        if pod is None or self.pod() is None or not self.sandbox_ready or self.terminating:
            return
        for vol in pod["spec"].get("volumes") or []:
            if not any(k in vol for k in kinds):
                continue
            try:
                if "configMap" in vol:
                    self.write_configmap(vol, self.volumes[vol["name"]], pod)
                elif "secret" in vol:
                    self.write_secret(vol, self.volumes[vol["name"]], pod)
                elif "downwardAPI" in vol:
                    self.write_downward(vol, self.volumes[vol["name"]], pod)
                elif "projected" in vol:
                    self.write_projected(vol, self.volumes[vol["name"]], pod)
            except (VolumeError, KeyError, OSError):
                continue

    def mounts(self, spec: dict[str, Any]) -> list[Mount]:
        """The container's mounts (`makeMounts`): read-only as the volumeMount says, and always for the API
        data volumes (`API_DATA_KINDS`); a `subPath` is the volume's file or folder of that name, made a
        folder (with the volume's mode) when missing; then the pod's managed `/etc/hosts`
        (`etcfiles.hosts_mount`)."""
        pod = self.pod() or {}
        volumes = {v["name"]: v for v in (pod.get("spec") or {}).get("volumes") or []}
        out = []
        for vm in spec.get("volumeMounts") or []:
            host = self.volumes.get(vm["name"])
            if host is None:
                raise VolumeError(f'volume "{vm["name"]}" is not mounted')
            if vm.get("subPath"):
                volume, host = host, host / vm["subPath"]
                if not os.path.lexists(host):
                    host.mkdir(parents=True, exist_ok=True)
                    host.chmod(stat.S_IMODE(volume.stat().st_mode))
            must_ro = any(kind in volumes.get(vm["name"], {}) for kind in API_DATA_KINDS)
            out.append(Mount(host, vm["mountPath"], bool(vm.get("readOnly")) or must_ro))
        hosts = hosts_mount(pod, spec, self.dir, [self.pod_ip]) if pod else None
        return [*out, hosts] if hosts else out
