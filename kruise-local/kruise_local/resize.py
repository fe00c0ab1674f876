"""In-place pod resize on the local cluster's kubelet (KEP-1287, GA in 1.35).

Reproduces the kubelet's allocation manager and resize actuation:
- `pkg/kubelet/allocation/allocation_manager.go` `handlePodResourcesResize` / `canAdmitPod`: a resize (spec
  resources differing from the allocated ones) is admitted as one atomic change of all containers. Requests
  beyond the node's allocatable can never fit: `PodResizePending` reason `Infeasible`, "Node didn't have
  enough capacity: memory, requested: N, capacity: M" (memory checked before cpu). Requests that do not fit
  next to the node's other pods now: reason `Deferred` with the predicate's `InsufficientResourceError`
  message "Node didn't have enough resource: cpu, requested: N, used: U, capacity: M" (`lifecycle/
  predicate.go`; cpu checked before memory, as `fitsRequest` does), retried when a pod on the node ends, is
  deleted or shrinks (`RetryPendingResizes` triggers). An admitted resize becomes the allocation
  (`status.containerStatuses[].allocatedResources`), the pending condition is cleared and
  `PodResizeInProgress` is set until every running container runs with it
  (`status.containerStatuses[].resources`, seen at the kubelet's next PLEG relist: the profile's
  exit-detection delay); a container not running gets it at its next start.
- `pkg/kubelet/kuberuntime` `doPodResizeAction` / `validateMemoryResizeAction` (1.34+, memory limit decreases
  allowed): before lowering a running container's memory limit, its usage is read; at or above the new limit
  the memory resize is not applied, `PodResizeInProgress` gets reason `Error` and the message
  "attempting to set container "c" memory limit (N) below current usage (U)", and the kubelet tries again on
  later syncs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import resources as R
from . import scheduling as S
from .profiles import Profile
from .store import Obj, Store, deep_copy, now_iso
from .validation import parse_quantity

if TYPE_CHECKING:
    from .pod_workers import PodWorker

RETRY_SECONDS = 1.0
"""How soon a resize the runtime could not apply is tried again (the pod worker's re-sync after an error)."""


@dataclass
class PodResize:
    """The kubelet's resize state of one pod: its allocation and its resize conditions."""

    allocated: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending: tuple[str, str] | None = None
    """(reason, message) of `PodResizePending`"""
    in_progress: tuple[str, str] | None = None
    """(reason, message) of `PodResizeInProgress`"""
    since: dict[str, str] = field(default_factory=dict)
    retrying: bool = False


def _resources(container: dict[str, Any]) -> dict[str, Any]:
    return deep_copy(container.get("resources") or {})


def _memory_limit(resources: dict[str, Any]) -> int | None:
    limit = (resources.get("limits") or {}).get("memory")
    return int(parse_quantity(str(limit))) if limit else None


class ResizeManager:
    """The kubelet's allocation manager for every node's pods."""

    def __init__(
        self, store: Store, profile: Profile, workers: Mapping[str, PodWorker], spawn: Callable[[Any], None]
    ) -> None:
        self.store = store
        self.profile = profile
        self.workers = workers
        """the kubelet's pod workers by pod uid"""
        self.spawn = spawn
        self.pods: dict[str, PodResize] = {}

    # -- allocation -----------------------------------------------------------------------------------
    def admit(self, worker: PodWorker, pod: Obj) -> None:
        """The pod is admitted to its node: its spec resources are its allocation."""
        state = self.pods.setdefault(worker.uid, PodResize())
        for ctr in [*pod["spec"].get("containers", []), *(pod["spec"].get("initContainers") or [])]:
            state.allocated.setdefault(ctr["name"], _resources(ctr))

    def allocation(self, worker: PodWorker, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """The resources container `name` is (re)started with: its allocation."""
        state = self.pods.get(worker.uid)
        if state is None or name not in state.allocated:
            return _resources(spec)
        return deep_copy(state.allocated[name])

    def forget(self, uid: str) -> None:
        self.pods.pop(uid, None)

    # -- resize admission -----------------------------------------------------------------------------
    def handle(self, worker: PodWorker, pod: Obj) -> None:
        """`handlePodResourcesResize`: admit a resize of `pod` or mark it pending, then actuate."""
        state = self.pods.setdefault(worker.uid, PodResize())
        desired = {c["name"]: _resources(c) for c in pod["spec"].get("containers", [])}
        current = {name: state.allocated.get(name, {}) for name in desired}
        if desired != current:
            verdict = self._can_admit(worker, pod)
            if verdict is not None:
                if state.pending != verdict:
                    kind = "ResizeInfeasible" if verdict[0] == "Infeasible" else "ResizeDeferred"
                    worker.event("Warning", kind, f"Pod resize {verdict[0]}: {verdict[1]}")
                self._set(state, "pending", verdict)
                worker.mark_dirty()
                return
            state.allocated.update(deep_copy(desired))
            self._set(state, "pending", None)
            self._set(state, "in_progress", ("", ""))
            worker.event("Normal", "ResizeStarted", "Pod resize started")
            worker.mark_dirty()  # the allocation and PodResizeInProgress are reported first
            self.spawn(self._actuate_after_relist(worker))
            return
        if state.pending is not None:
            self._set(state, "pending", None)
        self.actuate(worker)

    async def _actuate_after_relist(self, worker: PodWorker) -> None:
        """The runtime applies the new limits and the kubelet sees them at its next PLEG relist (the
        PLEG's next relist): until then the pod shows PodResizeInProgress."""
        await worker.kubelet.exit_seen(worker.node)
        if not worker.terminating and self.pods.get(worker.uid) is not None:
            self.actuate(worker)

    def _can_admit(self, worker: PodWorker, pod: Obj) -> tuple[str, str] | None:
        node = self.store.peek(R.NODES, "", worker.node) or {}
        have = S.allocatable(node)
        want = S.pod_requests({"spec": {"containers": pod["spec"].get("containers", [])}})
        for name in ("memory", "cpu"):
            if want.get(name, 0) > have.get(name, 0):
                return (
                    "Infeasible",
                    f"Node didn't have enough capacity: {name}, requested: {want[name]}, "
                    f"capacity: {have.get(name, 0)}",
                )
        used: dict[str, int] = {}
        for other in self.workers.values():
            if other.node != worker.node or other.uid == worker.uid or other.final_phase or other.terminating:
                continue
            current = other.pod()  # a pod removed from the API is no longer one of the node's active pods
            if current is None or current["metadata"]["uid"] != other.uid:
                continue
            alloc = self.pods.get(other.uid)
            if alloc is None:
                continue
            for name, value in S.pod_requests(
                {"spec": {"containers": [{"resources": r} for r in alloc.allocated.values()]}}
            ).items():
                used[name] = used.get(name, 0) + value
        for name in ("cpu", "memory"):
            if want.get(name, 0) and want[name] > have.get(name, 0) - used.get(name, 0):
                return (
                    "Deferred",
                    f"Node didn't have enough resource: {name}, requested: {want[name]}, "
                    f"used: {used.get(name, 0)}, capacity: {have.get(name, 0)}",
                )
        return None

    # -- actuation -------------------------------------------------------------------------------------
    def actuate(self, worker: PodWorker) -> None:
        """Bring every running container to its allocation (`doPodResizeAction`); memory limits are not
        lowered below a container's current usage."""
        state = self.pods.get(worker.uid)
        if state is None:
            return
        errors = []
        for name, st in worker.containers.items():
            alloc = state.allocated.get(name)
            spec = worker.spec_of(name)
            cur = st.current
            if alloc is None or spec is None or alloc == st.allocated:
                continue
            if cur is None or cur.proc is None or cur.exit_code is not None:
                continue  # applied at the next start
            new_limit, old_limit = _memory_limit(alloc), _memory_limit(st.allocated)
            policies = {p.get("resourceName"): p.get("restartPolicy") for p in spec.get("resizePolicy") or []}
            in_place = policies.get("memory", "NotRequired") == "NotRequired"
            if in_place and new_limit is not None and (old_limit is None or new_limit < old_limit):
                usage = cur.proc.rss_bytes()
                if usage >= new_limit:
                    errors.append(
                        f'attempting to set container "{name}" memory limit ({new_limit}) '
                        f"below current usage ({usage})"
                    )
                    continue
            worker.resize(st, {**spec, "resources": deep_copy(alloc)})
        if errors:
            self._set(state, "in_progress", ("Error", "; ".join(errors)))
            if not state.retrying:
                state.retrying = True
                self.spawn(self._retry(worker))
        elif state.in_progress is not None and self._applied(worker, state):
            self._set(state, "in_progress", None)
            worker.event("Normal", "ResizeCompleted", "Pod resize completed")
        worker.mark_dirty()

    @staticmethod
    def _applied(worker: PodWorker, state: PodResize) -> bool:
        for name, st in worker.containers.items():
            cur = st.current
            running = cur is not None and cur.proc is not None and cur.exit_code is None
            if running and not st.restart_for and st.allocated != state.allocated.get(name, st.allocated):
                return False
        return True

    async def _retry(self, worker: PodWorker) -> None:
        state = self.pods.get(worker.uid)
        try:
            while state is not None and state.in_progress and state.in_progress[0] == "Error":
                await asyncio.sleep(RETRY_SECONDS)
                if worker.terminating or self.pods.get(worker.uid) is not state:
                    return
                self.actuate(worker)
        finally:
            if state is not None:
                state.retrying = False

    def retry_deferred(self) -> None:
        """Capacity freed on some node: try the deferred resizes again (`RetryPendingResizes`)."""
        for uid, state in list(self.pods.items()):
            worker = self.workers.get(uid)
            if worker is None or state.pending is None or state.pending[0] != "Deferred":
                continue
            pod = worker.pod()
            if pod is not None:
                self.handle(worker, pod)

    # -- status ----------------------------------------------------------------------------------------
    def _set(self, state: PodResize, which: str, value: tuple[str, str] | None) -> None:
        if getattr(state, which) != value:
            state.since[which] = now_iso()
        setattr(state, which, value)

    def conditions(self, worker: PodWorker) -> list[dict[str, Any]]:
        """The pod's `PodResizePending` / `PodResizeInProgress` conditions, if any."""
        state = self.pods.get(worker.uid)
        out: list[dict[str, Any]] = []
        if state is None:
            return out
        for which, ctype in (("pending", "PodResizePending"), ("in_progress", "PodResizeInProgress")):
            value = getattr(state, which)
            if value is None:
                continue
            cond: dict[str, Any] = {
                "type": ctype,
                "status": "True",
                "lastTransitionTime": state.since.get(which) or now_iso(),
                "lastProbeTime": None,
            }
            if value[0]:
                cond["reason"] = value[0]
            if value[1]:
                cond["message"] = value[1]
            out.append(cond)
        return out

    def allocated_requests(self, worker: PodWorker, name: str) -> dict[str, Any] | None:
        """`allocatedResources` of container `name`: its allocated requests."""
        state = self.pods.get(worker.uid)
        alloc = state.allocated.get(name) if state else None
        return dict(alloc.get("requests") or {}) if alloc else None
