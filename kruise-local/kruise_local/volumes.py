"""A pod's volumes on the local kubelet (`pkg/kubelet/volumemanager`; `pkg/volume/emptydir`, `configmap`,
`secret`, `downwardapi`): set up before the containers start, configMap, secret and downwardAPI files written
with the atomic writer and rewritten when the pod, the configMap or the secret changes; downward-API field
paths (`pkg/fieldpath`)."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path
from typing import Any

from . import resources as R
from .atomicwriter import write_atomically
from .cri import Mount
from .store import Obj

_FIELD_ANN = re.compile(r"^metadata\.(annotations|labels)\['(.+)'\]\Z")


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


class VolumeLoops:
    """The volume manager's two loops on a node's kubelet (`pkg/kubelet/volumemanager`): a sync's
    `WaitForAttachAndMount` calls `ReprocessPod`; the desired-state populator, on its next pass
    (`desiredStateOfWorldPopulatorLoopSleepPeriod`, 100 ms), re-processes the pod and marks its remountable
    volumes (configMap, downwardAPI) `MarkRemountRequired`; the reconciler, on its next pass
    (`reconcilerLoopSleepPeriod`, 100 ms), sets them up again: their files are rewritten atomically from the
    pod and the configMaps as the kubelet has them then. With `period` 0 (fast-profile shortcut) the files
    are rewritten at once."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.to_reprocess: dict[str, PodVolumes] = {}
        self.remount_required: dict[str, PodVolumes] = {}
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

    async def _populator(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            batch, self.to_reprocess = self.to_reprocess, {}
            self.remount_required.update(batch)

    async def _reconciler(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            batch, self.remount_required = self.remount_required, {}
            for pod in batch.values():
                pod.refresh_volumes()


class VolumeError(Exception):
    """A volume could not be set up (the kubelet retries and reports FailedMount)."""


class PodVolumes:
    """The volume manager's part of a pod worker: its volumes and their mounts."""

    uid: str

    def setup_volumes(self) -> None:
        pod = self.pod()
        if pod is None:
            return
        for vol in pod["spec"].get("volumes") or []:
            host = self.dir / "volumes" / vol["name"]
            if "emptyDir" in vol:
                host.mkdir(parents=True, exist_ok=True)
                host.chmod(0o777)  # pkg/volume/emptydir/empty_dir.go setupDir: 0777, whatever the umask
            elif "configMap" in vol:
                self.write_configmap(vol, host, pod)
            elif "secret" in vol:
                self.write_secret(vol, host)
            elif "downwardAPI" in vol:
                self.write_downward(vol, host, pod)
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
        cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, src.get("name", ""))
        if cm is None:
            if src.get("optional"):
                host.mkdir(parents=True, exist_ok=True)
                return
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{vol["name"]}" : configmap "{src.get("name")}" '
                "not found"
            )
        data = cm.get("data") or {}
        items = src.get("items") or [{"key": k, "path": k} for k in data]
        payload: dict[str, tuple[bytes, int]] = {}
        for item in items:
            if item["key"] not in data:
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{vol["name"]}" : configmap references '
                    f"non-existent config key: {item['key']}"
                )
            mode = item.get("mode", src.get("defaultMode", 0o644))
            payload[item["path"]] = (data[item["key"]].encode(), mode)
        self.write_payload(vol, host, payload)

    def write_secret(self, vol: dict[str, Any], host: Path) -> None:
        """`pkg/volume/secret` `SetUpAt`: a file per key (or per `items` entry) with the decoded bytes, mode
        `items[].mode`, else `defaultMode`, else 0644; a missing secret or key fails the mount unless
        `optional`."""
        src = vol["secret"]
        name = src.get("secretName", "")
        secret = self.kubelet.store.peek(R.SECRETS, self.ns, name)
        optional = bool(src.get("optional"))
        if secret is None:
            if optional:
                host.mkdir(parents=True, exist_ok=True)
                return
            raise VolumeError(
                f'MountVolume.SetUp failed for volume "{vol["name"]}" : secret "{name}" not found'
            )
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
            mode = item.get("mode", src.get("defaultMode", 0o644))
            payload[item["path"]] = (base64.b64decode(data[item["key"]]), mode)
        self.write_payload(vol, host, payload)

    def write_downward(self, vol: dict[str, Any], host: Path, pod: Obj) -> None:
        src = vol["downwardAPI"]
        payload: dict[str, tuple[bytes, int]] = {}
        for item in src.get("items") or []:
            ref = item.get("fieldRef")
            if ref:
                mode = item.get("mode", src.get("defaultMode", 0o644))
                payload[item["path"]] = (resolve_field(pod, ref["fieldPath"]).encode(), mode)
        self.write_payload(vol, host, payload)

    @staticmethod
    def write_payload(vol: dict[str, Any], host: Path, payload: dict[str, tuple[bytes, int]]) -> None:
        try:
            write_atomically(host, payload)
        except ValueError as e:
            raise VolumeError(f'MountVolume.SetUp failed for volume "{vol["name"]}" : {e}') from None

    def refresh_volumes(self, kinds: tuple[str, ...] = ("configMap", "secret", "downwardAPI")) -> None:
        """Rewrite the projected volumes of `kinds` from the API (the periodic sync does all of them)."""
        pod = self.pod()
        if pod is None or not self.sandbox_ready or self.terminating:
            return
        for vol in pod["spec"].get("volumes") or []:
            if not any(k in vol for k in kinds):
                continue
            try:
                if "configMap" in vol:
                    self.write_configmap(vol, self.volumes[vol["name"]], pod)
                elif "secret" in vol:
                    self.write_secret(vol, self.volumes[vol["name"]])
                elif "downwardAPI" in vol:
                    self.write_downward(vol, self.volumes[vol["name"]], pod)
            except (VolumeError, KeyError, OSError):
                continue

    def mounts(self, spec: dict[str, Any]) -> list[Mount]:
        out = []
        for vm in spec.get("volumeMounts") or []:
            host = self.volumes.get(vm["name"])
            if host is None:
                raise VolumeError(f'volume "{vm["name"]}" is not mounted')
            if vm.get("subPath"):
                host = host / vm["subPath"]
                host.mkdir(parents=True, exist_ok=True)
            out.append(Mount(host, vm["mountPath"], bool(vm.get("readOnly"))))
        return out
