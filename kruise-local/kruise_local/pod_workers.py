"""A pod worker of the local kubelet: runs one pod on its node until it ends or is deleted
(`pkg/kubelet/pod_workers.go`), with the kuberuntime manager's decisions (`kuberuntime_manager.go`
`computePodActions`, `doBackOff`; `kuberuntime_container.go` `killContainer`): init containers in order, image
pulls by imagePullPolicy, restarts by restartPolicy under the crash-loop back-off, kill-and-restart of a
running container whose hash changed, graceful termination of whole process trees."""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import resources as R
from .backoff import go_duration, sync_error_requeue
from .capabilities import add_no_new_privileges, container_capabilities
from .catalogue import NOT_IN_CATALOGUE, Image
from .container import ContainerState, Instance, spec_hash
from .cri import ContainerLaunch, RuntimeUnavailable, StartError
from .etcfiles import SandboxConfigError, pod_files
from .godur import MILLISECOND, duration_string, seconds_to_duration, truncate
from .imageref import normalize
from .kubelet_env import ContainerEnvironment, expand, verify_run_as_non_root
from .lifecycle import ContainerLifecycle
from .mounting import mount_volumes
from .pod_status import PodStatusWriter
from .pod_sync import PodSyncs
from .prober import PodProber
from .sandbox import PodSandbox
from .store import Obj, deep_copy
from .users import container_user, image_uid
from .validation import parse_quantity
from .volumes import PodVolumes, VolumeError

if TYPE_CHECKING:
    from .events import EventRecorder
    from .features import Features
    from .nodestate import NodeState
    from .profiles import Profile
    from .runtime import ContainerRuntime
    from .store import Store

log = logging.getLogger(__name__)


def field_path(pod: Obj, name: str) -> str:
    """`kubecontainer` `fieldPath`: where a container is in the pod spec, as its events' `involvedObject`
    names it (`spec.containers{c}`, then `spec.initContainers{c}`; a container not in the spec: none)."""
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers", "ephemeralContainers"):
        if any(c.get("name") == name for c in spec.get(key) or []):
            return f"spec.{key}{{{name}}}"
    return ""


class PodResizes(Protocol):
    """What a pod worker asks of the kubelet's allocation manager (`resize.py`)."""

    def handle(self, worker: PodWorker, pod: Obj) -> None: ...

    def allocation(self, worker: PodWorker, name: str, spec: dict[str, Any]) -> dict[str, Any]: ...

    def allocated_requests(self, worker: PodWorker, name: str) -> dict[str, Any] | None: ...

    def conditions(self, worker: PodWorker) -> list[dict[str, Any]]: ...


class WorkerKubelet(Protocol):
    """What a pod worker uses of its node's kubelet (`kubelet.py`)."""

    store: Store
    events: EventRecorder
    profile: Profile
    root: Path
    kubernetes_version: str
    features: Features
    nodes: dict[str, NodeState]
    volume_retry: float
    sync_period: float
    started_at: float
    resizes: PodResizes

    @property
    def runtime(self) -> ContainerRuntime: ...

    def spawn(self, coro: Any) -> None: ...

    def forget(self, worker: PodWorker) -> None: ...

    async def kubelet_pull(self, node: str, ref: str) -> tuple[Image | None, float]: ...

    def image_backoff_wait(self, node: str, key: str) -> float: ...

    def image_backoff_next(self, node: str, key: str) -> None: ...

    def image_backoff_gc(self, node: str) -> None: ...


def container_of(pod: Obj, name: str) -> dict[str, Any] | None:
    """The spec of `pod`'s container or init container `name`, None if it has none."""
    for c in [*pod["spec"].get("containers", []), *(pod["spec"].get("initContainers") or [])]:
        if c.get("name") == name:
            return c
    return None


class PodWorker(PodVolumes, ContainerEnvironment, PodProber, PodStatusWriter, PodSyncs, ContainerLifecycle):
    """Runs one pod on its node until it ends or is deleted."""

    def __init__(self, kubelet: WorkerKubelet, pod: Obj) -> None:
        self.kubelet = kubelet
        self.ns = pod["metadata"].get("namespace", "")
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.node = pod["spec"]["nodeName"]
        self.dir = kubelet.root / "pods" / self.uid
        self.containers: dict[str, ContainerState] = {}
        self.init_containers: dict[str, ContainerState] = {}
        self.probe_workers = {}
        self.initialized = False
        self.init_syncs(pod)
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
        self.start_turn = asyncio.Lock()
        """one container start at a time (`SyncPod` starts the containers of `ContainersToStart` one after
        another: `start` -> `startContainer` pulls, creates and starts one before the next); first come,
        first served, which is spec order for the containers a sync starts together"""

    # -- helpers -------------------------------------------------------------------------------------
    def pod(self) -> Obj | None:
        return self.kubelet.store.peek(R.PODS, self.ns, self.name)

    def spec_of(self, name: str) -> dict[str, Any] | None:
        pod = self.pod()
        return None if pod is None else container_of(pod, name)

    def event(self, etype: str, reason: str, message: str, container: str | None = None) -> None:
        """Record a kubelet event about the pod, or about one of its containers (`container`: the
        `recordContainerEvent` / image manager / prober events, whose reference
        `kubecontainer.GenerateContainerRef` makes with the container's `fieldPath`)."""
        pod = self.pod()
        if pod is not None:
            path = field_path(pod, container) if container is not None else ""
            self.kubelet.events.record(
                pod, etype, reason, message, component="kubelet", host=self.node, field_path=path
            )

    def request_sync(self) -> None:
        """A sync of the pod (`PodSyncs.request_sync`), which also tries the starts its back-off refused."""
        super().request_sync()
        for st in [*self.init_containers.values(), *self.containers.values()]:
            if st.waiting_reason == "CrashLoopBackOff":
                st.wake.set()

    def mark_dirty(self) -> None:
        if not self._status_dirty:
            self._status_dirty = True
            asyncio.get_running_loop().call_soon(self.write_status)

    # -- lifecycle -----------------------------------------------------------------------------------
    async def run(self) -> None:
        profile = self.kubelet.profile
        self.start_time = datetime.now(UTC)
        self.mark_dirty()
        # `SyncPod`: the volumes are mounted (`WaitForAttachAndMount`) before the sandbox is created
        if not await mount_volumes(self, profile.volume_loop_period):
            return
        if (pod := self.pod()) is not None:
            self.add_probes(pod)
        await asyncio.sleep(profile.sandbox + profile.network)
        while not self.terminating and self.pod_sandbox is None:
            if (pod := self.pod()) is None:
                return
            host_ipc, context = bool(pod["spec"].get("hostIPC")), pod["spec"].get("securityContext") or {}
            shm = None if host_ipc else self.dir / "shm"  # hostIPC: the host's /dev/shm not modelled
            try:
                files = pod_files(
                    pod, self.dir / "sandbox", lambda m: self.event("Warning", "DNSConfigForming", m)
                )
                sysctls = {s["name"]: s.get("value", "") for s in context.get("sysctls") or []}
                sandbox = await self.kubelet.runtime.create_sandbox(
                    bool(pod["spec"].get("hostNetwork")), shm, files, host_ipc, sysctls
                )
            except (RuntimeUnavailable, OSError, SandboxConfigError) as e:
                self.event("Warning", "FailedCreatePodSandBox", f"Failed to create pod sandbox: {e}")
                await asyncio.sleep(self.kubelet.volume_retry)
                continue
            if self.terminating:  # the termination began meanwhile and has closed no sandbox: close this one
                await sandbox.close()
                return
            self.pod_sandbox = sandbox
        if self.terminating:
            return
        self.sandbox_ready = True
        self.update_task = asyncio.create_task(self.update_loop())
        pod = self.pod()
        if pod is None:
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
                    async with self.pod_sync():
                        delay = await self.start_unless_backing_off(st, spec, cur)
                    await self.retry_after(st, delay)
                    continue
                assert cur.proc is not None
                code = await cur.proc.wait()
                await self.exited(st, code)
        self.initialized = True
        self.mark_dirty()
        return True

    async def start_unless_backing_off(
        self, st: ContainerState, spec: dict[str, Any], exited: Instance | None
    ) -> float:
        """Start a container unless its crash-loop back-off holds it (`kuberuntime_manager.go` `doBackOff`).

        `exited` is the container's newest exited instance in the pod status the sync began with: none (a
        first start, or the restart after a kill of the only instance) -> start, no back-off. Else the key is
        pod + container name + hash(name, image) of the spec to start (`GetStableKey`), and the start is
        refused (waiting CrashLoopBackOff, event BackOff) while now - FinishedAt(exited) < back-off(key);
        a start that passes calls `Next(key)`. A refused start is a sync error: it is tried again at the
        worker's retry (`Features.crash_loop_requeue`: 10-15 s later through 1.34, when the back-off runs out
        from 1.35) or at an earlier sync of the pod (`request_sync` wakes it): returns how long to wait
        (outside the sync) before trying again.
        """
        if exited is None:
            return await self.start(st, spec)
        node = self.kubelet.nodes[self.node]
        key = f"{self.name}_{self.ns}_{self.uid}_{st.name}_{spec_hash(spec)}"
        finished = exited.node_finished_at or node.now()
        left = node.backoff.in_backoff_since(key, finished, node.now())
        if left > 0:
            pod = f"{self.name}_{self.ns}({self.uid})"
            st.waiting_reason = "CrashLoopBackOff"
            delay = go_duration(node.backoff.get(key))
            st.waiting_message = f"back-off {delay} restarting failed container={st.name} pod={pod}"
            # `doBackOff`: an event about the container (`GenerateContainerRef`)
            self.event(
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {st.name} in pod {pod}",
                container=st.name,
            )
            self.mark_dirty()
            return self.kubelet.features.crash_loop_requeue(left, self.kubelet.sync_period, random.random())
        node.backoff.next(key, finished, node.now())
        return await self.start(st, spec)

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
                    if spec_hash(spec) != cur.spec_hash:
                        st.wake.set()  # changed while it was started (`_start`): the pod worker's next sync
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
                            async with self.pod_sync():
                                self.event("Normal", "Killing", why, container=st.name)
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
                        async with self.pod_sync():
                            self.event("Normal", "Killing", why, container=st.name)
                            await self.kill(st, grace, reason="")
                            delay = await self.start_unless_backing_off(st, spec, exited)
                        await self.retry_after(st, delay)
                        continue
                    if not waiter.done():
                        waiter.cancel()
                        continue
                    await self.exited(st, waiter.result())
                    continue
                # not running: never started, or exited
                if cur is None:
                    async with self.pod_sync():
                        delay = await self.start(st, spec)
                    await self.retry_after(st, delay)
                    continue
                # an exited container is restarted only by its restartPolicy, even if its spec changed
                if self.should_restart(cur):
                    async with self.pod_sync():
                        delay = await self.start_unless_backing_off(st, spec, cur)
                    await self.retry_after(st, delay)
                    continue
                self.update_phase()
                await self.sleep_or_wake(st, None)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("container loop for %s/%s/%s failed", self.ns, self.name, st.name)

    async def retry_after(self, st: ContainerState, delay: float) -> None:
        """Wait, outside any sync, before a refused or failed start is tried again (or a pod update)."""
        if delay > 0:
            await self.sleep_or_wake(st, delay)

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

    async def pull(self, st: ContainerState, spec: dict[str, Any]) -> tuple[Image | None, float]:
        """Pull per imagePullPolicy: the image, or None (with waiting reason set) when it cannot be had and
        how long to wait before the next try."""
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
            self.event("Warning", "ErrImageNeverPull", st.waiting_message, container=st.name)
            # kuberuntime_container.go startContainer: "Error: %v" of every EnsureImageExists error
            self.event("Warning", "Failed", "Error: ErrImageNeverPull", container=st.name)
            self.mark_dirty()
            return None, 1.0
        if present and policy != "Always":
            # image_manager.go EnsureImageExists: worded per KubeletEnsureSecretPulledImages
            message = self.kubelet.features.image_present_message(ref)
            self.event("Normal", "Pulled", message, container=st.name)
            return stored, 0.0
        # the back-off is the pod's own, per image as the spec names it (image_manager.go EnsureImageExists:
        # backOffKey := fmt.Sprintf("%s_%s", pod.UID, container.Image)): another pod pulls it itself
        key = f"{self.uid}_{ref}"
        wait = self.kubelet.image_backoff_wait(self.node, key)
        if wait > 0:
            # image_manager.go pullImage: the BackOff event says "Back-off pulling image %q"; the waiting
            # message adds the last failed pull's error from 1.32 (kubernetes/kubernetes#127918)
            st.waiting_reason = "ImagePullBackOff"
            previous = node.pull_errors.get(key)
            st.waiting_message = self.kubelet.features.image_pull_backoff_message(ref, previous)
            self.event("Normal", "BackOff", f'Back-off pulling image "{ref}"', container=st.name)
            # kuberuntime_container.go startContainer: "Error: %v" of every EnsureImageExists error, here
            # images.ErrImagePullBackOff
            self.event("Warning", "Failed", "Error: ImagePullBackOff", container=st.name)
            self.mark_dirty()
            return None, wait
        node.pull_errors.pop(key, None)  # pullImage: "Ensure that the map cannot grow indefinitely."
        if st.current is None or not st.waiting_reason:
            # a container whose last start failed keeps showing that failure (the kubelet's reasonCache,
            # `convertToAPIContainerStatuses`) until a start succeeds or fails otherwise
            st.waiting_reason, st.waiting_message = "ContainerCreating", ""
        self.mark_dirty()
        self.event("Normal", "Pulling", f'Pulling image "{ref}"', container=st.name)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        # through the node's image puller (image_puller.py): serial by default, so the pull may wait behind
        # other pods' pulls on the node
        image, pulling = await self.kubelet.kubelet_pull(self.node, ref)
        waited = seconds_to_duration(loop.time() - t0)
        if image is None:
            self.kubelet.image_backoff_next(self.node, key)
            st.waiting_reason = "ErrImagePull"
            # the runtime's error as the kubelet's CRI client returns it (cri-client remote_image.go
            # `PullImage` passes the gRPC status error on; containerd answers a missing reference with
            # codes.NotFound), which evalCRIPullErr keeps as the message of an ErrImagePull
            st.waiting_message = (
                "rpc error: code = NotFound desc = "
                f'failed to pull and unpack image "{normalize(ref)}": failed to resolve reference '
                f'"{normalize(ref)}": {normalize(ref)}: not found ({NOT_IN_CATALOGUE})'
            )
            # pullImage: prevPullErrMsg.Store(backOffKey, fmt.Sprintf("%s: %s", err, msg)), err being
            # evalCRIPullErr's ErrImagePull for an error of no specific kind, msg the runtime's error
            node.pull_errors[key] = f"ErrImagePull: {st.waiting_message}"
            self.event(
                "Warning", "Failed", f'Failed to pull image "{ref}": {st.waiting_message}', container=st.name
            )
            self.event("Warning", "Failed", "Error: ErrImagePull", container=st.name)
            self.mark_dirty()
            return None, 1.0  # shown until the next sync turns it into ImagePullBackOff
        self.kubelet.image_backoff_gc(self.node)  # EnsureImageExists: m.backOff.GC() after a successful pull
        # image_manager.go pullImage (since 1.30, the same in 1.32 to 1.35): "Successfully pulled image %q in
        # %v (%v including waiting). Image size: %v bytes.": the puller's own `pullDuration` (from the moment
        # the request left the serial queue or took its token) and the time since just before the request
        # was queued, both Truncate(time.Millisecond), printed by Duration.String()
        pulled = duration_string(truncate(seconds_to_duration(pulling), MILLISECOND))
        including = duration_string(truncate(waited, MILLISECOND))
        self.event(
            "Normal",
            "Pulled",
            f'Successfully pulled image "{ref}" in {pulled} ({including} including waiting). '
            f"Image size: {image.size} bytes.",
            container=st.name,
        )
        return image, 0.0

    async def start(self, st: ContainerState, spec: dict[str, Any]) -> float:
        """Pull and start the container, once no other container of the pod is being started (`SyncPod` step
        7: one `startContainer` after another, each pulling, creating and starting its container before the
        next begins); how long to wait before trying again when it did not start."""
        async with self.start_turn:
            return await self._start(st, spec)

    async def _start(self, st: ContainerState, spec: dict[str, Any]) -> float:
        """`startContainer` from one pod object, the sync's (`SyncPod` passes its `pod`): the image pulled
        (`EnsureImageExists`), the env (`generateContainerConfig`: `makeEnvironmentVariables`, fieldRefs
        included) and the spec hash the container is labelled with (`newContainerLabels`). A pod changed
        during the pull is the next sync's: it replaces the container if its spec changed."""
        pod = self.pod()
        if pod is None:
            return 0.0
        spec = container_of(pod, st.name) or spec
        image, retry = await self.pull(st, spec)
        if image is None or self.terminating:
            return retry
        try:
            env = self.container_env(pod, spec, image)
            # OCI config: `command` replaces the Entrypoint and drops the Cmd; `args` replaces the Cmd
            argv = [expand(a, env) for a in (spec.get("command") or list(image.entrypoint))]
            args = spec.get("args") if spec.get("command") or spec.get("args") else list(image.cmd)
            argv += [expand(a, env) for a in (args or [])]
            mounts = self.mounts(spec)
        except VolumeError as e:
            st.waiting_reason, st.waiting_message = "CreateContainerConfigError", str(e)
            self.event("Warning", "Failed", f"Error: {e}", container=st.name)
            self.mark_dirty()
            return sync_error_requeue(random.random())
        pod_ref = f"{self.name}_{self.ns}({self.uid})"
        refused = verify_run_as_non_root(pod, spec, pod_ref, image_uid(image.user))
        if refused is not None:
            st.waiting_reason, st.waiting_message = "CreateContainerConfigError", refused
            self.event("Warning", "Failed", f"Error: {refused}", container=st.name)
            self.mark_dirty()
            return sync_error_requeue(random.random())
        if not argv:  # neither the image nor the container names a command: containerd refuses it
            st.waiting_reason = "CreateContainerError"
            st.waiting_message = (
                f'failed to generate container "{uuid.uuid4().hex}" spec: failed to generate spec: '
                "no command specified"
            )
            self.event("Warning", "Failed", f"Error: {st.waiting_message}", container=st.name)
            self.mark_dirty()
            return sync_error_requeue(random.random())
        await asyncio.sleep(self.kubelet.profile.container_start)
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        st.runs += 1
        cdir = self.dir / "containers" / st.name / str(st.runs)
        cdir.mkdir(parents=True, exist_ok=True)
        inst = Instance(
            f"containerd://{cid}", image, spec_hash(spec), cdir / "0.log", cdir / "termination-log"
        )
        # kuberuntime_container.go startContainer: worded per minor (kubernetes/kubernetes#134043 in 1.35)
        self.event(
            "Normal", "Created", self.kubelet.features.container_created_message(st.name), container=st.name
        )
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
            files=image.unpacked_files(),
            dirs=list(image.dirs),
            read_only_root=bool((spec.get("securityContext") or {}).get("readOnlyRootFilesystem")),
            no_new_privs=add_no_new_privileges(spec),
            pod_sandbox=self.pod_sandbox,
            capabilities=container_capabilities(spec),
            user=container_user(
                pod["spec"], spec, Path("/etc/passwd") if image.host_base else None, image.user
            ),
            # kuberuntime_container.go generateContainerConfig: Stdin, StdinOnce and Tty from the spec
            stdin=bool(spec.get("stdin")),
            stdin_once=bool(spec.get("stdinOnce")),
            tty=bool(spec.get("tty")),
        )
        try:
            inst.proc = await self.kubelet.runtime.start(launch)
        except StartError as e:
            # runc could not exec the command (its exec.LookPath: a missing path "stat PATH: no such file or
            # directory", no execute bit "permission denied"): the container exists and is terminated at once;
            # containerd's StartContainer marks it exited with errorStartExitCode 128, errorStartReason
            # "StartError" and the error as its message (internal/cri/server/container_start.go, helpers.go)
            # and a zero start time; the kubelet's sync then reports RunContainerError, and restarts it with
            # back-off (CrashLoopBackOff)
            inst.started_at, inst.finished_at = datetime.fromtimestamp(0, UTC), datetime.now(UTC)
            inst.node_finished_at = self.kubelet.nodes[self.node].stamp(inst.finished_at)
            inst.exit_code, inst.reason, inst.message = 128, "StartError", str(e)
            if st.current is not None:
                st.previous = st.current
                st.restart_count += 1
            st.current = inst
            st.ready = False
            st.waiting_reason, st.waiting_message = "RunContainerError", str(e)
            self.event("Warning", "Failed", f"Error: {e}", container=st.name)
            self.mark_dirty()
            self.update_phase()
            return 0.0
        except Exception as e:
            st.waiting_reason, st.waiting_message = "CreateContainerError", str(e)
            self.event("Warning", "Failed", f"Error: {e}", container=st.name)
            self.mark_dirty()
            return sync_error_requeue(random.random())
        inst.started_at = inst.proc.started_at
        st.allocated = resources
        st.frozen = self.container_status(st, spec)  # what the status shows until a postStart hook ends
        if st.current is not None:
            st.previous = st.current
            st.restart_count += 1
        st.current = inst
        st.ready = False
        st.started = not spec.get("startupProbe")
        self.event(
            "Normal", "Started", self.kubelet.features.container_started_message(st.name), container=st.name
        )
        if (spec.get("lifecycle") or {}).get("postStart") and not await self.post_start(st, inst, spec):
            return 0.0  # the kill's exit is seen at the PLEG's next relist: a sync restarts it per policy
        st.waiting_reason = st.waiting_message = ""
        self.mark_dirty()
        # the PLEG's next relist sees the start: its ContainerStarted event asks for a sync
        self.after_relist(lambda: self.at_next_sync(lambda: self.seen_started(st, inst)))
        return 0.0

    def seen_started(self, st: ContainerState, inst: Instance) -> None:
        """The sync that followed the PLEG's sight of the start begins: its status (the status manager's,
        made as the sync begins) shows the container as the runtime has it (`st.shown`), which the probe
        workers (they skip a container the status does not show running) find at their next tick. Until
        then the status is the one the starting sync found (`st.frozen`): a client cannot act on a start
        before the sync after it has begun."""
        if st.current is inst and st.frozen is not None:
            st.frozen = None
            st.shown = inst
            self.mark_dirty()

    async def exited(self, st: ContainerState, code: int, *, relist: bool = True) -> None:
        """Record the instance's exit. `relist`: the kubelet learns of it through its PLEG's next relist
        (whose ContainerDied event asks for a sync); not when the kubelet stopped the container itself."""
        inst = st.current
        assert inst is not None and inst.proc is not None
        if relist:
            await self.kubelet.exit_seen(self.node)
            self.request_sync()
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
        self.mark_dirty()
        self.update_phase()

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

    async def stop_all(self, grace: float, minimum: bool = True) -> None:
        """Stop every running container (`killPodWithSyncResult` -> `killContainersWithSyncResult`): each is
        killed by `killContainer` with no message, which records Killing "Stopping container %s" about it
        before its preStop hook and stop (the same in 1.32 to 1.35)."""
        waits = []
        self.stop_probes()
        for st in [*self.init_containers.values(), *self.containers.values()]:
            if st.task and st.task is not asyncio.current_task():
                st.task.cancel()
            inst = st.current
            if inst is not None and inst.proc is not None and inst.exit_code is None:
                self.event("Normal", "Killing", f"Stopping container {st.name}", container=st.name)
            waits.append(self.kill(st, grace, reason="", minimum=minimum))
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    async def terminate(self, grace: float, remove: bool = True, minimum: bool = True) -> None:
        """Graceful deletion: kill every container, then let the API server forget the pod. `minimum`: each
        container gets at least `lifecycle.MINIMUM_GRACE_PERIOD` (not when the local cluster stops)."""
        if self.terminating:
            return
        self.terminating = True
        for st in self.containers.values():
            st.wake.set()
        await self.stop_all(grace, minimum)
        if self.task and self.task is not asyncio.current_task():
            self.task.cancel()
        if self.update_task:
            self.update_task.cancel()
        self.cancel_resync()
        await self.close_sandbox()
        if remove:
            self.kubelet.store.remove(R.PODS, self.ns, self.name)
        self.kubelet.forget(self)
        shutil.rmtree(self.dir / "volumes", ignore_errors=True)
        shutil.rmtree(self.dir / "shm", ignore_errors=True)
        shutil.rmtree(self.dir / "sandbox", ignore_errors=True)

    async def stop_now(self) -> None:
        """The local cluster stops: kill every container at once, also of a pod whose graceful termination
        is under way (its grace period is not waited for), and close the sandbox."""
        if not self.terminating:
            await self.terminate(0, remove=False, minimum=False)
            return
        states = [*self.init_containers.values(), *self.containers.values()]
        procs = [st.current.proc for st in states if st.current is not None and st.current.proc is not None]
        await asyncio.gather(*(proc.stop(0) for proc in procs), return_exceptions=True)
        await self.close_sandbox()

    def changed(self, pod: Obj) -> None:
        """The pod object changed: wake containers whose spec changed, start deletion if asked."""
        if pod["metadata"].get("deletionTimestamp") and not self.terminating:
            grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
            self.kubelet.spawn(self.terminate(grace))
            return
        acting = False  # a running container will be killed and restarted: its sync carries this update
        for c in pod["spec"].get("containers", []):
            st = self.containers.get(c["name"])
            if st is not None:
                new_hash = spec_hash(c)
                if new_hash != st.spec_seen:  # only a spec change wakes the container, not a status write
                    st.spec_seen = new_hash
                    st.wake.set()
                    acting = acting or (st.current is not None and st.current.exit_code is None)
        self.pod_updated(pod, carried=acting)
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
