"""Resource accounting of the local cluster: what a pod requests, what a node has left, and the scheduler's
resource fit.

- A pod's request (`k8s.io/component-helpers/resource` `PodRequests`): the sum over its regular containers
  and sidecars (restartable init containers), at least the largest init container's request plus the sidecars
  started before it.
- A pod bound to a node with a resize pending counts, per container, the largest of its desired requests
  (unless the resize is Infeasible), its allocated requests and its actual requests (KEP-1287 "Scheduler and
  API Server Interaction"; `pkg/scheduler/framework/types.go` `computePodResourceRequest`).
- `fit.go` (`pkg/scheduler/framework/plugins/noderesources`) `fitsRequest`: a pod fits a node when, per
  resource it requests, the node's allocatable minus what its other non-terminal pods request covers it;
  else the reason is `Insufficient cpu` / `Insufficient memory` (`Too many pods` past the pod count).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from . import resources as R
from .events import EventRecorder
from .profiles import Profile
from .store import Obj, Store, now_iso
from .tasks import BackgroundTasks
from .validation import cpu_millis, memory_bytes

RESOURCES = ("cpu", "memory")
DEFAULT_ALLOCATABLE = {"cpu": "2", "memory": "24Gi", "pods": "110"}


def amount(resource: str, text: Any) -> int:
    """A quantity in the scheduler's units: cpu in millicores, memory in bytes."""
    return cpu_millis(text) if resource == "cpu" else memory_bytes(text)


def _requests(resources: Mapping[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, text in ((resources or {}).get("requests") or {}).items():
        if name in RESOURCES:
            out[name] = amount(name, text)
    return out


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value


def _resize_infeasible(pod: Mapping[str, Any]) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodResizePending" and cond.get("reason") == "Infeasible":
            return True
    return False


def container_requests(pod: Mapping[str, Any], container: Mapping[str, Any]) -> dict[str, int]:
    """One container's requests as the scheduler counts them: the spec's, or for a bound pod the largest of
    desired (unless Infeasible), allocated and actual requests."""
    desired = _requests(container.get("resources"))
    spec = pod.get("spec") or {}
    if not spec.get("nodeName"):
        return desired
    status = next(
        (
            cs
            for cs in [
                *((pod.get("status") or {}).get("containerStatuses") or []),
                *((pod.get("status") or {}).get("initContainerStatuses") or []),
            ]
            if cs.get("name") == container.get("name")
        ),
        None,
    )
    if status is None:
        return desired
    counted = {} if _resize_infeasible(pod) else dict(desired)
    allocated = _requests({"requests": status.get("allocatedResources")})
    actual = _requests(status.get("resources"))
    for source in (allocated, actual):
        for name, value in source.items():
            counted[name] = max(counted.get(name, 0), value)
    if not allocated and not actual:
        return desired
    return counted


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's cpu (millicores) and memory (bytes) requests (`PodRequests`)."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for ctr in spec.get("containers") or []:
        _add(total, container_requests(pod, ctr))
    sidecars: dict[str, int] = {}
    for ctr in spec.get("initContainers") or []:
        req = container_requests(pod, ctr)
        if ctr.get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            continue
        for name, value in req.items():
            total[name] = max(total.get(name, 0), value + sidecars.get(name, 0))
    return total


def allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """The node's allocatable cpu, memory and pod count."""
    out: dict[str, int] = {}
    for name, text in ((node.get("status") or {}).get("allocatable") or {}).items():
        if name in RESOURCES:
            out[name] = amount(name, text)
        elif name == "pods":
            out[name] = int(text)
    return out


def active(pod: Mapping[str, Any]) -> bool:
    """Whether the pod holds its node's resources (not Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def requested_on(node: str, pods: Iterable[Mapping[str, Any]], exclude_uid: str = "") -> dict[str, int]:
    """What the active pods bound to `node` (but `exclude_uid`) request, plus their count as `pods`."""
    total: dict[str, int] = {"pods": 0}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node or not active(pod):
            continue
        if (pod.get("metadata") or {}).get("uid") == exclude_uid:
            continue
        _add(total, pod_requests(pod))
        total["pods"] += 1
    return total


def fit_failures(
    pod: Mapping[str, Any], node: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]
) -> list[str]:
    """`fitsRequest`: the reasons `pod` does not fit `node` next to the node's other pods (none: it fits)."""
    have = allocatable(node)
    used = requested_on((node.get("metadata") or {}).get("name", ""), pods)
    reasons = []
    if "pods" in have and used["pods"] + 1 > have["pods"]:
        reasons.append("Too many pods")
    for name, value in sorted(pod_requests(pod).items()):
        if value and value > have.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def unschedulable_message(total_nodes: int, reasons: Counter[str], no_victims: int, not_helpful: int) -> str:
    """The scheduler's `FitError` message, `0/N nodes are available: <count> <reason>, ... .`, followed by the
    preemption post-filter's verdict per node (`no_victims` nodes fail on resources only, and no pod here has
    a lower priority to evict; on `not_helpful` nodes evicting could not help, e.g. a selector mismatch)."""
    listed = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    verdicts = []
    if no_victims:
        verdicts.append(f"{no_victims} No preemption victims found for incoming pod")
    if not_helpful:
        verdicts.append(f"{not_helpful} Preemption is not helpful for scheduling")
    return (
        f"0/{total_nodes} nodes are available: {listed}. "
        f"preemption: 0/{total_nodes} nodes are available: {', '.join(verdicts)}."
    )


def capacity_freed(kind: str, obj: Obj, old: Obj | None) -> bool:
    """Whether a pod change may leave room on its node: the pod was deleted, reached Succeeded/Failed, or
    requests less than before (a resize down)."""
    if not (obj.get("spec") or {}).get("nodeName"):
        return False
    if kind == "DELETED":
        return True
    if old is None:
        return False
    if not active(obj):
        return active(old)
    now, before = pod_requests(obj), pod_requests(old)
    return any(now.get(name, 0) < value for name, value in before.items())


class Scheduler:
    """The local cluster's kube-scheduler: binds a pending pod to a node that matches its nodeSelector and
    fits its requests (`fit.go`), spreading pods across nodes; a pod that fits nowhere stays Pending with
    `PodScheduled=False`, reason `Unschedulable`, and a `FailedScheduling` event, and is tried again when a
    pod on some node ends, is deleted or is resized (the scheduling queue's move on cluster events)."""

    def __init__(self, store: Store, events: EventRecorder, profile: Profile) -> None:
        self.store = store
        self.events = events
        self.profile = profile
        self.unschedulable: dict[str, tuple[str, str]] = {}
        self._next_node = 0
        self.tasks = BackgroundTasks()

    def spawn(self, coro: Any) -> None:
        self.tasks.spawn(coro)

    def start(self) -> None:
        self.store.listen(self.on_change)
        for pod in list(self.store.items(R.PODS)):
            self.on_change("ADDED", R.PODS, pod, None)

    def on_change(self, kind: str, res: R.Resource, obj: Obj, old: Obj | None) -> None:
        """The scheduling queue: a new unbound pod is scheduled; a pod that frees capacity, or a new node
        (`eventhandlers.go` `addNodeToCache`: `MoveAllToActiveOrBackoffQueue` on `NodeAdd`, how a cluster
        autoscaler's node takes the pods waiting for it), moves the unschedulable ones back."""
        if res is R.NODES and kind == "ADDED":
            self.capacity_changed()
        if res is not R.PODS:
            return
        if capacity_freed(kind, obj, old):
            self.capacity_changed()
        if kind == "ADDED" and not (obj.get("spec") or {}).get("nodeName"):
            if not obj["metadata"].get("deletionTimestamp"):
                self.spawn(self.schedule(obj))

    def nodes(self) -> list[str]:
        return [node["metadata"]["name"] for node in self.store.items(R.NODES)]

    def node_labels(self, node: str) -> dict[str, str]:
        obj = self.store.peek(R.NODES, "", node)
        return dict((obj or {}).get("metadata", {}).get("labels") or {})

    async def schedule(self, pod: Obj) -> None:
        await asyncio.sleep(self.profile.schedule)
        ns, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
        current = self.store.peek(R.PODS, ns, name)
        uid = pod["metadata"]["uid"]
        if current is None or current["metadata"]["uid"] != uid or current["spec"].get("nodeName"):
            self.unschedulable.pop(uid, None)
            return
        if current["metadata"].get("deletionTimestamp"):
            self.unschedulable.pop(uid, None)
            return
        wanted = current["spec"].get("nodeSelector") or {}
        names = self.nodes()
        pods = list(self.store.items(R.PODS))
        reasons: Counter[str] = Counter()
        no_victims = not_helpful = 0
        chosen = None
        for i in range(len(names)):
            node = names[(self._next_node + i) % len(names)]
            labels = self.node_labels(node)
            if not all(labels.get(k) == v for k, v in wanted.items()):
                reasons["node(s) didn't match Pod's node affinity/selector"] += 1
                not_helpful += 1
                continue
            failures = fit_failures(current, self.store.peek(R.NODES, "", node) or {}, pods)
            if failures:
                reasons.update(failures)
                no_victims += 1
                continue
            chosen = node
            break
        if chosen is None:
            self.unschedulable[uid] = (ns, name)
            self._unschedulable(current, len(names), reasons, no_victims, not_helpful)
            return
        self.unschedulable.pop(uid, None)
        self._next_node = (names.index(chosen) + 1) % len(names)
        bound = dict(current)
        bound["spec"] = {**current["spec"], "nodeName": chosen}
        bound["status"] = {
            **(current.get("status") or {}),
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": now_iso(),
                    "lastProbeTime": None,
                }
            ],
        }
        self.store.update(R.PODS, bound, check_rv=False)
        self.events.record(
            bound,
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/{name} to {chosen}",
            "default-scheduler",
        )

    def _unschedulable(
        self, pod: Obj, total: int, reasons: Counter[str], no_victims: int, not_helpful: int
    ) -> None:
        if no_victims:
            message = unschedulable_message(total, reasons, no_victims, not_helpful)
        else:  # no node matches the selector: the message the scheduler gave before resources were checked
            message = (
                f"0/{total} nodes are available: {total} node(s) didn't match Pod's node affinity/selector."
            )
        self.events.record(pod, "Warning", "FailedScheduling", message, "default-scheduler")
        updated = dict(pod)
        updated["status"] = {
            **(pod.get("status") or {}),
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": now_iso(),
                    "lastProbeTime": None,
                    "message": message,
                }
            ],
        }
        self.store.update(R.PODS, updated, check_rv=False)

    def capacity_changed(self) -> None:
        """A pod ended, was deleted or was resized, or a node came: try the unschedulable pods again."""
        for ns, name in list(self.unschedulable.values()):
            pod = self.store.peek(R.PODS, ns, name)
            if pod is not None:
                self.spawn(self.schedule(pod))

    async def shutdown(self) -> None:
        await self.tasks.cancel()
