"""Sizing each slot for the stage it runs, through in-place pod resize (`pods/resize`, KEP-1287, GA in 1.35).

Without it both slots reserve the largest stage's requests for the whole run (`resources.slot_resources`, the
static sizing). With it, a swap first shrinks the other, idle slot to the parked minimum, then sizes the
swapped slot for its stage, so the pod never reserves more than the larger of the two stages plus the parked
minimum. Both slots start parked: a prepared slot stays small until its stage starts.

Only cpu and memory can be resized. The slot's other resources (ephemeral-storage, extended resources) keep
the static sizing. The pod's QoS class is fixed at creation and no resize may change it (the API server
refuses with 422): `resources.plan_sizing` computes it from every stage's size and the parked size, and a
chain whose sizes would change it fails at parse time. This module carries that plan out.

The sizing the setup task chose travels with the pod, in its `kruise-chain.io/sizing` annotation, so each
stage task (another process) finds its stage's size there.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol, cast

from .conflicts import READ, AsyncPodApi, Guarded, arun, resize, run
from .constants import SLOTS, other_slot
from .errors import (
    ChainError,
    ConflictError,
    ResizeInfeasibleError,
    ResizeRefusedError,
    ResizeTimeoutError,
)
from .podview import ChainPod
from .resources import (
    SIZING_ANNOTATION,
    ChainSizing,
    Resources,
    init_resources,
    parse_quantity,
    quantity_max,
)
from .status import StageState, slot_status
from .watch import pod_watch, watch_versions


def resize_steps(
    pod: ChainPod, slot: str, other: str, target: Resources, parked: Resources, other_idle: bool
) -> list[tuple[str, Resources]]:
    """The resizes that size `slot` for `target`, in the order that keeps the pod's reservation at most the
    larger of the two stages plus the parked minimum: first shrink `other` to `parked` (if it is idle and
    larger), then size `slot`."""
    view = pod
    steps = []
    current_other = dict(view.slot(other).resources or {})
    if other_idle and not same_resources(current_other, parked):
        steps.append((other, parked))
    current = dict(view.slot(slot).resources or {})
    if not same_resources(current, target):
        steps.append((slot, target))
    return steps


def same_resources(a: Mapping[str, Mapping[str, str]], b: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether two resource specs are equal as quantities (`1Gi` == `1024Mi`)."""

    def norm(res: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, Decimal]]:
        return {k: {r: parse_quantity(str(q)) for r, q in v.items()} for k, v in res.items() if v}

    return norm(a) == norm(b)


def _requests_applied(pod: ChainPod, slot: str, target: Resources) -> bool:
    allocated = pod.slot(slot).allocated or {}
    want = target.get("requests") or {}
    return all(
        r in allocated and parse_quantity(str(allocated[r])) == parse_quantity(q) for r, q in want.items()
    )


def _in_force(pod: ChainPod, slot: str, target: Resources, admitted: bool) -> bool:
    """Whether `pod` shows no resize of `slot` to `target` left to wait for (`SlotSizer._await`): none
    pending, its allocation (when the kubelet reports one) at `target`, and (unless `admitted` is enough) no
    resize of the pod in progress."""
    if _condition(pod, "PodResizePending") is not None:
        return False
    if pod.slot(slot).allocated and not _requests_applied(pod, slot, target):
        return False
    return admitted or _condition(pod, "PodResizeInProgress") is None


def _condition(pod: ChainPod, ctype: str) -> Mapping[str, Any] | None:
    for cond in (pod.raw.get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


_CAPACITY = re.compile(r"Node didn't have enough capacity: (\w+), requested: (\d+), capacity: (\d+)")


def _shown(resource: str, amount: int) -> str:
    if resource == "memory":
        return f"{amount / 2**20:g}Mi"
    return f"{amount}m"


def infeasible_message(stage: str, slot: str, target: Resources, node: str, message: str) -> str:
    """The stage's error for an Infeasible resize: the stage, what it requests and the node's allocatable."""
    match = _CAPACITY.search(message)
    requested = ", ".join(f"{r} {q}" for r, q in (target.get("requests") or {}).items())
    if match:
        resource, _, capacity = match.groups()
        node_part = f"node {node or '?'} has {resource} {_shown(resource, int(capacity))} allocatable"
    else:
        node_part = f"node {node or '?'} cannot fit it"
    return (
        f"stage {stage!r} cannot be sized in {slot}: it requests {requested} but {node_part} "
        f"(PodResizePending Infeasible: {message}); lower the stage's resources or run the chain on a "
        "larger node"
    )


def refused_message(
    stage: str, slot: str, target: Resources, sizing: ChainSizing, refused: Exception
) -> ResizeRefusedError:
    """The stage's error for a resize the API server refused (422): the stage, the request and the fix."""
    if "qos" in str(refused).lower():
        fix = (
            f"an in-place resize may not change the pod's QoS class ({sizing.qos}): the chain pod's sizing "
            f"(annotation {SIZING_ANNOTATION}) or its containers' resources were changed after it was "
            "created; clear the DAG run from the chain's setup task to start a fresh pod, or use "
            "sizing='static'"
        )
    else:
        fix = (
            "give the stage resources this cluster accepts for an in-place resize (only cpu and memory, "
            "same requests and limits set as the parked size), or use sizing='static'"
        )
    return ResizeRefusedError(
        f"stage {stage!r} could not be sized in {slot}: the API server refused to resize it to "
        f"{_describe(target)} (422: {refused}); {fix}"
    )


# -- carrying it out -------------------------------------------------------------------------------------
class ResizeApi(Protocol):
    """What sizing needs from a Kubernetes client."""

    def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def read_pod(self, name: str, namespace: str) -> dict[str, Any] | None: ...

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[dict[str, Any] | None]: ...


def resize_body(slot: str, resources: Resources, version: str | None = None) -> dict[str, Any]:
    """A `pods/resize` patch of one container; with `version`, applied only to that resourceVersion."""
    body: dict[str, Any] = {"spec": {"containers": [{"name": slot, "resources": resources}]}}
    if version:
        body["metadata"] = {"resourceVersion": version}
    return body


PARK_CONFLICTS = 10
"""conflicting updates in a row after which a park gives up (the next swap parks the idle slot)"""


@dataclass(frozen=True)
class SlotResize:
    """One slot's resize from `current` to `target`, guarded by the pod's `version`: a park (`park_request`)
    or a size ahead (`ahead_request`)."""

    slot: str
    current: Resources
    target: Resources
    sizing: ChainSizing
    version: str | None

    def says_ahead(self, stage: str, ended: str) -> str:
        return (
            f"::kruise-chain:: resize {self.slot} to {_describe(self.target)} (ahead, for the next stage "
            f"{stage!r}: {ended} is parked)"
        )

    def says(self, stage: str) -> str:
        return (
            f"::kruise-chain:: resize {self.slot} to {_describe(self.target)} (parked: stage {stage!r} ended)"
        )


def kubelet_settled(pod: ChainPod) -> bool:
    """Whether `pod` shows nothing its kubelet has still to report: no resize pending or in progress, and
    every slot running and ready, none prepared and still to restart (its container the one the prepare
    found). A stage task's park guards its resize by such a pod as it last saw it (`guarded_park`'s
    `guard_by_seen`); one that is still moving is read first (a 409 would cost the read and a resize more)."""
    if _condition(pod, "PodResizePending") is not None or _condition(pod, "PodResizeInProgress") is not None:
        return False
    for name in SLOTS:
        slot = pod.slot(name)
        if not (slot.running and slot.ready):
            return False
        prepared = slot.prepared
        if prepared is not None and prepared.previous_container_id == slot.container_id:
            return False
    return True


SETTLE_WAIT = 1.0
"""seconds the prepare after a park waits for its resize in force (`resize_unsettled`): the PLEG's relist
period, before which the kubelet would not sync the prepare either (`podWorkerLoop`: a newer pod cache)"""


def resize_unsettled(pod: ChainPod) -> bool:
    """Whether `pod` (e.g. a resize's answer) shows a resize the kubelet is still to write about (a guarded
    update from it meets those writes: 409): a slot's requests not its allocation yet, or the resize in
    progress (`handlePodResourcesResize`: the allocation and `PodResizeInProgress`, cleared once applied).
    Nothing to wait for when it is pending, in progress with reason `Error`, or no allocation is shown."""
    if _condition(pod, "PodResizePending") is not None:
        return False
    progress = _condition(pod, "PodResizeInProgress")
    if progress is not None:
        return progress.get("reason") != "Error"
    for name in SLOTS:
        want = (pod.slot(name).resources or {}).get("requests") or {}
        if pod.slot(name).allocated and want and not _requests_applied(pod, name, {"requests": want}):
            return True
    return False


def park_request(pod: ChainPod | None, slot: str, generation: int) -> SlotResize | None:
    """What parking `slot` after its generation `generation` asks of the API server; None when nothing: the
    pod is gone or sized statically, the slot holds another generation since (another task's stage, which
    must not be shrunk), or it is parked already."""
    sizing = ChainSizing.from_pod(pod) if pod is not None else None
    if pod is None or sizing is None or pod.slot(slot).generation != generation:
        return None
    current = dict(pod.slot(slot).resources or {})
    if same_resources(current, sizing.parked):
        return None
    return SlotResize(slot, current, sizing.parked, sizing, pod.resource_version)


def idle_by_pod(pod: ChainPod, slot: str) -> bool:
    """Whether the pod alone says no generation runs in `slot`: it holds none (prepared, or never said go:
    nothing runs there until a swap says go), or its generation's end is confirmed."""
    if pod.slot(slot).generation == 0:
        return True
    status = slot_status(pod, slot)
    return status.state not in (StageState.SWAPPING, StageState.RUNNING) and status.confirmed


AHEAD_CONFLICTS = 3
"""conflicting updates in a row after which sizing ahead gives up (the next swap sizes its slot)"""


def ahead_request(
    pod: ChainPod | None,
    image: str,
    ended: str,
    stage: str,
    idle: Callable[[ChainPod, str], bool],
    parking: bool = False,
) -> SlotResize | None:
    """The resize that sizes the slot other than `ended` for `stage`, predicted to run next on `image`
    (`SlotSizer.size_ahead`); None unless the pod is sized in place, that slot holds `image`, is not sized
    for `stage` yet and `idle` says nothing runs there, and `ended` reserves no more than the parked minimum
    (the pod then reserves at most the next stage plus the parked minimum, the bound every swap keeps), or
    is parked by the same resize (`parking`: `park_with_ahead`)."""
    slot = other_slot(ended)
    sizing = ChainSizing.from_pod(pod) if pod is not None else None
    if pod is None or sizing is None or pod.slot(slot).image != image:
        return None
    reserved = {"requests": dict((pod.slot(ended).resources or {}).get("requests") or {})}
    if not parking and not same_resources(reserved, {"requests": sizing.parked.get("requests") or {}}):
        return None  # `ended` is not parked (yet): sizing now would reserve two stages at once
    target = sizing.for_stage(stage)
    current = dict(pod.slot(slot).resources or {})
    if same_resources(current, target) or not idle(pod, slot):
        return None
    return SlotResize(slot, current, target, sizing, pod.resource_version)


Ahead = tuple[str, str, Callable[[ChainPod, str], bool]]
"""(stage, image, idle): the stage predicted to run next on `image`, and the caller's check that the other
slot runs nothing (`ahead_request`)"""


def _requests_total(resources: Collection[Mapping[str, Any]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for res in resources:
        for name, quantity in ((res or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(str(quantity))
    return total


def park_with_ahead(pod: ChainPod, park: SlotResize, ahead: Ahead) -> SlotResize | None:
    """The size ahead (`ahead_request`) that can ride on `park`'s resize of `pod`: one `pods/resize` of
    both slots instead of a park and a size ahead, which a kubelet's status write in between (after the
    park) makes conflict, read and resize again. None when `ahead_request` asks for nothing, or when the
    two together would raise any of the pod's requests: a resize that grows the pod may be deferred, and
    the park's release must not wait with it (then the size ahead follows the park, as without it)."""
    stage, image, idle = ahead
    try:
        request = ahead_request(pod, image, park.slot, stage, idle, parking=True)
    except Exception:  # e.g. `idle`'s log read: the park goes on alone, the caller's size ahead says why
        return None
    if request is None:
        return None
    before = _requests_total([pod.slot(slot).resources or {} for slot in SLOTS])
    after = _requests_total([park.target, request.target])
    if any(amount > before.get(name, Decimal(0)) for name, amount in after.items()):
        return None
    return request


def park_ahead_body(park: SlotResize, ahead: SlotResize) -> dict[str, Any]:
    """One `pods/resize` patch parking `park`'s slot and sizing `ahead`'s, guarded by `park`'s version."""
    body = resize_body(park.slot, park.target, park.version)
    body["spec"]["containers"].append({"name": ahead.slot, "resources": ahead.target})
    return body


def limit_kept(
    refused: ResizeRefusedError,
    stage: str,
    slot: str,
    current: Mapping[str, Mapping[str, str]],
    target: Resources,
    sizing: ChainSizing,
    log: Callable[[str], None],
) -> Resources:
    """`target` with `slot`'s memory limit kept when the API server `refused` to lower it (before 1.34 it
    refuses any in-place memory limit decrease); any other refusal raises the stage's error."""
    if "memory limits cannot be decreased" not in str(refused):
        raise refused_message(stage, slot, target, sizing, refused) from refused
    log(
        f"the API server refused to lower {slot}'s memory limit ({refused}): keeping it at "
        f"{(current.get('limits') or {}).get('memory')}, resizing the rest"
    )
    return _keep_memory_limit(target, current)


def _resized(
    request: SlotResize, stage: str, log: Callable[[str], None]
) -> Guarded[tuple[ChainPod, Resources]]:
    """Make `request`'s resize, its memory limit kept when the API server refuses to lower it (before 1.34
    it refuses any in-place memory limit decrease): the pod as it left it, and the target it took. A stale
    resourceVersion: `ConflictError`."""
    slot, sizing, target = request.slot, request.sizing, request.target
    try:
        return cast(ChainPod, (yield resize(resize_body(slot, target, request.version)))), target
    except ResizeRefusedError as refused:
        target = limit_kept(refused, stage, slot, request.current, target, sizing, log)
    try:  # refused: the pod did not change
        return cast(ChainPod, (yield resize(resize_body(slot, target, request.version)))), target
    except ResizeRefusedError as refused:  # refused again
        raise refused_message(stage, slot, target, sizing, refused) from refused


def guarded_park(
    stage: str,
    slot: str,
    generation: int,
    log: Callable[[str], None],
    seen: ChainPod | None = None,
    *,
    ahead: Ahead | None = None,
    guard_by_seen: bool = False,
) -> Guarded[ChainPod | None]:
    """Park `slot`, where generation `generation` of `stage` has ended, only while the slot still holds
    that generation: a guarded update (in a task `SlotSizer.park_generation`, in a deferred stage's trigger
    `apark_generation`). The resize is guarded by the pod's resourceVersion (read again after a conflict),
    since a slot another task has swapped since holds that task's stage, which must not be shrunk. `seen`:
    the pod as the caller last read it; one sized statically needs no read (the sizing annotation is fixed
    when setup creates the pod). Ends with the pod as the resize left it (None: nothing parked).

    Ends once the API server took the resize, without waiting for the kubelet to apply it: nothing waits on
    a parked slot. The next swap's sizing copes with a resize still in progress (a resize of its own slot is
    done only once the pod's is) and with a limit the kubelet refused to lower (the usage is above it:
    `SlotSizer._keep_refused_limit`).

    `ahead`: the next stage's size ahead (`guarded_size_ahead`), made by the park's own resize when it can
    (`park_with_ahead`): then the caller's size ahead finds the slot sized and asks for nothing.
    `guard_by_seen`: `seen` is the latest version the caller knows (a stage task's swap answer, or its
    watch's since): the first resize is planned from it and guarded by its resourceVersion, no read; a
    pod that moved on since answers 409, and the park reads it then."""
    if seen is not None and ChainSizing.from_pod(seen) is None:
        return None
    pod, said = (seen if guard_by_seen else None), False
    for _ in range(PARK_CONFLICTS):
        if pod is None:
            pod = yield READ
            if pod is None:
                return None
        request = park_request(pod, slot, generation)
        if request is None:
            return None
        if not said:  # once, though a conflict plans it again
            log(request.says(stage))
            said = True
        both = park_with_ahead(pod, request, ahead) if ahead is not None else None
        if both is not None and ahead is not None:
            try:
                parked = yield resize(park_ahead_body(request, both))
            except ConflictError:
                pod = None
                continue
            except ResizeRefusedError:
                pass  # the pod did not change: park alone (its refusal handled), the size ahead after it
            else:
                log(both.says_ahead(ahead[0], slot))
                return parked
        try:
            parked, _ = yield from _resized(request, stage, log)
        except ConflictError:
            pod = None
            continue
        return parked
    return None


def guarded_size_ahead(
    stage: str,
    image: str,
    ended: str,
    idle: Callable[[ChainPod, str], bool],
    log: Callable[[str], None],
    pod: ChainPod | None = None,
) -> Guarded[ChainPod | None]:
    """Size the slot other than `ended` for `stage`, predicted to run next on `image`, once the stage that ran
    in `ended` has ended and `ended` is parked (`guarded_park`), as a guarded update (in a task
    `SlotSizer.size_ahead`; in a deferred stage's trigger with `idle_by_pod`: no log read there): the next
    stage's swap then finds its slot sized, and the kubelet applies the resize while Airflow starts that
    stage's task instead of after its swap asked for it (a sync of the pod: up to a PLEG relist, ~1 s). Ends
    with the pod as the resize left it; None when it asked for none.

    Only when that slot holds `image` (the swap will say go there) and `idle` says no generation runs there,
    and only while `ended` reserves no more than the parked minimum (`ahead_request`). One request, guarded
    by the resourceVersion of `pod` (as the park left it; None: read it), read again after a conflict
    (`AHEAD_CONFLICTS` tries); it does not wait for the kubelet. A wrong prediction is sized by the swap that
    runs instead, as without it."""
    for _ in range(AHEAD_CONFLICTS):
        pod = pod or (yield READ)
        request = ahead_request(pod, image, ended, stage, idle)
        if request is None:
            return None
        try:
            resized, _ = yield from _resized(request, stage, log)
        except ConflictError:
            pod = None
            continue
        log(request.says_ahead(stage, ended))
        return resized
    return None


async def apark_generation(
    api: AsyncPodApi,
    pod_name: str,
    namespace: str,
    stage: str,
    slot: str,
    generation: int,
    log: Callable[[str], None],
    seen: ChainPod | None = None,
    *,
    ahead: Ahead | None = None,
) -> ChainPod | None:
    """`guarded_park` over an async client (a deferred stage's trigger parks its slot); the pod as its
    resize left it (None: nothing to park)."""
    steps = guarded_park(stage, slot, generation, log, seen, ahead=ahead)
    return await arun(steps, api, pod_name, namespace)


class SlotSizer:
    """Resizes the chain pod's slots and waits for the kubelet to apply each resize."""

    def __init__(self, api: ResizeApi, pod_name: str, namespace: str, log: Callable[[str], None]) -> None:
        self.api = api
        self.pod_name = pod_name
        self.namespace = namespace
        self.log = log
        self.last: ChainPod | None = None
        """the latest version of the pod seen while resizing"""

    def size(
        self,
        pod: ChainPod,
        stage: str,
        slot: str,
        other: str,
        other_idle: bool,
        deadline: float,
        restarting: bool = False,
    ) -> bool:
        """Size `slot` for `stage` (shrinking the idle `other` slot first); True if that changed the pod
        (False: a static chain pod, the slots were sized already, or a resize could not change them).

        `restarting`: the swap restarts `slot` (an image patch), whose new container starts with what the
        kubelet has allocated: the slot's resize is done once admitted (allocatedResources), without
        waiting for the kubelet to apply it to the container being replaced. Otherwise (the running runner
        starts the stage) it is done once applied to the running container."""
        version = pod.resource_version
        sizing = ChainSizing.from_pod(pod)
        if sizing is None:
            return False
        target = sizing.for_stage(stage)
        if other_idle and self._keep_refused_limit(pod, other, sizing):
            pod, other_idle = self.last or pod, False  # parked as far as the kubelet lets it
        steps = resize_steps(pod, slot, other, target, sizing.parked, other_idle)
        for which, resources in steps:
            shrinking = which == other
            self.log(
                f"::kruise-chain:: resize {which} to {_describe(resources)} "
                f"({'parked: its stage is done' if shrinking else 'for stage ' + repr(stage)})"
            )
            current = dict(pod.slot(which).resources or {})
            admitted = restarting and not shrinking
            self._apply(stage, which, current, resources, sizing, shrinking, deadline, admitted=admitted)
        seen = self.last or pod
        if slot not in (which for which, _ in steps) and not _in_force(seen, slot, target, restarting):
            # sized ahead (`size_ahead`, at the end of the stage before) and not applied by the kubelet yet
            self.log(f"waiting: the kubelet has not applied the resize of {slot} for stage {stage!r} yet")
            current = dict(pod.slot(slot).resources or {})
            self._await(stage, slot, seen, current, target, sizing, False, deadline, restarting)
        # a resize the API server or the kubelet would not make as asked (a limit kept) leaves the pod as it
        # was: nothing changed, so the caller goes on instead of planning again
        return self.last is not None and self.last.resource_version != version

    def size_for_swap(
        self,
        pod: ChainPod,
        stage: str,
        slot: str,
        restarting: bool,
        finished: Collection[str],
        deadline: float,
    ) -> bool:
        """`size` for a swap of `stage` into `slot`. The other slot counts as idle (parked first) only when
        its generation is known to have ended (in `finished`: its result is in its log, or a status the pod
        can vouch for), never from a readiness that may predate an annotations-only swap: a running stage
        is never shrunk."""
        other = other_slot(slot)
        status = slot_status(pod, other)
        idle = other in finished or (
            status.state not in (StageState.SWAPPING, StageState.RUNNING) and status.confirmed
        )
        return self.size(pod, stage, slot, other, idle, deadline, restarting)

    def park_generation(
        self,
        stage: str,
        slot: str,
        generation: int,
        seen: ChainPod | None = None,
        ahead: Ahead | None = None,
        guard_by_seen: bool = False,
    ) -> None:
        """`guarded_park` over this sizer's client."""
        steps = guarded_park(
            stage, slot, generation, self.log, seen, ahead=ahead, guard_by_seen=guard_by_seen
        )
        parked = run(steps, self.api, self.pod_name, self.namespace)
        self.last = parked or self.last

    def size_ahead(self, stage: str, image: str, ended: str, idle: Callable[[ChainPod, str], bool]) -> bool:
        """`guarded_size_ahead` over this sizer's client, from the pod as the park left it (`last`);
        True if it asked for the resize."""
        steps = guarded_size_ahead(stage, image, ended, idle, self.log, self.last)
        resized = run(steps, self.api, self.pod_name, self.namespace)
        self.last = resized or self.last
        return resized is not None

    def _keep_refused_limit(self, pod: ChainPod, other: str, sizing: ChainSizing) -> bool:
        """When the kubelet refused to lower idle slot `other`'s memory limit to the parked one (its usage is
        above it: `PodResizeInProgress` Error naming it, left by a park that did not wait), park its requests
        and keep the limit it runs with (its container status), so the pod's resize can complete. True if
        it resized `other`."""
        if not _limit_refused_for(pod, other) or not same_resources(
            dict(pod.slot(other).resources or {}), sizing.parked
        ):
            return False
        running = dict(pod.slot(other).actual or {})
        target = _keep_memory_limit(sizing.parked, running)
        self.log(
            f"the kubelet refused to lower {other}'s memory limit to the parked one: keeping its limit "
            f"{(running.get('limits') or {}).get('memory')}, parking its requests"
        )
        self.last = self._resize("park", other, target, sizing)
        return True

    def _apply(
        self,
        stage: str,
        slot: str,
        current: Mapping[str, Mapping[str, str]],
        target: Resources,
        sizing: ChainSizing,
        shrinking: bool,
        deadline: float,
        version: str | None = None,
        admitted: bool = False,
    ) -> None:
        """Resize `slot` from `current` to `target` (only if the pod is still at `version`, when given: the
        limit kept when the API server refused to lower it, `_resized`) and wait until the kubelet applied it
        (`admitted`: until it allocated it)."""
        request = SlotResize(slot, dict(current), target, sizing, version)
        pod, target = run(_resized(request, stage, self.log), self.api, self.pod_name, self.namespace)
        self.last = pod
        self._await(stage, slot, pod, current, target, sizing, shrinking, deadline, admitted)

    def _await(
        self,
        stage: str,
        slot: str,
        pod: ChainPod,
        current: Mapping[str, Mapping[str, str]],
        target: Resources,
        sizing: ChainSizing,
        shrinking: bool,
        deadline: float,
        admitted: bool,
    ) -> None:
        """Wait, from `pod` on, until the kubelet applied `slot`'s resize to `target` (`admitted`: until it
        allocated it; `_apply`)."""
        said: set[str] = set()
        for seen in self._versions(pod, deadline):
            self.last = seen
            pending = _condition(seen, "PodResizePending")
            progress = _condition(seen, "PodResizeInProgress")
            applied = _requests_applied(seen, slot, target)
            if pending is not None and pending.get("reason") == "Infeasible":
                node = seen.node_name
                raise ResizeInfeasibleError(
                    infeasible_message(stage, slot, target, node, pending.get("message", ""))
                )
            if pending is not None:
                self._say(
                    said, f"waiting: the kubelet deferred resizing {slot}: {pending.get('message', '')}"
                )
            elif progress is not None and progress.get("reason") == "Error" and applied:
                message = progress.get("message", "")
                if shrinking and sizing.qos != "Guaranteed" and _limit_refused_for(seen, slot):
                    # the kubelet will not lower the limit below the usage: park the requests, keep the limit
                    self.log(
                        f"the kubelet refused to lower {slot}'s memory limit ({message}): keeping its limit, "
                        "parking its requests"
                    )
                    target = _keep_memory_limit(target, current)
                    self._resize(stage, slot, target, sizing)
                    shrinking = False
                    continue
                self._say(said, f"waiting: the kubelet could not apply the resize of {slot} yet: {message}")
            elif applied and (progress is None or admitted):
                return
        raise ResizeTimeoutError(
            f"swap timeout: resizing {slot} for stage {stage!r} to {_describe(target)} did not complete: "
            + "; ".join(sorted(said) or ["not applied yet"])
        )

    def _resize(
        self, stage: str, slot: str, target: Resources, sizing: ChainSizing, version: str | None = None
    ) -> ChainPod:
        try:
            return self.api.resize_pod(self.pod_name, self.namespace, resize_body(slot, target, version))
        except ResizeRefusedError as refused:
            raise refused_message(stage, slot, target, sizing, refused) from refused

    def _say(self, said: set[str], note: str) -> None:
        if note not in said:
            said.add(note)
            self.log(note)

    def _versions(self, pod: ChainPod, deadline: float) -> Iterator[ChainPod]:
        """`pod`, then every later version of it the API server sends on a watch, until `deadline`."""
        yield pod
        watch, read = pod_watch(self.api, self.pod_name, self.namespace)
        for new in watch_versions(watch, deadline, version=pod.resource_version, relist=read):
            if new is None:
                raise ChainError(f"chain pod {self.namespace}/{self.pod_name} vanished while resizing a slot")
            yield new


def sized_alike_idle_or_not(pod: ChainPod, other: str) -> bool:
    """Whether `SlotSizer.size_for_swap` sizes a swap the same whether slot `other` counts as idle or not: the
    pod is sized statically, or `other` is parked already and the kubelet has not refused its parked limit."""
    sizing = ChainSizing.from_pod(pod)
    if sizing is None:
        return True
    return same_resources(dict(pod.slot(other).resources or {}), sizing.parked) and not _limit_refused_for(
        pod, other
    )


class BackgroundPark:
    """`SlotSizer.park_generation` on a thread: the stage task's other work at the stage's end (publishing its
    state) does not wait for the park's requests; `sized`, `guard_by_seen`: as `guarded_park`'s `ahead` and
    `guard_by_seen`. Then `ahead` (given the sizer, e.g. its `size_ahead` for the next stage), whose failures
    are only logged. `settle` waits for it, then logs what it said on the caller's thread; a park's
    ChainError is logged (the next swap parks the slot once it is idle), anything else raised."""

    def __init__(
        self,
        api: ResizeApi,
        pod_name: str,
        namespace: str,
        log: Callable[[str], None],
        stage: str,
        slot: str,
        generation: int,
        seen: ChainPod | None,
        ahead: Callable[[SlotSizer], object] | None = None,
        sized: Ahead | None = None,
        guard_by_seen: bool = False,
    ) -> None:
        self.log = log
        self._lines: list[str] = []
        self._error: BaseException | None = None
        sizer = SlotSizer(api, pod_name, namespace, self._lines.append)

        def park() -> None:
            try:
                sizer.park_generation(stage, slot, generation, seen, sized, guard_by_seen)
            except ChainError as err:
                self._lines.append(f"could not park {slot} after stage {stage!r}: {err}")
                return
            except BaseException as err:  # raised by settle, on the caller's thread
                self._error = err
                return
            if ahead is None:
                return
            try:
                ahead(sizer)
            except Exception as err:  # ahead-of-time work: the next swap sizes its slot itself
                self._lines.append(f"::kruise-chain:: not sizing {other_slot(slot)} ahead: {err}")

        self._thread = threading.Thread(target=park, name=f"park-{slot}", daemon=True)
        self._thread.start()

    def settle(self) -> None:
        self._thread.join()
        lines, self._lines = self._lines, []
        for line in lines:
            self.log(line)
        error, self._error = self._error, None
        if error is not None:
            raise error


_LIMIT_REFUSED = re.compile(r'attempting to set container "([^"]+)" memory limit')


def _limit_refused_for(pod: ChainPod, container: str) -> bool:
    """Whether the kubelet refuses to lower `container`'s memory limit below its usage (`PodResizeInProgress`
    Error, kuberuntime `validateMemoryResizeAction`)."""
    progress = _condition(pod, "PodResizeInProgress")
    if progress is None or progress.get("reason") != "Error":
        return False
    return container in _LIMIT_REFUSED.findall(progress.get("message", ""))


def _keep_memory_limit(target: Resources, current: Mapping[str, Mapping[str, str]]) -> Resources:
    limit = (current.get("limits") or {}).get("memory")
    if limit is None:
        return target
    kept: Resources = {k: dict(v) for k, v in target.items()}
    kept.setdefault("limits", {})["memory"] = quantity_max(
        [limit, kept.get("limits", {}).get("memory", limit)]
    )
    return kept


def _describe(resources: Mapping[str, Mapping[str, str]]) -> str:
    parts = [
        f"{kind} {', '.join(f'{r}={q}' for r, q in values.items())}" for kind, values in resources.items()
    ]
    return "; ".join(parts) or "nothing"


def size_pod(pod: dict[str, Any], sizing: ChainSizing | None) -> dict[str, Any]:
    """The chain pod `pod` (as `build_chain_pod` made it) set up for `sizing`: both slots parked and the
    sizing in its annotation; None: sized statically, as built (no annotation: `ChainSizing.from_pod` reads
    a pod without one as static)."""
    out = json.loads(json.dumps(pod))
    annotations = out["metadata"].setdefault("annotations", {})
    annotations.pop(SIZING_ANNOTATION, None)
    if sizing is not None:
        annotations[SIZING_ANNOTATION] = sizing.annotation()
        for container in out["spec"]["containers"]:
            container["resources"] = json.loads(json.dumps(sizing.parked))
        init = init_resources(sizing.parked)
        for container in out["spec"].get("initContainers") or []:
            if init:
                container["resources"] = {**container.get("resources", {}), **json.loads(json.dumps(init))}
    return out
