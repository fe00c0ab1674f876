"""The kubelet of the local cluster: pods become real local processes.

Reproduces the kubelet behaviour DESIGN.md lists: image pulls by imagePullPolicy (waiting reasons and events),
restart by restartPolicy with crash-loop back-off keyed on the container's spec hash, kill-and-restart of a
running container whose spec changed, downward-API env resolved at container start, termination messages,
exec readiness probes, pod phase and conditions, and graceful deletion that kills whole process trees.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import shutil
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import resources as R
from .atomicwriter import write_atomically
from .catalogue import NOT_IN_CATALOGUE, Catalogue, Image
from .errors import ApiError
from .events import EventRecorder
from .imageref import normalize, repository, split_reference
from .profiles import Profile
from .resize import ResizeManager
from .runtime import (
    ContainerLaunch,
    Mount,
    PodSandbox,
    RunningContainer,
    RuntimeUnavailable,
    StartError,
    follow_log,
    read_log,
)
from .scheduling import capacity_freed
from .store import Obj, Store, deep_copy, now_iso
from .validation import parse_quantity

log = logging.getLogger(__name__)

BACKOFF_INITIAL = 10.0  # kubelet.go initialCrashLoopBackOff
BACKOFF_MAX = 300.0  # kubelet.go MaxContainerBackOff; KEP-5593 lets a node lower it (1-300 s)
BACKOFF_EXPIRY = 600.0  # kubelet.go crashLoopBackOff.HasExpiredFunc
IMAGE_BACKOFF_INITIAL = 10.0


def spec_hash(container: dict[str, Any]) -> str:
    """The kubelet's hash of a container (`pkg/kubelet/container/helpers.go` `HashContainer`): since 1.31 it
    covers only the fields `pickFieldsToHash` keeps, the name and the image, so a running container whose hash
    changed is restarted ("definition changed") and nothing else (resources, env, command) restarts it."""
    picked = {"name": container.get("name", ""), "image": container.get("image", "")}
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


def _ts(dt: datetime | None) -> str | None:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ") if dt else None


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


_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes, others stay as is."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def probe_port(spec: dict[str, Any], port: Any) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports (`ResolveContainerPort`)."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in spec.get("ports") or []:
        if p.get("name") == port and p.get("containerPort") is not None:
            return int(p["containerPort"])
    return None


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String()` writes it: 10s, 1m20s, 5m0s, 1.5s."""
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.9f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


@dataclass
class Backoff:
    """The kubelet's crash-loop back-off: client-go `util/flowcontrol/backoff.go` `Backoff` as `kubelet.go`
    configures it (`newCrashLoopBackOff`): initial 10 s (`initialCrashLoopBackOff`), doubling, no jitter, up
    to the node's `crashLoopBackOff.maxContainerRestartPeriod` (default 300 s, `MaxContainerBackOff`; a lower
    maximum lowers the initial value too), and the kubelet's own expiry (`HasExpiredFunc`): an entry whose
    last update is more than 600 s before the event time starts over. All times are the node's clock."""

    max: float = BACKOFF_MAX
    entries: dict[str, tuple[float, datetime]] = field(default_factory=dict)

    @property
    def initial(self) -> float:
        return min(BACKOFF_INITIAL, self.max)

    def get(self, key: str) -> float:
        """The current back-off of `key` in seconds (0 if none)."""
        entry = self.entries.get(key)
        return entry[0] if entry else 0.0

    def in_backoff_since(self, key: str, event: datetime, now: datetime) -> float:
        """`IsInBackOffSince`: seconds left of `key`'s back-off counted from `event` (0 = not in back-off)."""
        self.gc(now)
        entry = self.entries.get(key)
        if entry is None or _expired(event, entry[1]):
            return 0.0
        left = entry[0] - (now - event).total_seconds()
        return left if left > 0 else 0.0

    def next(self, key: str, event: datetime, now: datetime) -> None:
        """`Next`: a new or expired key starts at the initial back-off, else it doubles up to the maximum."""
        entry = self.entries.get(key)
        if entry is None or _expired(event, entry[1]):
            delay = self.initial
        else:
            delay = min(entry[0] * 2, self.max)
        self.entries[key] = (delay, now)

    def gc(self, now: datetime) -> None:
        """`GC` (the kubelet's housekeeping): forget keys not updated for longer than the expiry."""
        for key in [k for k, (_, last) in self.entries.items() if _expired(now, last)]:
            del self.entries[key]


def _expired(event: datetime, last_update: datetime) -> bool:
    return (event - last_update).total_seconds() > BACKOFF_EXPIRY


@dataclass
class Instance:
    """One run of a container: its process, logs and what it ended with."""

    container_id: str
    image: Image
    spec_hash: str
    log_path: Path
    term_path: Path
    proc: RunningContainer | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    node_finished_at: datetime | None = None  # finished_at on the node's clock when the exit was recorded
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


@dataclass
class ContainerState:
    """What the kubelet knows of one container of a pod."""

    name: str
    restart_count: int = 0
    runs: int = 0
    spec_seen: str = ""
    current: Instance | None = None
    previous: Instance | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    ready: bool = False
    kill_reason: str = ""
    allocated: dict[str, Any] = field(default_factory=dict)
    restart_for: str = ""
    probe_failed: str = ""  # "livenessProbe" / "startupProbe" whose failure asks for a kill
    started: bool = False  # the startup probe passed (or there is none)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    probe_task: asyncio.Task[None] | None = None


class PodWorker:
    """Runs one pod on its node until it ends or is deleted."""

    def __init__(self, kubelet: Kubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.ns = pod["metadata"].get("namespace", "")
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.node = pod["spec"]["nodeName"]
        self.dir = kubelet.root / "pods" / self.uid
        self.containers: dict[str, ContainerState] = {}
        self.init_containers: dict[str, ContainerState] = {}
        self.initialized = False
        self.projected_meta = self.meta_of(pod)
        self.remount_pending = False
        self.volumes: dict[str, Path] = {}
        self.sandbox_ready = False
        self.pod_sandbox: PodSandbox | None = None
        self.start_time: datetime | None = None
        self.terminating = False
        self.final_phase: str | None = None
        self.final_reason = ""
        self.final_message = ""
        self.pod_ip = f"10.244.0.{(int(uuid.UUID(self.uid).int) % 250) + 2}"
        self._status_dirty = False
        self.task: asyncio.Task[None] | None = None
        self.volume_error = ""

    # -- helpers -------------------------------------------------------------------------------------
    def pod(self) -> Obj | None:
        return self.kubelet.store.peek(R.PODS, self.ns, self.name)

    def spec_of(self, name: str) -> dict[str, Any] | None:
        pod = self.pod()
        if pod is None:
            return None
        for c in [*pod["spec"].get("containers", []), *(pod["spec"].get("initContainers") or [])]:
            if c["name"] == name:
                return c
        return None

    def event(self, etype: str, reason: str, message: str) -> None:
        pod = self.pod()
        if pod is not None:
            self.kubelet.events.record(pod, etype, reason, message, component="kubelet", host=self.node)

    def mark_dirty(self) -> None:
        if not self._status_dirty:
            self._status_dirty = True
            asyncio.get_running_loop().call_soon(self.write_status)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        profile = self.kubelet.profile
        self.start_time = datetime.now(UTC)
        self.mark_dirty()
        await asyncio.sleep(profile.sandbox + profile.network)
        while not self.terminating and self.pod_sandbox is None:
            try:
                host_network = bool(((self.pod() or {}).get("spec") or {}).get("hostNetwork"))
                self.pod_sandbox = await self.kubelet.runtime.create_sandbox(host_network)
            except (RuntimeUnavailable, OSError) as e:
                self.event("Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {e}")
                await asyncio.sleep(self.kubelet.volume_retry)
        while not self.terminating:
            try:
                self.setup_volumes()
                break
            except VolumeError as e:
                if self.volume_error != str(e):
                    self.event("Warning", "FailedMount", str(e))
                self.volume_error = str(e)
                await asyncio.sleep(self.kubelet.volume_retry)
        self.sandbox_ready = True
        pod = self.pod()
        if pod is None or self.terminating:
            return
        if not await self.run_init_containers(pod):
            return
        pod = self.pod()
        if pod is None or self.terminating:
            return
        for c in pod["spec"].get("containers", []):
            st = ContainerState(c["name"], spec_seen=spec_hash(c))
            self.containers[c["name"]] = st
            st.task = asyncio.create_task(self.container_loop(st))
        self.mark_dirty()
        deadline = pod["spec"].get("activeDeadlineSeconds")
        while not self.terminating and self.final_phase is None:
            deadline = (self.pod() or {}).get("spec", {}).get("activeDeadlineSeconds")
            if deadline and (datetime.now(UTC) - self.start_time).total_seconds() >= deadline:
                self.event(
                    "Normal",
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )
                await self.end(
                    "Failed",
                    "DeadlineExceeded",
                    "Pod was active on the node longer than the specified deadline",
                )
                break
            await asyncio.sleep(0.2)

    def setup_volumes(self) -> None:
        pod = self.pod()
        if pod is None:
            return
        for vol in pod["spec"].get("volumes") or []:
            host = self.dir / "volumes" / vol["name"]
            if "emptyDir" in vol:
                host.mkdir(parents=True, exist_ok=True)
            elif "configMap" in vol:
                self.write_configmap(vol, host, pod)
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

    @staticmethod
    def meta_of(pod: Obj) -> tuple[Any, Any]:
        meta = pod.get("metadata") or {}
        return meta.get("labels") or {}, meta.get("annotations") or {}

    async def remount_downward(self) -> None:
        """A pod update changed its labels or annotations: the volume manager marks the pod's downwardAPI
        volumes for remount (`desired_state_of_world_populator.go` `ReprocessPod` / `MarkRemountRequired`)
        and the reconciler, on its 100 ms loop, rewrites their files atomically (fix of kubernetes#59813).
        The profile's `volume_refresh` models that delay."""
        await asyncio.sleep(self.kubelet.profile.volume_refresh)
        self.remount_pending = False
        self.refresh_volumes(kinds=("downwardAPI",))

    def refresh_volumes(self, kinds: tuple[str, ...] = ("configMap", "downwardAPI")) -> None:
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
                elif "downwardAPI" in vol:
                    self.write_downward(vol, self.volumes[vol["name"]], pod)
            except (VolumeError, KeyError, OSError):
                continue

    async def run_init_containers(self, pod: Obj) -> bool:
        """Run the init containers one at a time, in order, each to a zero exit, before any app container
        (`kuberuntime_manager.go` `computePodActions` / `computeInitContainerActions`). A failed one is
        restarted per restartPolicy, with the restart back-off of any other container; under Never the pod
        fails. Returns whether the app containers may start."""
        for c in pod["spec"].get("initContainers") or []:
            st = ContainerState(c["name"], spec_seen=spec_hash(c))
            self.init_containers[c["name"]] = st
        self.mark_dirty()
        for name, st in self.init_containers.items():
            while True:
                if self.terminating or self.final_phase is not None:
                    return False
                spec = self.spec_of(name)
                if spec is None:
                    return False
                cur = st.current
                if cur is None or cur.exit_code is not None:
                    if cur is not None:
                        if cur.exit_code == 0:
                            break
                        policy = ((self.pod() or {}).get("spec") or {}).get("restartPolicy", "Always")
                        if policy == "Never":
                            await self.end("Failed", "", "")
                            return False
                    await self.start_unless_backing_off(st, spec, cur)
                    continue
                assert cur.proc is not None
                code = await cur.proc.wait()
                await self.exited(st, code)
        self.initialized = True
        self.mark_dirty()
        return True

    async def start_unless_backing_off(
        self, st: ContainerState, spec: dict[str, Any], exited: Instance | None
    ) -> None:
        """Start a container unless its crash-loop back-off holds it (`kuberuntime_manager.go` `doBackOff`).

        `exited` is the container's newest exited instance in the pod status the sync began with: none (a
        first start, or the restart after a kill of the only instance) -> start, no back-off. Else the key is
        pod + container name + hash(name, image) of the spec to start (`GetStableKey`), and the start is
        refused (waiting CrashLoopBackOff, event BackOff) while now - FinishedAt(exited) < back-off(key);
        a start that passes calls `Next(key)`. A refused start is retried when the back-off runs out or on a
        pod update, whichever comes first.
        """
        if exited is None:
            await self.start(st, spec)
            return
        node = self.kubelet.nodes[self.node]
        key = f"{self.name}_{self.ns}_{self.uid}_{st.name}_{spec_hash(spec)}"
        finished = exited.node_finished_at or node.now()
        left = node.backoff.in_backoff_since(key, finished, node.now())
        if left > 0:
            pod = f"{self.name}_{self.ns}({self.uid})"
            st.waiting_reason = "CrashLoopBackOff"
            delay = go_duration(node.backoff.get(key))
            st.waiting_message = f"back-off {delay} restarting failed container={st.name} pod={pod}"
            self.event("Warning", "BackOff", f"Back-off restarting failed container {st.name} in pod {pod}")
            self.mark_dirty()
            await self.sleep_or_wake(st, left)
            return
        node.backoff.next(key, finished, node.now())
        await self.start(st, spec)

    async def container_loop(self, st: ContainerState) -> None:
        """Reconcile one container: start, restart per policy, restart on spec change, back off."""
        try:
            while not self.terminating and self.final_phase is None:
                spec = self.spec_of(st.name)
                if spec is None:
                    return
                cur = st.current
                if cur is not None and cur.exit_code is None:
                    # running: wait for an exit, a spec change or a kill request
                    st.wake.clear()
                    assert cur.proc is not None
                    waiter = asyncio.create_task(cur.proc.wait())
                    woke = asyncio.create_task(st.wake.wait())
                    await asyncio.wait({waiter, woke}, return_when=asyncio.FIRST_COMPLETED)
                    woke.cancel()
                    if self.terminating:
                        waiter.cancel()
                        return
                    spec = self.spec_of(st.name)
                    why = ""
                    if spec is not None and spec_hash(spec) != cur.spec_hash:
                        why = f"Container {st.name} definition changed, will be restarted"
                    elif st.restart_for:
                        why = st.restart_for
                    elif st.probe_failed:
                        # `computePodActions`: kill a container whose liveness or startup probe failed; start
                        # it again in the same sync unless the restartPolicy is Never
                        why = f"Container {st.name} failed {st.probe_failed.removesuffix('Probe')} probe"
                        if ((self.pod() or {}).get("spec") or {}).get("restartPolicy", "Always") == "Never":
                            waiter.cancel()
                            self.event("Normal", "Killing", why)
                            await self.kill(st, self.probe_grace(spec, st.probe_failed), reason="")
                            st.probe_failed = ""
                            continue
                        why += ", will be restarted"
                    st.restart_for = ""
                    grace = self.probe_grace(spec, st.probe_failed) if st.probe_failed else self.grace()
                    st.probe_failed = ""
                    if not waiter.done() and spec is not None and why:
                        waiter.cancel()
                        # kill and start in one sync (`SyncPod` steps 3 and 8), whatever the restartPolicy;
                        # the back-off looks at the pod status taken when the sync began, where the killed
                        # instance was still running: its newest exited instance is the one before
                        exited = st.previous
                        self.event("Normal", "Killing", why)
                        await self.kill(st, grace, reason="")
                        await self.start_unless_backing_off(st, spec, exited)
                        continue
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    await self.exited(st, waiter.result())
                    continue
                # not running: never started, or exited
                if cur is None:
                    await self.start(st, spec)
                    continue
                # an exited container is restarted only by its restartPolicy, even if its spec changed
                if self.should_restart(cur):
                    await self.start_unless_backing_off(st, spec, cur)
                    continue
                self.update_phase()
                await self.sleep_or_wake(st, None)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("container loop for %s/%s/%s failed", self.ns, self.name, st.name)

    async def sleep_or_wake(self, st: ContainerState, delay: float | None) -> None:
        st.wake.clear()
        try:
            await asyncio.wait_for(st.wake.wait(), timeout=delay)
        except TimeoutError:
            pass

    def should_restart(self, inst: Instance) -> bool:
        policy = ((self.pod() or {}).get("spec") or {}).get("restartPolicy", "Always")
        if policy == "Always":
            return True
        if policy == "OnFailure":
            return inst.exit_code != 0
        return False

    def grace(self) -> float:
        pod = self.pod() or {}
        deleting = pod.get("metadata", {}).get("deletionGracePeriodSeconds")
        if deleting is not None:
            return float(deleting)
        return float(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))

    def probe_grace(self, spec: dict[str, Any] | None, kind: str) -> float:
        """Grace period of a kill for a failed probe: the probe's terminationGracePeriodSeconds if set, else
        the pod's (`kuberuntime_container.go` `killContainer`)."""
        tgps = ((spec or {}).get(kind) or {}).get("terminationGracePeriodSeconds")
        return float(tgps) if tgps is not None else self.grace()

    async def pull(self, st: ContainerState, spec: dict[str, Any]) -> Image | None:
        """Pull per imagePullPolicy; None (with waiting reason set) when the image cannot be had."""
        ref = spec.get("image", "")
        policy = spec.get("imagePullPolicy") or "IfNotPresent"
        node = self.kubelet.nodes[self.node]
        stored = node.image_for(ref)
        present = stored is not None
        if policy == "Never" and not present:
            st.waiting_reason, st.waiting_message = (
                "ErrImageNeverPull",
                (f'Container image "{ref}" is not present with pull policy of Never'),
            )
            self.event("Warning", "ErrImageNeverPull", st.waiting_message)
            self.mark_dirty()
            return None
        if present and policy != "Always":
            self.event("Normal", "Pulled", f'Container image "{ref}" already present on machine')
            return stored
        key = f"{self.node}/{normalize(ref)}"
        wait = self.kubelet.image_backoff_wait(key)
        if wait > 0:
            st.waiting_reason = "ImagePullBackOff"
            st.waiting_message = f'Back-off pulling image "{ref}"'
            self.event("Normal", "BackOff", st.waiting_message)
            self.mark_dirty()
            await self.sleep_or_wake(st, wait)
            return None
        if st.current is None or not st.waiting_reason:
            # a container whose last start failed keeps showing that failure (the kubelet's reasonCache,
            # `convertToAPIContainerStatuses`) until a start succeeds or fails otherwise
            st.waiting_reason, st.waiting_message = "ContainerCreating", ""
        self.mark_dirty()
        self.event("Normal", "Pulling", f'Pulling image "{ref}"')
        t0 = asyncio.get_running_loop().time()
        image = await self.kubelet.pull_to_node(self.node, ref)
        if image is None:
            self.kubelet.image_backoff_next(key)
            st.waiting_reason = "ErrImagePull"
            st.waiting_message = (
                f'failed to pull and unpack image "{normalize(ref)}": failed to resolve reference '
                f'"{normalize(ref)}": {normalize(ref)}: not found ({NOT_IN_CATALOGUE})'
            )
            self.event("Warning", "Failed", f'Failed to pull image "{ref}": {st.waiting_message}')
            self.event("Warning", "Failed", "Error: ErrImagePull")
            self.mark_dirty()
            await self.sleep_or_wake(st, 1.0)  # shown until the next sync turns it into ImagePullBackOff
            return None
        took = asyncio.get_running_loop().time() - t0
        self.event(
            "Normal",
            "Pulled",
            f'Successfully pulled image "{ref}" in {took * 1000:.0f}ms. Image size: {image.size} bytes.',
        )
        return image

    async def start(self, st: ContainerState, spec: dict[str, Any]) -> None:
        image = await self.pull(st, spec)
        if image is None or self.terminating:
            return
        spec = self.spec_of(st.name) or spec
        pod = self.pod()
        if pod is None:
            return
        try:
            env = self.container_env(pod, spec, image)
            # OCI config: `command` replaces the Entrypoint and drops the Cmd; `args` replaces the Cmd
            argv = [expand(a, env) for a in (spec.get("command") or list(image.entrypoint))]
            args = spec.get("args") if spec.get("command") or spec.get("args") else list(image.cmd)
            argv += [expand(a, env) for a in (args or [])]
            mounts = self.mounts(spec)
        except VolumeError as e:
            st.waiting_reason, st.waiting_message = "CreateContainerConfigError", str(e)
            self.event("Warning", "Failed", f"Error: {e}")
            self.mark_dirty()
            await self.sleep_or_wake(st, 1.0)
            return
        if not argv:  # neither the image nor the container names a command: containerd refuses it
            st.waiting_reason = "CreateContainerError"
            st.waiting_message = (
                f'failed to generate container "{uuid.uuid4().hex}" spec: failed to generate spec: '
                "no command specified"
            )
            self.event("Warning", "Failed", f"Error: {st.waiting_message}")
            self.mark_dirty()
            await self.sleep_or_wake(st, 1.0)
            return
        await asyncio.sleep(self.kubelet.profile.container_start)
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        st.runs += 1
        cdir = self.dir / "containers" / st.name / str(st.runs)
        cdir.mkdir(parents=True, exist_ok=True)
        inst = Instance(
            f"containerd://{cid}", image, spec_hash(spec), cdir / "0.log", cdir / "termination-log"
        )
        self.event("Normal", "Created", f"Created container: {st.name}")
        resources = self.kubelet.resizes.allocation(self, st.name, spec)
        limit = (resources.get("limits") or {}).get("memory")
        launch = ContainerLaunch(
            container_id=cid,
            argv=argv,
            env=env,
            mounts=mounts,
            log_path=inst.log_path,
            termination_message_path=spec.get("terminationMessagePath") or "/dev/termination-log",
            termination_host_path=inst.term_path,
            working_dir=spec.get("workingDir"),
            host_paths=image.host_paths(),
            memory_limit_bytes=int(parse_quantity(str(limit))) if limit else None,
            host_base=image.host_base,
            links=list(image.links),
            pod_sandbox=self.pod_sandbox,
        )
        try:
            inst.proc = await self.kubelet.runtime.start(launch)
        except StartError as e:
            # runc could not exec the command: the container exists and is terminated at once
            # (containerd reports exit code 128 and a zero start time)
            inst.started_at, inst.finished_at = datetime.fromtimestamp(0, UTC), datetime.now(UTC)
            inst.node_finished_at = self.kubelet.nodes[self.node].stamp(inst.finished_at)
            inst.exit_code, inst.reason, inst.message = 128, "StartError", str(e)
            if st.current is not None:
                st.previous = st.current
                st.restart_count += 1
            st.current = inst
            st.ready = False
            st.waiting_reason, st.waiting_message = "RunContainerError", str(e)
            self.event("Warning", "Failed", f"Error: {e}")
            self.mark_dirty()
            self.update_phase()
            return
        except Exception as e:
            st.waiting_reason, st.waiting_message = "CreateContainerError", str(e)
            self.event("Warning", "Failed", f"Error: {e}")
            self.mark_dirty()
            await self.sleep_or_wake(st, 1.0)
            return
        inst.started_at = inst.proc.started_at
        st.allocated = resources
        if st.current is not None:
            st.previous = st.current
            st.restart_count += 1
        st.current = inst
        st.ready = False
        st.started = not spec.get("startupProbe")
        st.waiting_reason = st.waiting_message = ""
        self.event("Normal", "Started", f"Started container {st.name}")
        if st.probe_task:
            st.probe_task.cancel()
        st.probe_task = asyncio.create_task(self.probe_loop(st, inst, spec))
        self.mark_dirty()

    def container_env(self, pod: Obj, spec: dict[str, Any], image: Image) -> dict[str, str]:
        env: dict[str, str] = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": self.name,
            "HOME": "/root",
        }
        env.update(image.env)
        for src in spec.get("envFrom") or []:
            ref = src.get("configMapRef")
            if ref:
                cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, ref.get("name", ""))
                if cm is None and not ref.get("optional"):
                    raise VolumeError(f'configmap "{ref.get("name")}" not found')
                for k, v in ((cm or {}).get("data") or {}).items():
                    env[src.get("prefix", "") + k] = v
        for item in spec.get("env") or []:
            if "value" in item:
                env[item["name"]] = expand(str(item.get("value", "")), env)
            elif item.get("valueFrom", {}).get("fieldRef"):
                env[item["name"]] = resolve_field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
            elif item.get("valueFrom", {}).get("configMapKeyRef"):
                ref = item["valueFrom"]["configMapKeyRef"]
                cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, ref.get("name", ""))
                value = ((cm or {}).get("data") or {}).get(ref.get("key", ""))
                if value is None and not ref.get("optional"):
                    raise VolumeError(
                        f"couldn't find key {ref.get('key')} in ConfigMap {self.ns}/{ref.get('name')}"
                    )
                if value is not None:
                    env[item["name"]] = value
            elif item.get("valueFrom", {}).get("resourceFieldRef"):
                env[item["name"]] = self.resource_field(spec, item["valueFrom"]["resourceFieldRef"])
            else:
                env[item["name"]] = ""
        return env

    @staticmethod
    def resource_field(spec: dict[str, Any], ref: dict[str, Any]) -> str:
        kind, _, res = ref.get("resource", "").partition(".")
        value = ((spec.get("resources") or {}).get(kind) or {}).get(res)
        if value is None:
            return "0"
        return str(int(parse_quantity(str(value))))

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

    async def probe_loop(self, st: ContainerState, inst: Instance, spec: dict[str, Any]) -> None:
        """Run the container's probes (one worker each, `prober/worker.go`): the startup probe first, then
        readiness and liveness once it passed (`prober_manager.go`: they are skipped until started)."""
        if spec.get("startupProbe") and not await self.probe_worker(st, inst, spec, "startupProbe"):
            return
        st.started = True
        if not spec.get("readinessProbe"):
            st.ready = True
        self.mark_dirty()
        kinds = [k for k in ("readinessProbe", "livenessProbe") if spec.get(k)]
        await asyncio.gather(*(self.probe_worker(st, inst, spec, k) for k in kinds))

    async def probe_worker(self, st: ContainerState, inst: Instance, spec: dict[str, Any], kind: str) -> bool:
        """One probe worker (`prober/worker.go` `doProbe`): a result changes only after successThreshold
        successes / failureThreshold failures in a row; readiness starts as failure. Every failure records an
        Unhealthy event (`prober.go` `probe`). A liveness or startup failure asks the container loop to kill
        (and restart) the container, and the worker stops for that instance (`onHold`). A startup worker
        returns True once its probe passed (it then stops); False when the instance is gone or failed."""
        probe = spec[kind]
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = float(probe.get("periodSeconds", 10))
        ok_needed, fail_needed = int(probe.get("successThreshold", 1)), int(probe.get("failureThreshold", 3))
        label = kind.removesuffix("Probe").capitalize()
        oks = fails = 0
        while inst.exit_code is None and st.current is inst and not self.terminating:
            good, msg = await self.run_probe(inst, spec, probe)
            if inst.exit_code is not None or st.current is not inst or self.terminating:
                return False
            if good:
                if kind == "startupProbe":
                    return True
                oks, fails = oks + 1, 0
                if kind == "readinessProbe" and not st.ready and oks >= ok_needed:
                    st.ready = True
                    self.mark_dirty()
            else:
                fails, oks = fails + 1, 0
                self.event("Warning", "Unhealthy", f"{label} probe failed: {msg}")
                if kind == "readinessProbe" and st.ready and fails >= fail_needed:
                    st.ready = False
                    self.mark_dirty()
                if kind != "readinessProbe" and fails >= fail_needed:
                    st.probe_failed = kind
                    st.wake.set()
                    return False
            await asyncio.sleep(period)
        return False

    async def run_probe(
        self, inst: Instance, spec: dict[str, Any], probe: dict[str, Any]
    ) -> tuple[bool, str]:
        """One probe (`prober.go` `runProbe`): exec in the container; tcpSocket and httpGet from inside the
        pod's network namespace, to 127.0.0.1 for the pod's IP (the default host) or the given host."""
        timeout = float(probe.get("timeoutSeconds", 1))
        if "exec" in probe:
            assert inst.proc is not None
            code, out = await self.kubelet.runtime.exec(
                inst.proc, list(probe["exec"].get("command") or []), timeout=timeout
            )
            if code == -1 and out == "timeout":
                return False, f"command timed out after {go_duration(timeout)}"
            return code == 0, out
        handler = probe.get("tcpSocket") or probe.get("httpGet")
        if handler is None or self.pod_sandbox is None:
            return False, "no supported probe handler (grpc probes are not modelled)"
        port = probe_port(spec, handler.get("port"))
        if port is None:
            return False, f"couldn't find port: {handler.get('port')} in container {spec.get('name')}"
        host = handler.get("host") or ""
        target = "127.0.0.1" if host in ("", self.pod_ip) else host
        if "tcpSocket" in probe:
            return await self.pod_sandbox.probe_tcp(port, timeout, host=target)
        version = ".".join(self.kubelet.kubernetes_version.split(".")[:2])
        headers = {
            "Host": f"{host or self.pod_ip}:{port}",
            "User-Agent": f"kube-probe/{version}",
            "Accept": "*/*",
        }
        for h in (
            handler.get("httpHeaders") or []
        ):  # user headers replace the defaults (`http.go` `NewProbeRequest`)
            for k in [k for k in headers if k.lower() == str(h.get("name", "")).lower()]:
                del headers[k]
            headers[str(h.get("name", ""))] = str(h.get("value", ""))
        return await self.pod_sandbox.probe_http(
            port,
            handler.get("path") or "/",
            timeout,
            scheme=handler.get("scheme") or "HTTP",
            headers=headers,
            host=target,
        )

    async def exited(self, st: ContainerState, code: int, *, relist: bool = True) -> None:
        """Record the instance's exit. `relist`: the kubelet learns of it through its PLEG relist (the
        profile's exit-detection delay); not when the kubelet stopped the container itself."""
        inst = st.current
        assert inst is not None and inst.proc is not None
        if relist:
            await asyncio.sleep(self.kubelet.profile.exit_detection)
        inst.exit_code = code
        inst.finished_at = inst.proc.finished_at or datetime.now(UTC)
        inst.node_finished_at = self.kubelet.nodes[self.node].stamp(inst.finished_at)
        spec = self.spec_of(st.name) or {}
        if inst.proc.oom_killed:
            inst.reason = "OOMKilled"
        elif st.kill_reason:
            inst.reason = st.kill_reason
        else:
            inst.reason = "Completed" if code == 0 else "Error"
        st.kill_reason = ""
        inst.message = inst.proc.termination_message(spec.get("terminationMessagePolicy") or "File")
        st.ready = False
        if st.probe_task:
            st.probe_task.cancel()
        self.mark_dirty()
        self.update_phase()

    async def kill(self, st: ContainerState, grace: float, reason: str) -> None:
        """Stop the running instance (preStop first), waiting at most `grace` seconds before SIGKILL."""
        inst = st.current
        if inst is None or inst.proc is None or inst.exit_code is not None:
            return
        spec = self.spec_of(st.name) or {}
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        pre = ((spec.get("lifecycle") or {}).get("preStop") or {}).get("exec")
        if pre and pre.get("command"):
            await self.kubelet.runtime.exec(inst.proc, list(pre["command"]), timeout=grace)
        st.kill_reason = reason
        code = await inst.proc.stop(max(0.0, grace - (loop.time() - t0)))
        await self.exited(st, code, relist=False)

    async def kill_for_crr(self, name: str, grace: float) -> bool:
        """Kill a container the way kruise-daemon does for a ContainerRecreateRequest (no restart by us)."""
        st = self.containers.get(name)
        if st is None or st.current is None or st.current.exit_code is not None:
            return False
        # the container loop sees the exit and restarts per restartPolicy, like the kubelet after a CRI stop
        inst = st.current
        assert inst.proc is not None
        code = await inst.proc.stop(grace)
        await asyncio.sleep(0)
        if st.current is inst and inst.exit_code is None:
            await self.exited(st, code)
        st.wake.set()
        return True

    async def end(self, phase: str, reason: str, message: str) -> None:
        self.final_phase, self.final_reason, self.final_message = phase, reason, message
        await self.stop_all(self.grace())
        await self.close_sandbox()
        self.mark_dirty()

    async def close_sandbox(self) -> None:
        """Stop the pod sandbox once no container runs (`killPodWithSyncResult`: StopPodSandbox)."""
        sandbox, self.pod_sandbox = self.pod_sandbox, None
        if sandbox is not None:
            await sandbox.close()

    async def stop_all(self, grace: float) -> None:
        waits = []
        for st in [*self.init_containers.values(), *self.containers.values()]:
            if st.task and st.task is not asyncio.current_task():
                st.task.cancel()
            if st.probe_task:
                st.probe_task.cancel()
            waits.append(self.kill(st, grace, reason=""))
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    async def terminate(self, grace: float, remove: bool = True) -> None:
        """Graceful deletion: kill every container, then let the API server forget the pod."""
        if self.terminating:
            return
        self.terminating = True
        for st in self.containers.values():
            st.wake.set()
        await self.stop_all(grace)
        if self.task and self.task is not asyncio.current_task():
            self.task.cancel()
        await self.close_sandbox()
        if remove:
            self.kubelet.store.remove(R.PODS, self.ns, self.name)
        self.kubelet.forget(self)
        shutil.rmtree(self.dir / "volumes", ignore_errors=True)

    def changed(self, pod: Obj) -> None:
        """The pod object changed: wake containers whose spec changed, start deletion if asked."""
        if pod["metadata"].get("deletionTimestamp") and not self.terminating:
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self.kubelet.spawn(self.terminate(grace))
            return
        meta = self.meta_of(pod)
        if meta != self.projected_meta:
            self.projected_meta = meta
            downward = any("downwardAPI" in v for v in pod["spec"].get("volumes") or [])
            if downward and self.sandbox_ready and not self.remount_pending:
                self.remount_pending = True
                self.kubelet.spawn(self.remount_downward())
        for c in pod["spec"].get("containers", []):
            st = self.containers.get(c["name"])
            if st is not None:
                new_hash = spec_hash(c)
                if new_hash != st.spec_seen:  # only a spec change wakes the container, not a status write
                    st.spec_seen = new_hash
                    st.wake.set()
        self.kubelet.resizes.handle(self, pod)

    def resize(self, st: ContainerState, spec: dict[str, Any]) -> None:
        """Apply an in-place resize (KEP-1287, `kuberuntime_manager.go` `computePodResizeAction` /
        `doPodResizeAction`) to one container whose spec resources differ from what it was started with.

        Per changed resource (cpu, memory) the container's `resizePolicy` decides: `NotRequired` (the default)
        updates the running container's limits in place (no restart, restartCount unchanged);
        `RestartContainer` kills it and starts it again with the new values. A container that is not running
        gets the new values at its next start. `status.containerStatuses[].resources` / `allocatedResources`
        show what is applied.
        """
        cur = st.current
        new = spec.get("resources") or {}
        if cur is None or cur.proc is None or cur.exit_code is not None:
            return  # applied by the next start
        changed = {
            name
            for part in ("requests", "limits")
            for name in ("cpu", "memory")
            if (st.allocated.get(part) or {}).get(name) != (new.get(part) or {}).get(name)
        }
        policies = {p.get("resourceName"): p.get("restartPolicy") for p in spec.get("resizePolicy") or []}
        st.allocated = deep_copy(new)
        if any(policies.get(name, "NotRequired") == "RestartContainer" for name in changed):
            st.restart_for = f"Container {st.name} resize requires restart"
            st.wake.set()
        else:
            limit = (new.get("limits") or {}).get("memory")
            cur.proc.memory_limit_bytes = int(parse_quantity(str(limit))) if limit else None
        self.mark_dirty()

    # -- status --------------------------------------------------------------------------------------
    def update_phase(self) -> None:
        if self.final_phase:
            return
        states = list(self.containers.values())
        if states and all(
            s.current and s.current.exit_code is not None and not self.should_restart(s.current)
            for s in states
        ):
            failed = any(s.current and s.current.exit_code != 0 for s in states)
            self.final_phase = "Failed" if failed else "Succeeded"
            for s in states:
                if s.task and s.task is not asyncio.current_task():
                    s.task.cancel()
        self.mark_dirty()

    def phase(self) -> str:
        if self.final_phase:
            return self.final_phase
        states = list(self.containers.values())
        if not self.sandbox_ready or not states or any(s.current is None for s in states):
            return "Pending"
        return "Running"

    def container_status(self, st: ContainerState, spec: dict[str, Any]) -> dict[str, Any]:
        cur = st.current
        out: dict[str, Any] = {
            "name": st.name,
            "image": spec.get("image"),
            "imageID": "",
            "ready": bool(st.ready and cur and cur.exit_code is None),
            "restartCount": st.restart_count,
            "started": bool(cur and cur.exit_code is None and st.started),
        }
        if cur is not None:
            out["containerID"] = cur.container_id
            out["imageID"] = cur.image.image_id
            out["image"] = cur.image.ref
        last = st.previous if cur is None or cur.exit_code is None else cur
        if st.waiting_reason and (cur is None or cur.exit_code is not None):
            out["state"] = {"waiting": {"reason": st.waiting_reason}}
            if st.waiting_message:
                out["state"]["waiting"]["message"] = st.waiting_message
            if cur is not None and cur.exit_code is not None:
                last = cur
        elif cur is not None and cur.exit_code is None:
            out["state"] = {"running": {"startedAt": _ts(cur.started_at)}}
        elif cur is not None:
            out["state"] = {"terminated": self.terminated(cur)}
            last = st.previous
        else:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
        out["lastState"] = (
            {"terminated": self.terminated(last)} if last and last.exit_code is not None else {}
        )
        resources = st.allocated if cur is not None else self.kubelet.resizes.allocation(self, st.name, spec)
        if resources:
            out["resources"] = deep_copy(resources)
        allocated = self.kubelet.resizes.allocated_requests(self, st.name)
        if allocated:
            out["allocatedResources"] = allocated
        return out

    @staticmethod
    def terminated(inst: Instance) -> dict[str, Any]:
        t: dict[str, Any] = {
            "exitCode": inst.exit_code,
            "reason": inst.reason,
            "startedAt": _ts(inst.started_at),
            "finishedAt": _ts(inst.finished_at),
            "containerID": inst.container_id,
        }
        if inst.exit_code is not None and inst.exit_code >= 128 and inst.reason in ("Error", ""):
            t["signal"] = inst.exit_code - 128
        if inst.message:
            t["message"] = inst.message
        return t

    def write_status(self) -> None:
        self._status_dirty = False
        pod = self.pod()
        if pod is None or pod["metadata"]["uid"] != self.uid:
            return
        old_status = pod.get("status") or {}
        status: dict[str, Any] = {
            "phase": self.phase(),
            "hostIP": self.kubelet.nodes[self.node].ip,
            "hostIPs": [{"ip": self.kubelet.nodes[self.node].ip}],
            "startTime": _ts(self.start_time),
            "qosClass": old_status.get("qosClass", "BestEffort"),
        }
        if self.sandbox_ready:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.final_reason:
            status["reason"], status["message"] = self.final_reason, self.final_message
        if self.init_containers:
            inits = []
            for name, st in self.init_containers.items():
                out = self.container_status(st, self.spec_of(name) or {})
                # an init container is ready once it has completed (`kubelet_pods.go`
                # `convertToAPIContainerStatuses`)
                out["ready"] = bool(st.current and st.current.exit_code == 0)
                inits.append(out)
            status["initContainerStatuses"] = inits
        initialized = self.initialized or not pod["spec"].get("initContainers")
        specs = {c["name"]: c for c in pod["spec"].get("containers", [])}
        statuses = []
        for name, spec in specs.items():
            st = self.containers.get(name)
            if st is None:
                creating = "ContainerCreating" if initialized else "PodInitializing"
                statuses.append(
                    {
                        "name": name,
                        "image": spec.get("image"),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": creating}},
                        "lastState": {},
                    }
                )
            else:
                statuses.append(self.container_status(st, spec))
        status["containerStatuses"] = statuses
        all_ready = bool(statuses) and all(s["ready"] for s in statuses) and status["phase"] == "Running"
        conds = {
            "PodReadyToStartContainers": self.sandbox_ready and not self.final_phase,
            "Initialized": initialized,
            "ContainersReady": all_ready,
            "Ready": all_ready,
            "PodScheduled": True,
        }
        old_conds = {c["type"]: c for c in old_status.get("conditions") or []}
        conditions = []
        for ctype, ok in conds.items():
            value = "True" if ok else "False"
            prev = old_conds.get(ctype)
            cond = {
                "type": ctype,
                "status": value,
                "lastTransitionTime": prev["lastTransitionTime"]
                if prev and prev["status"] == value
                else now_iso(),
                "lastProbeTime": None,
            }
            if not ok and ctype in ("Ready", "ContainersReady"):
                unready = [s["name"] for s in statuses if not s["ready"]]
                cond["reason"] = "ContainersNotReady" if status["phase"] != "Succeeded" else "PodCompleted"
                cond["message"] = f"containers with unready status: [{' '.join(unready)}]"
            conditions.append(cond)
        status["conditions"] = conditions + self.kubelet.resizes.conditions(self)
        if status == old_status:
            return
        pod = dict(pod)
        pod["status"] = status
        self.kubelet.store.update(R.PODS, pod, check_rv=False)

    def metrics(self) -> list[dict[str, Any]]:
        out = []
        for st in self.containers.values():
            cur = st.current
            rss = cur.proc.rss_bytes() if cur and cur.proc and cur.exit_code is None else 0
            out.append({"name": st.name, "usage": {"cpu": "0", "memory": f"{max(rss // 1024, 0)}Ki"}})
        return out


class VolumeError(Exception):
    """A volume could not be set up (the kubelet retries and reports FailedMount)."""


def check_max_container_restart_period(seconds: float) -> float:
    """Validate the node setting `crashLoopBackOff.maxContainerRestartPeriod` (KEP-5593: 1 s to 300 s)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 1 <= seconds <= BACKOFF_MAX:
        raise ValueError(
            f"crashLoopBackOff.maxContainerRestartPeriod must be between 1 and 300 seconds, not {seconds!r}"
        )
    return float(seconds)


@dataclass
class NodeState:
    """A node's kubelet-side state: its image store and its crash-loop back-off, which runs on the node's
    clock: real time plus `clock_offset` (tests move it forward instead of sleeping through a back-off)."""

    name: str
    ip: str
    images: dict[str, Image] = field(default_factory=dict)
    pulled_at: dict[str, datetime] = field(default_factory=dict)
    pulling: dict[str, asyncio.Future[Image | None]] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)
    clock_offset: float = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset)

    def stamp(self, real: datetime) -> datetime:
        """A real time (the runtime's) on this node's clock."""
        return real + timedelta(seconds=self.clock_offset)

    def image_for(self, ref: str) -> Image | None:
        """The stored image `ref` names, as the runtime resolves it: by reference, or for a digest reference
        (`repo@sha256:D`, `repo:tag@sha256:D`: the tag is ignored) any stored image of that repository and
        digest."""
        full = normalize(ref)
        if full in self.images:
            return self.images[full]
        digest = split_reference(full)[2]
        if digest:
            repo = repository(full)
            for image in self.images.values():
                if image.digest == digest and repository(image.ref) == repo:
                    return replace(image, ref=full)
        return None


class LogSource:
    """One container instance's log, as `pods/log` serves it."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst

    def read(self, **kw: Any) -> bytes:
        if not self.inst.log_path.exists():
            return b""
        return read_log(self.inst.log_path, **kw)

    def follow(self, **kw: Any):
        return follow_log(self.inst.log_path, is_running=lambda: self.inst.exit_code is None, **kw)


class Kubelet:
    """All nodes' kubelets plus the scheduler, sharing one process runtime."""

    def __init__(
        self,
        store: Store,
        events: EventRecorder,
        profile: Profile,
        catalogue: Catalogue,
        root: Path,
        sandbox: str = "auto",
        kubernetes_version: str = "1.35.0",
    ) -> None:
        self.store = store
        self.events = events
        self.profile = profile
        self.catalogue = catalogue
        self.root = root
        self.sandbox = sandbox
        self.kubernetes_version = kubernetes_version
        self.nodes: dict[str, NodeState] = {}
        self.workers: dict[str, PodWorker] = {}
        self.image_backoff: dict[str, tuple[float, float]] = {}
        self.volume_retry = 1.0
        self.sync_period = 60.0
        self._runtime = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.resizes = ResizeManager(self)

    @property
    def runtime(self):
        if self._runtime is None:
            from .runtime import ContainerRuntime

            self._runtime = ContainerRuntime(self.sandbox)
        return self._runtime

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        max_container_restart_period: float = BACKOFF_MAX,
    ) -> None:
        ip = f"172.18.{len(self.nodes) // 250}.{len(self.nodes) % 250 + 2}"
        backoff = Backoff(max=check_max_container_restart_period(max_container_restart_period))
        self.nodes[name] = NodeState(name, ip, backoff=backoff)

    def configure_node(self, name: str, max_container_restart_period: float) -> None:
        """Change a node's kubelet configuration (`crashLoopBackOff.maxContainerRestartPeriod`). As a real
        kubelet restarted with a new configuration, it starts with an empty back-off."""
        self.nodes[name].backoff = Backoff(
            max=check_max_container_restart_period(max_container_restart_period)
        )

    def advance_clock(self, name: str, seconds: float) -> None:
        """Move a node's clock forward (tests: back-off doubling and expiry without waiting for them)."""
        self.nodes[name].clock_offset += seconds
        for worker in self.workers.values():
            if worker.node == name:
                for st in [*worker.init_containers.values(), *worker.containers.values()]:
                    st.wake.set()

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start(self) -> None:
        self.store.listen(self.on_change)
        self.spawn(self.periodic_sync())
        for pod in list(self.store.items(R.PODS)):
            self.on_change("ADDED", R.PODS, pod, None)

    async def periodic_sync(self) -> None:
        while True:
            await asyncio.sleep(self.sync_period)
            for w in list(self.workers.values()):
                w.refresh_volumes()

    def on_change(self, kind: str, res: R.Resource, obj: Obj, old: Obj | None) -> None:
        if res is R.CONFIGMAPS:
            return
        if res is not R.PODS:
            return
        if capacity_freed(kind, obj, old):
            self.resizes.retry_deferred()  # (the scheduler moves its unschedulable pods on the same change)
        uid = obj["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None and not worker.terminating:
                self.spawn(worker.terminate(0, remove=False))
            return
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:  # the scheduler binds it
            return
        if worker is None:
            if node not in self.nodes or obj["metadata"].get("deletionTimestamp"):
                if obj["metadata"].get("deletionTimestamp"):
                    self.store.remove(R.PODS, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                return
            if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            worker = PodWorker(self, obj)
            self.workers[uid] = worker
            self.resizes.admit(worker, obj)
            worker.task = asyncio.create_task(worker.run())
            return
        worker.changed(obj)

    def forget(self, worker: PodWorker) -> None:
        self.workers.pop(worker.uid, None)
        self.resizes.forget(worker.uid)

    # -- images ----------------------------------------------------------------------------------------
    async def pull_to_node(self, node: str, ref: str) -> Image | None:
        """Pull `ref` onto `node` (one pull per image per node at a time); None if it does not exist."""
        state = self.nodes[node]
        full = normalize(ref)
        if full in state.pulling:
            return await asyncio.shield(state.pulling[full])
        fut: asyncio.Future[Image | None] = asyncio.get_running_loop().create_future()
        state.pulling[full] = fut
        try:
            image = self.catalogue.lookup(ref)
            await asyncio.sleep(self.profile.pull_seconds(image.size if image else 0))
            if image is not None:
                state.images[full] = image
                state.pulled_at[full] = datetime.now(UTC)
            fut.set_result(image)
            return image
        finally:
            state.pulling.pop(full, None)
            if not fut.done():
                fut.set_result(None)

    def image_backoff_wait(self, key: str) -> float:
        entry = self.image_backoff.get(key)
        if entry is None:
            return 0.0
        delay, since = entry
        return max(0.0, since + delay - asyncio.get_running_loop().time())

    def image_backoff_next(self, key: str) -> None:
        entry = self.image_backoff.get(key)
        delay = IMAGE_BACKOFF_INITIAL if entry is None else min(entry[0] * 2, BACKOFF_MAX)
        self.image_backoff[key] = (delay, asyncio.get_running_loop().time())

    # -- for the API server and the Kruise daemon ---------------------------------------------------------
    def worker_for(self, pod: Obj) -> PodWorker | None:
        return self.workers.get(pod["metadata"]["uid"])

    def log_source(self, pod: Obj, container: str | None, previous: bool) -> LogSource:
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        name = pod["metadata"]["name"]
        if container is None:
            if len(names) != 1:
                raise ApiError(
                    400,
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]",
                )
            container = names[0]
        if container not in names + inits:
            raise ApiError(400, f"container {container} is not valid for pod {name}")
        worker = self.worker_for(pod)
        st = (worker.containers.get(container) or worker.init_containers.get(container)) if worker else None
        if previous:
            if st is None or st.previous is None:
                raise ApiError(400, f'previous terminated container "{container}" in pod "{name}" not found')
            return LogSource(st.previous)
        if st is None or st.current is None:
            reason = st.waiting_reason if st else "ContainerCreating"
            raise ApiError(400, f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        return LogSource(st.current)

    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None:
        """The pod's PodMetrics, or None while it has no running sandbox (metrics-server omits it)."""
        worker = self.worker_for(pod)
        if worker is None:
            return None
        meta = pod["metadata"]
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "labels": meta.get("labels", {}),
                "creationTimestamp": now_iso(),
            },
            "timestamp": now_iso(),
            "window": "1s",
            "containers": worker.metrics(),
        }

    async def shutdown(self) -> None:
        for w in list(self.workers.values()):
            await w.terminate(0, remove=False)
        for t in list(self._tasks):
            t.cancel()
