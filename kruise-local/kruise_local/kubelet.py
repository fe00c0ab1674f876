"""The kubelets of the local cluster, one per node, sharing one container runtime (`runtime.py`).

The kubelet hands each pod bound to one of its nodes to a pod worker (`pod_workers.py`) and follows the pod's
changes from the store; it pulls images for its nodes (through each node's image puller, `image_puller.py`:
serial by default; one runtime pull per image per node at a time; the image pull back-off) and serves the API
server a container's log and a pod's metrics (`server.NodeClient`). What it models of the real kubelet, part
by part: `pod_workers.py`, `volumes.py`, `kubelet_env.py`, `prober.py`, `pod_status.py`, `resize.py`,
`backoff.py`, `image_puller.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from . import resources as R
from .backoff import Backoff
from .catalogue import Catalogue, Image
from .container import Instance
from .crilog import follow_log, read_log
from .errors import ApiError
from .events import EventRecorder
from .features import NEWEST_MINOR, Features
from .image_puller import ImagePuller, image_pull_settings
from .imageref import normalize
from .logstatus import log_container_id
from .metrics_server import MetricsServer, Scrape, points
from .nodestate import NodeState
from .pleg import Pleg
from .pod_workers import PodWorker
from .profiles import Profile
from .remotecommand import ExecRefused
from .resize import ResizeManager
from .scheduling import capacity_freed
from .store import Obj, Store, now_iso
from .tasks import BackgroundTasks
from .volumes import VolumeLoops

if TYPE_CHECKING:
    from .processes import Attachment
    from .runtime import ContainerRuntime, StreamingExec

log = logging.getLogger(__name__)


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
        features: Features | None = None,
    ) -> None:
        self.store = store
        self.events = events
        self.profile = profile
        self.catalogue = catalogue
        self.root = root
        # searchable by every user (not listable): a container of a non-root user is built by bwrap running
        # as that user (runtime.py `_user_switch`), which must reach its volumes' folders under it
        with contextlib.suppress(OSError):
            root.chmod(root.stat().st_mode | 0o111)
        self.sandbox = sandbox
        self.features = features or Features(NEWEST_MINOR)
        """the Kubernetes version the kubelets run and their feature gates (the crash-loop back-off's)"""
        self.kubernetes_version = self.features.version
        self.nodes: dict[str, NodeState] = {}
        self.workers: dict[str, PodWorker] = {}
        self.volume_retry = 1.0
        self.sync_period = 60.0
        """`--sync-frequency`: each pod is synced again 1 to 1.5 of it after its last sync (`pod_sync.py`)"""
        self._runtime = None
        self.tasks = BackgroundTasks()
        self.resizes = ResizeManager(self.store, self.profile, self.workers, self.spawn)
        self.plegs: dict[str, Pleg] = {}
        self.volume_loops = VolumeLoops(profile.volume_loop_period)
        self.metrics_server = (
            MetricsServer(profile.metric_resolution, self.scrape) if profile.metric_resolution > 0 else None
        )
        self.started = False
        self.started_at = time.monotonic()  # when the kubelet started (`prober_manager.go` `start`)

    @property
    def runtime(self) -> ContainerRuntime:
        if self._runtime is None:
            from .runtime import ContainerRuntime

            self._runtime = ContainerRuntime(self.sandbox)
        return self._runtime

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        max_container_restart_period: float | None = None,
        serialize_image_pulls: bool | None = None,
        max_parallel_image_pulls: int | None = None,
    ) -> None:
        """A node whose kubelet configuration sets `crashLoopBackOff.maxContainerRestartPeriod` to
        `max_container_restart_period`, and `serializeImagePulls` / `maxParallelImagePulls`
        (`image_puller.py`) to the values given (None: unset); ValueError if the feature gate or the
        configuration's validation refuses them."""
        backoff = self._backoff(max_container_restart_period)
        puller = self._puller(serialize_image_pulls, max_parallel_image_pulls)
        ip = f"172.18.{len(self.nodes) // 250}.{len(self.nodes) % 250 + 2}"
        self.nodes[name] = NodeState(name, ip, backoff=backoff, puller=puller)
        self.plegs[name] = Pleg(self.profile.pleg_relist_period)
        if self.started:
            self.plegs[name].start()

    def configure_node(
        self,
        name: str,
        max_container_restart_period: float | None,
        serialize_image_pulls: bool | None = None,
        max_parallel_image_pulls: int | None = None,
    ) -> None:
        """Change a node's kubelet configuration (`crashLoopBackOff.maxContainerRestartPeriod`,
        `serializeImagePulls`, `maxParallelImagePulls`; None: unset). As a real kubelet restarted with a new
        configuration, it starts with an empty back-off and a new image puller (pulls under way end on the
        old one)."""
        backoff = self._backoff(max_container_restart_period)
        puller = self._puller(serialize_image_pulls, max_parallel_image_pulls)
        self.nodes[name].backoff = backoff
        self.nodes[name].puller = puller

    @staticmethod
    def _puller(serialize_image_pulls: bool | None, max_parallel_image_pulls: int | None) -> ImagePuller:
        return ImagePuller(*image_pull_settings(serialize_image_pulls, max_parallel_image_pulls))

    def _backoff(self, max_container_restart_period: float | None) -> Backoff:
        high, initial = self.features.crash_loop_backoff(max_container_restart_period)
        return Backoff(max=high, initial=initial)

    def advance_clock(self, name: str, seconds: float) -> None:
        """Move a node's clock forward (tests: back-off doubling and expiry without waiting for them)."""
        self.nodes[name].clock_offset += seconds
        for worker in self.workers.values():
            if worker.node == name:
                for st in [*worker.init_containers.values(), *worker.containers.values()]:
                    st.wake.set()

    def spawn(self, coro: Any) -> None:
        self.tasks.spawn(coro)

    def pleg(self, node: str) -> Pleg:
        """The node's PLEG (`pleg.py`): its relist clock and the pod cache's timestamp."""
        return self.plegs[node]

    async def exit_seen(self, node: str) -> None:
        """Return once the kubelet knows of a runtime change made now: the node's next PLEG relist, or the
        profile's `exit_detection` when no relist is modelled."""
        pleg = self.plegs[node]
        if pleg.period > 0:
            await pleg.relisted()
        else:
            await asyncio.sleep(self.profile.exit_detection)

    def start(self) -> None:
        self.started = True
        self.started_at = time.monotonic()
        for pleg in self.plegs.values():
            pleg.start()
        self.volume_loops.start()
        if self.metrics_server is not None:
            self.metrics_server.start()
        self.store.listen(self.on_change)
        for pod in list(self.store.items(R.PODS)):
            self.on_change("ADDED", R.PODS, pod, None)

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
            worker.task = self.tasks.spawn(worker.run())  # the stop waits for it (its kills finish first)
            return
        worker.changed(obj)

    def forget(self, worker: PodWorker) -> None:
        self.workers.pop(worker.uid, None)
        self.resizes.forget(worker.uid)

    # -- images ----------------------------------------------------------------------------------------
    async def kubelet_pull(self, node: str, ref: str) -> tuple[Image | None, float]:
        """A pod's pull of `ref` on `node` through the node kubelet's image puller (`image_puller.py`): it
        waits for its turn (the serial queue, or a token), then pulls. The image (None if it does not exist)
        and the pull's own duration in seconds, its turn not counted (`pullResult.pullDuration`)."""
        async with self.nodes[node].puller.turn():
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            image = await self.pull_to_node(node, ref)
            return image, loop.time() - t0

    async def pull_to_node(self, node: str, ref: str) -> Image | None:
        """The runtime's pull of `ref` onto `node` (CRI `PullImage`; one pull per image per node at a time),
        None if it does not exist. The kubelet's pods pull through `kubelet_pull`; kruise-daemon calls this
        directly (`image_puller.py`)."""
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

    def image_backoff_wait(self, node: str, key: str) -> float:
        """Seconds left of `key`'s image pull back-off on `node` (`IsInBackOffSinceUpdate`, node clock)."""
        state = self.nodes[node]
        return state.image_backoff.in_backoff_since_update(key, state.now())

    def image_backoff_next(self, node: str, key: str) -> None:
        """A pull of `key` failed on `node`: its back-off starts or doubles (`Next`)."""
        state = self.nodes[node]
        now = state.now()
        state.image_backoff.next(key, now, now)

    def image_backoff_gc(self, node: str) -> None:
        """A pull succeeded on `node`: its image back-off forgets the keys idle for twice the maximum (600 s),
        those of deleted pods among them (image_manager.go `EnsureImageExists` calls `m.backOff.GC()` after
        each successful pull; nothing removes a pod's keys when it goes)."""
        state = self.nodes[node]
        state.image_backoff.gc(state.now())

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
        if st is None or worker is None:
            self._api_status_log(pod, container, previous)
        # the status manager's status (what `write_status` publishes), not the runtime's newest instance:
        # a container the sync started shows there only once the PLEG's relist saw it (`seen_started`)
        status = worker.container_status(st, worker.spec_of(container) or {})
        cid = log_container_id(status, container, name, previous)
        for inst in (st.current, st.previous):
            if inst is not None and inst.container_id == cid:
                return LogSource(inst)
        raise ApiError(400, f'container "{container}" in pod "{name}" is not available')

    def _api_status_log(self, pod: Obj, container: str, previous: bool) -> NoReturn:
        """`GetKubeletContainerLogs` with no container known to the kubelet yet: the status is the API pod's
        (none yet: the first sync's waiting `ContainerCreating`); it names no instance this kubelet runs."""
        name = pod["metadata"]["name"]
        api = pod.get("status") or {}
        statuses = [*(api.get("containerStatuses") or []), *(api.get("initContainerStatuses") or [])]
        status = next((s for s in statuses if s.get("name") == container), None)
        waiting = {"name": container, "state": {"waiting": {"reason": "ContainerCreating"}}}
        log_container_id(status or waiting, container, name, previous)
        raise ApiError(400, f'container "{container}" in pod "{name}" is not available')

    async def start_exec(self, pod: Obj, container: str, argv: list[str], tty: bool) -> StreamingExec:
        """Start an exec in the pod's running `container` (`kubelet_pods.go` `GetExec`, then the CRI's
        streaming `Exec`), outside the pod's worker: it never waits for a sync, only the profile's
        `exec_start` (an estimate, not a measurement: `profiles.py`). `ExecRefused` when the container has no
        running instance (`findContainer` lists running containers only)."""
        worker = self.worker_for(pod)
        st = (worker.containers.get(container) or worker.init_containers.get(container)) if worker else None
        inst = st.current if st is not None else None
        if inst is None or inst.proc is None or not inst.proc.running:
            raise ExecRefused(f'container not found ("{container}")')
        if self.profile.exec_start:
            await asyncio.sleep(self.profile.exec_start)
        try:
            return await self.runtime.spawn_exec(inst.proc, argv, tty)
        except ProcessLookupError:
            raise ExecRefused(f'container not found ("{container}")') from None

    async def start_attach(
        self, pod: Obj, container: str, stdin: bool, stdout: bool, stderr: bool
    ) -> Attachment:
        """Attach to the pod's running `container` (`kubelet_pods.go` `GetAttach`, then the CRI `Attach`),
        outside the pod's worker. `ExecRefused` with `GetAttach`'s error when the container has no running
        instance (`findContainer` lists running containers only; the pod's full name is `name_namespace`);
        the tty is the container spec's (`containerSpec.TTY`: "whether the process is running in a TTY
        cannot be changed after it has started"), and the CRI streaming server's `validateAttachRequest`
        refuses stderr with it (an InvalidArgument status, which the kubelet's `streaming.WriteError` answers
        500)."""
        meta = pod["metadata"]
        worker = self.worker_for(pod)
        st = (worker.containers.get(container) or worker.init_containers.get(container)) if worker else None
        inst = st.current if st is not None else None
        if inst is None or inst.proc is None or not inst.proc.running:
            raise ExecRefused(
                f"container {container} not found in pod {meta['name']}_{meta.get('namespace')}"
            )
        if inst.proc.launch.tty and stderr:
            raise ExecRefused("rpc error: code = InvalidArgument desc = tty and stderr cannot both be true")
        return inst.proc.attach(stdin, stdout, stderr)

    def scrape(self) -> Scrape:
        """What metrics-server reads from the nodes' kubelets (`/metrics/resource`): each pod's running
        containers, their start time and working set now."""
        out: Scrape = {}
        for w in list(self.workers.values()):
            if not w.sandbox_ready or w.terminating:
                continue
            running = [
                (st.name, st.current.started_at, st.current.proc.rss_bytes())
                for st in w.containers.values()
                if st.current and st.current.proc and st.current.exit_code is None and st.current.started_at
            ]
            out[(w.ns, w.name)] = points(running)
        return out

    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None:
        """The pod's PodMetrics, or None while it has none: from the modelled metrics-server in the
        realistic profile; live (the fast profile's shortcut) while the pod has a running sandbox."""
        if self.metrics_server is not None:
            return self.metrics_server.pod_metrics(pod)
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
            await w.stop_now()
        for pleg in self.plegs.values():
            pleg.stop()
        self.volume_loops.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        await self.tasks.cancel()
        if self._runtime is not None:
            await self._runtime.settle()
