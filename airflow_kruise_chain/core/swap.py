"""Planning a swap (which slot, which generation, one patch) and a prepare of the idle slot."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .conflicts import READ, Guarded, patch
from .constants import (
    CHAIN_LABEL,
    DAG_ID_LABEL,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    SLOTS,
    other_slot,
)
from .errors import ConflictError, PodLostError, ResultUnavailableError, SlotBusyError
from .image import same_image
from .manifest import slot_annotations
from .podview import PREPARE_HISTORY, ChainPod, PrepareRecord, StageRecord, records_patch
from .sizing import sized_alike_idle_or_not
from .spec import StageSpec
from .status import StageResult, StageState, StageStatus, current_status, needs_log, slot_status
from .wire import (
    GENERATION_ANNOTATION,
    GENERATION_FIELD,
    PREPARE_ID_FIELD,
    PREPARED_FIELD,
    RUN_FIELD,
    SEAL_ANNOTATION,
    SLOT_FIELDS,
    new_token,
    sealed_token,
    slot_annotation,
)

_AVAILABLE = (StageState.FINISHED, StageState.FAILED_TO_START)
_ON = (StageState.SWAPPING, StageState.RUNNING)
_IDENTITY_LABELS = (DAG_ID_LABEL, RUN_ID_LABEL, CHAIN_LABEL, MANAGED_BY_LABEL)

SwapAction = Literal["go", "patch", "reattach", "adopt"]

BACKOFF_INITIAL = 10.0
BACKOFF_MAX = 300.0
"""The kubelet's restart back-off (`kuberuntime_manager.go` `doBackOff`, client-go `flowcontrol.Backoff`):
10 s, doubling per restart of the same (pod, container, image) within 2 x max of the previous one, at most
300 s."""


@dataclass(frozen=True)
class SwapPlan:
    """What to do to run a stage.

    - ``go``: apply `patch` (annotations only): the slot already holds the stage's image and its runner,
      which outlives its stages, picks the new generation up from its downwardAPI volume; no restart.
    - ``patch``: apply `patch` (the slot's new image + annotations, guarded by resourceVersion): the kubelet
      restarts the slot with the stage's image; `backoff_wait` says how long its restart back-off will hold
      that start (0 when the planner found a slot it does not hold).
    - ``reattach``: no new swap (`patch` is None): follow generation `generation` in `slot`, which this try
      swapped in, or which an earlier try (`from_try`, its worker gone) swapped in and is still running.
    - ``adopt``: an earlier try's generation finished with exit 0: `result` is the stage's result; nothing
      runs again.
    """

    action: SwapAction
    stage: str
    slot: str
    generation: int
    record: StageRecord
    pod_name: str
    namespace: str
    labels: Mapping[str, str]
    patch: dict[str, Any] | None
    from_try: int = 0
    """the try that swapped this generation in"""
    result: StageResult | None = None
    """the adopted result (``adopt`` only)"""
    backoff_wait: float = 0.0
    """seconds the kubelet's restart back-off is expected to hold the slot's restart (``patch`` only)"""
    backoff_why: str = ""

    @property
    def token(self) -> str:
        return self.record.token


def _identity(pod: ChainPod) -> tuple[str, str, dict[str, str]]:
    view = pod
    labels = view.labels
    return view.name, view.namespace, {k: labels[k] for k in _IDENTITY_LABELS if k in labels}


def earlier_generation(pod: ChainPod, stage: str, try_number: int) -> StageRecord | None:
    """The record of an earlier try's generation of `stage` that is no longer running, else None.

    Its result (the slot's log, previous log or termination message, all written by the runner from its
    records) decides between adopting it and running a new generation: pass it to `plan_swap`.
    """
    view = pod
    record = view.record(stage)
    if record is None or record.try_number == try_number:
        return None
    return None if current_status(view, stage).state in _ON else record


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def restart_hold(pod: ChainPod, slot: str, image: str, now: datetime) -> tuple[float, str]:
    """Seconds the kubelet's restart back-off will hold `slot`'s next start on `image`, and why.

    Models `doBackOff`: the key is (pod, container, hash of name and image); every start after an exit
    that passes counts (`Next`): the first one for a key starts at once and arms 10 s, each later one within
    2 x 300 s doubles it. The restarts a slot made are read from the chain's own records (each image patch
    swap and each prepare: slot, image, time); the hold is measured from the exit the swap causes, i.e. from
    now.
    """
    restarts = [
        (when, rec.image)
        for rec in pod.records.values()
        if rec.slot == slot and rec.action == "patch" and (when := _parse_time(rec.swapped_at)) is not None
    ]
    prepared = pod.slot(slot).prepare
    for image_, at in prepared.restarts() if prepared is not None else ():
        if (when := _parse_time(at)) is not None:
            restarts.append((when, image_))
    restarts.sort()
    delay: float | None = None
    last: datetime | None = None
    for when, ran in restarts:
        if ran != image:
            continue
        if delay is None or last is None or (when - last).total_seconds() > 2 * BACKOFF_MAX:
            delay = BACKOFF_INITIAL
        else:
            delay = min(delay * 2, BACKOFF_MAX)
        last = when
    if delay is None or last is None or (now - last).total_seconds() > 2 * BACKOFF_MAX:
        return 0.0, ""
    ago = max(0, int((now - last).total_seconds()))
    return delay, (
        f"the kubelet's restart back-off: {slot} was last restarted on {image} {ago}s ago, so its next "
        f"restart on that image waits {delay:g}s (10 s, doubling per restart within 10 minutes)"
    )


def _holds(pod: ChainPod, slot: str, image: str, status: Any) -> bool:
    """Whether a usable `slot` can start a stage on `image` by annotations only: it runs that image (a slot
    whose prepared image could not start is left to an image patch)."""
    if pod.slot(slot).image != image:
        return False
    return not (status.state is StageState.FAILED_TO_START and pod.slot(slot).prepared is not None)


def plan_swap(
    pod: ChainPod,
    stage: StageSpec,
    *,
    try_number: int,
    earlier_result: StageResult | None = None,
    now: datetime | None = None,
    token: str | None = None,
    finished: Collection[str] | None = None,
) -> SwapPlan:
    """Plan running `stage` (already validated) for Airflow try `try_number` in the chain pod `pod`.

    Three steps, each a function of the snapshot: `_plan_existing` (the stage's latest generation decides
    first: reattach, adopt, or a new generation), `_choose_slot` (which slot, ``go`` or ``patch``, or wait)
    and `_swap_patch` (the one guarded patch that carries the swap out).

    `finished` (from the driver, which reads the slots' logs) names the slots whose generation's result line
    is in their log: usable even before their readiness probe says so; given, a Ready that may predate the
    slot's generation (`StageStatus.confirmed` False) no longer counts by itself.

    The generation's token (what its runner's lines must carry) is, in a sealed pod (`wire.SEAL_ANNOTATION`),
    derived from the pod's seal and a fresh nonce (`token`, if given), which alone goes into the run spec:
    no stage can know it (`wire.sealed_token`); in a pod without a seal it is the nonce itself.

    Raises PodLostError if the pod cannot run stages, SlotBusyError when no slot is free, and
    ResultUnavailableError when an earlier try's generation ended but `earlier_result` is missing. The patch
    carries ``metadata.resourceVersion``: a 409 Conflict means another swap won the race; re-read the pod and
    plan again.
    """
    if pod.lost is not None:
        raise PodLostError(pod.lost)
    existing = _plan_existing(pod, stage, try_number, earlier_result, finished)
    if existing is not None:
        return existing
    now = now or datetime.now(UTC)
    statuses = {slot: slot_status(pod, slot) for slot in SLOTS}
    slot, action, wait, why = _choose_slot(pod, stage, statuses, finished, now)
    chosen = pod.slot(slot)
    nonce = token or new_token()
    seal = pod.annotations.get(SEAL_ANNOTATION)  # a sealed pod: its runners derive the token (no stage can)
    record = StageRecord(
        generation=pod.generation + 1,
        slot=slot,
        image=stage.image,
        try_number=try_number,
        previous_container_id=chosen.container_id,
        swapped_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        action=action,
        previous_reason=chosen.waiting_reason,
        token=sealed_token(seal, nonce) if seal else nonce,
    )
    pod_name, namespace, labels = _identity(pod)
    return SwapPlan(
        action=action,
        stage=stage.name,
        slot=slot,
        generation=record.generation,
        record=record,
        pod_name=pod_name,
        namespace=namespace,
        labels=labels,
        patch=_swap_patch(pod, stage, record, statuses, nonce if seal else None),
        from_try=try_number,
        backoff_wait=wait,
        backoff_why=why,
    )


def _plan_existing(
    pod: ChainPod,
    stage: StageSpec,
    try_number: int,
    earlier_result: StageResult | None,
    finished: Collection[str] | None,
) -> SwapPlan | None:
    """The plan the stage's latest generation decides, None for a new generation: swapped in by this try, or
    by an earlier try and still swapping or running (that try's worker died) -> ``reattach``; an earlier
    try's generation that ended with exit 0 (`earlier_result`, see `earlier_generation`) -> ``adopt``; one
    that failed, was interrupted or never started -> None. A finished stage is never run again: an earlier
    try's generation that ended without `earlier_result` raises ResultUnavailableError."""
    record = pod.record(stage.name)
    if record is None:
        return None
    status = current_status(pod, stage.name)
    state = status.state
    if needs_log(status) and (finished is None or record.slot not in finished):
        state = StageState.RUNNING  # Ready from before an annotations-only swap: no result seen yet
    pod_name, namespace, labels = _identity(pod)
    kept: dict[str, Any] = {
        "stage": stage.name,
        "slot": record.slot,
        "generation": record.generation,
        "record": record,
        "pod_name": pod_name,
        "namespace": namespace,
        "labels": labels,
        "patch": None,
        "from_try": record.try_number,
    }
    if record.try_number == try_number:
        return SwapPlan(action="reattach", **kept)
    if earlier_result is not None and earlier_result.generation == record.generation:
        # the runner's result line is final, even while the slot does not show Ready yet
        return SwapPlan(action="adopt", result=earlier_result, **kept) if earlier_result.succeeded else None
    if state in _ON:
        return SwapPlan(action="reattach", **kept)
    if state is not StageState.FAILED_TO_START:
        raise ResultUnavailableError(
            f"try {record.try_number} of stage {stage.name!r} ran generation {record.generation} in "
            f"{record.slot}, which has ended ({state}), but its result is no longer readable: not "
            "running the stage again in case it succeeded. Clear the DAG run from the chain's setup "
            "task to run the chain again from its first stage"
        )
    return None


def _choose_slot(
    pod: ChainPod,
    stage: StageSpec,
    statuses: dict[str, StageStatus],
    finished: Collection[str] | None,
    now: datetime,
) -> tuple[str, SwapAction, float, str]:
    """(slot, action, expected back-off wait, why) for a new generation of `stage`. A slot is usable once its
    generation has finished. One that already holds the stage's image -> ``go`` (annotations only, no
    restart); else the slot whose restart on the stage's image the kubelet's back-off holds least
    (`restart_hold`), the slot the latest generation did not use on a tie -> ``patch``. SlotBusyError: no
    slot is free, or one is being prepared for this image and no free slot holds it (waiting costs less)."""
    last_slot = pod.slot_of(pod.generation)
    order = [other_slot(last_slot), last_slot] if last_slot else list(SLOTS)

    def usable(slot: str) -> bool:
        if finished is not None and slot in finished:
            return True
        return statuses[slot].state in _AVAILABLE and (statuses[slot].confirmed or finished is None)

    free = [slot for slot in order if usable(slot)]
    holding = [slot for slot in free if _holds(pod, slot, stage.image, statuses[slot])]
    if not holding:
        _wait_for_prepared(pod, stage, statuses, [slot for slot in order if slot not in free])
    if not free:
        raise _busy(stage, order[0], statuses[order[0]])
    if holding:
        return holding[0], "go", 0.0, ""
    patchable = [slot for slot in free if not _back_unseen(pod, slot, stage.image)]
    if not patchable:
        raise SlotBusyError(
            free[0],
            0,
            statuses[free[0]].state,
            f"{free[0]} is being prepared for {pod.slot(free[0]).image} and the kubelet still shows its "
            f"container on {stage.image}: stage {stage.name!r} waits for that restart (an image patch back "
            "to the image its container runs may change nothing the kubelet sees: no restart would come)",
        )
    waits = {slot: restart_hold(pod, slot, stage.image, now) for slot in patchable}
    slot = min(patchable, key=lambda s: waits[s][0])  # stable: the other slot first on a tie
    return slot, "patch", *waits[slot]


def _back_unseen(pod: ChainPod, slot: str, image: str) -> bool:
    """Whether an image patch of `slot` to `image` may restart nothing: the slot is prepared for another
    image and its status still shows a container running `image` (the one the prepare found, or one its
    runner restarted afresh before the kubelet saw the prepare: runner.sh `kc_renew`). The kubelet may not
    have synced the prepare yet: its pod worker syncs the newest pod it has when it gets to it
    (`pod_workers.go` `UpdatePod` replaces a pending update), so a prepare and a patch back in between leave a
    spec whose hash (name and image: `HashContainer`) is the running container's; `computePodActions`
    restarts nothing, and that container's runner leaves the patch's run spec (kc_r=1) to the restarted
    container that never comes (core/runner.sh `kc_poll`): the stage would wait out its swap timeout. (A
    container that has stopped is started again by the kubelet with the spec it then has, whose run spec it
    gets in env and runs.)"""
    view = pod.slot(slot)
    prepared = view.prepared
    return (
        prepared is not None
        and not same_image(prepared.image, image)
        and view.running
        and same_image(view.status_image or image, image)
    )


def _wait_for_prepared(
    pod: ChainPod, stage: StageSpec, statuses: dict[str, StageStatus], taken: list[str]
) -> None:
    """SlotBusyError when the kubelet is restarting one of the `taken` slots on this stage's image (a
    prepare): waiting for it costs less than a second restart elsewhere (and its prepare was made only
    when no other slot restarts sooner)."""
    coming = [
        slot
        for slot in taken
        if statuses[slot].state in _ON
        and (prepared := pod.slot(slot).prepared) is not None
        and prepared.image == stage.image
    ]
    if not coming:
        return
    current = statuses[coming[0]]
    raise SlotBusyError(
        coming[0],
        0,
        current.state,
        f"{coming[0]} is being prepared for {stage.image} (the kubelet restarts it: {current.reason}"
        f"{': ' + current.message if current.message else ''}): stage {stage.name!r} waits to start "
        "there without another restart",
        preparing=current.reason or current.state,
    )


def _busy(stage: StageSpec, slot: str, current: StageStatus) -> SlotBusyError:
    """No slot is free: the error naming `slot` (the one the swap would take first) and why it is busy."""
    detail = f" ({current.reason}: {current.message})" if current.reason else ""
    if current.state in _AVAILABLE:
        detail = " (its runner has not reported the end of that generation yet)"
    return SlotBusyError(
        slot,
        current.generation,
        current.state,
        f"{slot} is {current.state} with generation {current.generation}{detail}: "
        f"stage {stage.name!r} must wait for it to finish",
    )


def _swap_patch(
    pod: ChainPod,
    stage: StageSpec,
    record: StageRecord,
    statuses: dict[str, StageStatus],
    nonce: str | None = None,
) -> dict[str, Any]:
    """The swap's one patch, guarded by the snapshot's resourceVersion: the generation's annotations and
    the stage records (all of them, in one annotation: the snapshot's, with this stage's new record first,
    `podview.records_patch`), the slot's image for a ``patch``; it also retires (deletes) the other slot's
    run spec when that slot's generation has ended, so that no restart of it can run that generation
    again. A concurrent write of the records makes it fail (409): the caller plans again from a fresh read,
    so no record is lost."""
    slot, generation = record.slot, record.generation
    others = {name: kept for name, kept in pod.records.items() if name != stage.name}
    # a go into a slot prepared ahead names the prepare: only the container created for it runs the
    # generation, so the go need not wait for the status to show that container (`status._prepared_state`)
    chosen = pod.slot(slot)
    prepare = chosen.prepare_id if record.action == "go" and chosen.prepared is not None else ""
    annotations: dict[str, str | None] = {
        GENERATION_ANNOTATION: str(generation),
        **slot_annotations(
            slot,
            stage,
            generation,
            record.token,
            restart=record.action == "patch",
            nonce=nonce,
            prepare=prepare,
        ),
        **records_patch(pod, {stage.name: record, **others}),
    }
    other = other_slot(slot)
    if statuses[other].state not in _ON and pod.annotations.get(slot_annotation(other, RUN_FIELD)):
        # retired with the same patch: a restarted runner of the other slot finds nothing to run, whatever
        # its stage deleted or signalled (its generation has ended: its result is in its log and records)
        annotations[slot_annotation(other, RUN_FIELD)] = None
    metadata: dict[str, Any] = {"annotations": annotations}
    if pod.resource_version:
        metadata["resourceVersion"] = pod.resource_version
    patch: dict[str, Any] = {"metadata": metadata}
    if record.action == "patch":
        patch["spec"] = {"containers": [{"name": slot, "image": stage.image}]}
    return patch


def retire_unstarted(slot: str, generation: int) -> Guarded[bool]:
    """Delete `slot`'s run spec while it still holds `generation`, which cannot start there (FAILED_TO_START),
    as a guarded update; whether it did (ConflictError after `PREPARE_CONFLICTS` conflicts in a row: the
    caller says the run spec stayed). A go into a slot prepared ahead may be said before the slot's new
    container started: should that container start later (an image pulled at last), its runner would find
    the generation in env, after its task failed it (or the stage ran elsewhere since)."""
    key = slot_annotation(slot, RUN_FIELD)
    for _ in range(PREPARE_CONFLICTS):
        pod = yield READ
        if pod is None or pod.slot(slot).generation != generation or not pod.annotations.get(key):
            return False
        metadata: dict[str, Any] = {"annotations": {key: None}}
        if pod.resource_version:
            metadata["resourceVersion"] = pod.resource_version
        try:
            yield patch({"metadata": metadata})
        except ConflictError:
            continue
        return True
    raise ConflictError(f"the pod kept changing ({PREPARE_CONFLICTS} conflicts): its run spec stayed")


def retire_run_specs(pod: ChainPod) -> dict[str, Any] | None:
    """The patch that deletes both slots' run specs once the chain's run is over (its teardown keeps the pod:
    every stage task has ended), None when there is none; guarded by the snapshot's resourceVersion. A
    restarted runner of the kept pod then finds nothing to run, and no stage's command or env stays in the
    pod's annotations (``kubectl describe``); the stage records stay, for retries and the UI."""
    retired = {key: None for slot in SLOTS if pod.annotations.get(key := slot_annotation(slot, RUN_FIELD))}
    if pod.lost is not None or not retired:
        return None
    metadata: dict[str, Any] = {"annotations": retired}
    if pod.resource_version:
        metadata["resourceVersion"] = pod.resource_version
    return {"metadata": metadata}


@dataclass(frozen=True)
class PreparePlan:
    """Preparing the idle slot for the stage predicted to run next (`plan_prepare`).

    `patch` (None: nothing to do, `why` says why) sets the slot's image and clears its generation, stage
    and run spec in one resourceVersion-guarded patch: the kubelet restarts the slot on the image and its
    new runner parks with no generation, so nothing runs until a swap says go (annotations only).
    """

    slot: str
    stage: str
    image: str
    patch: dict[str, Any] | None
    why: str
    backoff_wait: float = 0.0
    """seconds the kubelet's restart back-off is expected to hold the prepare's restart"""


def plan_swap_unread(
    pod: ChainPod,
    stage: StageSpec,
    try_number: int,
    earlier_result: StageResult | None,
    known: Collection[str],
    unread: Collection[str],
) -> SwapPlan | None:
    """The plan `plan_swap` makes whatever the logs of the `unread` slots say about their generations' ends
    (`known`: the slots known to have finished), else None (read them). Only a ``go`` into another slot, the
    same with those slots finished or not, whose sizing would not shrink them either way (they are parked
    already: `sized_alike_idle_or_not`); the prepare after the go reads such a slot before restarting it."""
    if not all(sized_alike_idle_or_not(pod, slot) for slot in unread):
        return None
    try:
        plans = [
            plan_swap(pod, stage, try_number=try_number, earlier_result=earlier_result, finished=finished)
            for finished in (set(known), set(known) | set(unread))
        ]
    except (SlotBusyError, ResultUnavailableError):
        return None  # the logs decide
    plan, alike = plans
    return plan if plan.action == alike.action == "go" and plan.slot == alike.slot else None


def plan_prepare(
    pod: ChainPod,
    stage: str,
    image: str,
    *,
    running: str,
    now: datetime | None = None,
    finished: Collection[str] | None = None,
) -> PreparePlan:
    """Plan preparing the slot that is not `running` (where the current stage was just swapped in) for
    `stage` on `image`, the stage predicted to run next: the image patch its own swap would make, made now,
    so that its swap only has to say go.

    Nothing is done when a slot already holds `image` (its swap needs no restart anyway), when the
    idle slot is not idle (its generation has not ended, e.g. two stages at once; `finished` as for
    `plan_swap`), when `stage`'s own generation is on already, or when the kubelet's restart back-off would
    hold the idle slot's restart on that image longer than the running slot's (its swap would pick the
    running slot once free: preparing would make it wait). A restart held no longer than the other slot's is
    prepared: the wait passes while the current stage runs (`backoff_wait`, `why` say so).
    """
    idle = other_slot(running)

    def skip(why: str) -> PreparePlan:
        return PreparePlan(idle, stage, image, None, why)

    view = pod
    if view.lost is not None:
        return skip(view.lost)
    for slot in (running, idle):
        if view.slot(slot).image == image:
            return skip(f"{slot} already holds {image}: stage {stage!r} starts there with no restart")
    if view.record(stage) is not None and current_status(view, stage).state in _ON:
        return skip(f"stage {stage!r} is already swapped in")
    status = slot_status(view, idle)
    reported = finished is not None and idle in finished  # its generation's result line is in its log
    if not reported and (
        status.state is not StageState.FINISHED or not (status.confirmed or finished is None)
    ):
        return skip(f"{idle} is not idle ({status.state}, generation {status.generation})")
    now = now or datetime.now(UTC)
    wait, why = restart_hold(view, idle, image, now)
    there, _ = restart_hold(view, running, image, now)
    if wait > there:
        return skip(
            f"{why}; {running} would restart on it at once once free, so stage {stage!r}'s swap "
            "takes that one"
        )
    at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = view.slot(idle).prepare
    history = (*earlier.history, (earlier.image, earlier.at)) if earlier is not None else ()
    record = PrepareRecord(
        image=image,
        stage=stage,
        at=at,
        previous_container_id=view.slot(idle).container_id,
        previous_reason=view.slot(idle).waiting_reason,
        history=history[-PREPARE_HISTORY:],
        id=secrets.token_hex(8),
    )
    metadata: dict[str, Any] = {
        "annotations": {
            **{slot_annotation(idle, key): None for key in SLOT_FIELDS},  # deleted: no stage, no run spec
            slot_annotation(idle, GENERATION_FIELD): "0",
            slot_annotation(idle, PREPARED_FIELD): record.to_annotation(),
            # the new container gets it in env (wire.PREPARE_ENV): a go names it, no other runner takes it
            slot_annotation(idle, PREPARE_ID_FIELD): record.id,
        }
    }
    if view.resource_version:
        metadata["resourceVersion"] = view.resource_version
    patch = {"metadata": metadata, "spec": {"containers": [{"name": idle, "image": image}]}}
    if wait > 0:
        why = f"{why}: preparing now, that wait passes while the running stage runs"
    return PreparePlan(idle, stage, image, patch, why, backoff_wait=wait)


PREPARE_CONFLICTS = 3
"""conflicting updates in a row after which a prepare gives up (the next swap does the work)"""


def prepared_two_ahead(slot: str, image: str, stage: str, following: str) -> str:
    """The log line of a prepare two ahead (`prepare_two_ahead`)."""
    return (
        f"::kruise-chain:: prepare slot={slot} image={image} for the stage after next {stage!r} (two ahead: "
        f"the next stage {following!r} says go into {other_slot(slot)}): image patch (the kubelet restarts "
        f"{slot}; its runner parks with no generation until that stage's swap says go)"
    )


def plan_prepare_after(
    pod: ChainPod,
    stage: str,
    image: str,
    *,
    ended: str,
    generation: int,
    next_image: str,
    idle: Callable[[ChainPod, str], bool],
    now: datetime | None = None,
) -> PreparePlan:
    """Plan preparing two ahead: `ended` (slot X) has just run generation `generation` to its successful end;
    give it the image of `stage` on `image`, predicted to run after the next stage (on `next_image`), with
    the image patch `plan_prepare` makes with ``running`` the other slot (Y). The next stage then says go
    into Y while the kubelet restarts X, and its own prepare finds X holding `image` already.

    Only when X still holds `generation` (no swap took it since), Y holds (or is being prepared for)
    `next_image` and `idle` (the sizer's check: it holds no generation, or its generation's end is known)
    says nothing runs in Y, so that the next stage needs only Y; when neither slot holds `image`; and when
    the kubelet's restart back-off would not hold X's restart on it (`restart_hold`): a held restart
    would leave the stage after next waiting. The prepared slot holds no generation: a wrong prediction runs
    nothing and costs only that restart.
    """
    following = other_slot(ended)
    if pod.lost is not None:
        return PreparePlan(ended, stage, image, None, pod.lost)
    if (held := pod.slot(ended).generation) != generation:
        why = f"{ended} holds generation {held} since, not {generation}"
        return PreparePlan(ended, stage, image, None, why)
    if pod.slot(following).image != next_image:
        why = f"{following} does not hold the next stage's {next_image}: that stage may need {ended}"
        return PreparePlan(ended, stage, image, None, why)
    for slot in (ended, following):
        if pod.slot(slot).image == image:
            return PreparePlan(ended, stage, image, None, f"{slot} already holds {image}")
    if not idle(pod, following):
        why = f"{following} may still run a generation: the next stage may need {ended}"
        return PreparePlan(ended, stage, image, None, why)
    now = now or datetime.now(UTC)
    wait, why = restart_hold(pod, ended, image, now)
    if wait > 0:
        return PreparePlan(ended, stage, image, None, why, backoff_wait=wait)
    return plan_prepare(pod, stage, image, running=following, now=now, finished={ended})


def prepare_two_ahead(
    log: Callable[[str], None],
    slot: str,
    generation: int,
    ahead: tuple[str, str],
    then: tuple[str, str],
    idle: Callable[[ChainPod, str], bool],
    pod: ChainPod | None = None,
) -> Guarded[PreparePlan | None]:
    """Prepare two ahead, as a guarded update (`conflicts.run` in a task, `conflicts.arun` in a deferred
    stage's trigger): generation `generation` has just succeeded in `slot`, the next stage `ahead` (name,
    image) is to say go into the other slot: give `slot` the image of `then`, the stage predicted after it
    (`plan_prepare_after`), so that the kubelet restarts `slot` while Airflow starts the next task and that
    stage runs, instead of from that stage's go (a realistic restart, ~1 s, outlasts a short stage).

    For a go by exec only (the caller's rule): a go by annotation waits for the kubelet's sync of the pod,
    which `slot`'s restart would hold. One resourceVersion-guarded image patch planned from `pod` (the pod
    as the park or the size ahead left it, read since the stage ended; None: read it), planned again from
    a fresh read after a conflict (`PREPARE_CONFLICTS` tries): under in-place sizing, a prediction that
    needs no prepare costs no request. `idle`: the caller's check that the other slot runs nothing.
    Ahead-of-time work: whatever goes wrong is logged, never raised; a wrong prediction runs nothing (the
    prepared slot holds no generation) and costs only the restart."""
    stage, image = then
    try:
        for _ in range(PREPARE_CONFLICTS):
            pod = pod or (yield READ)
            if pod is None:
                log(f"::kruise-chain:: not preparing {slot} for stage {stage!r}: the chain pod is gone")
                return None
            prepare = plan_prepare_after(
                pod, stage, image, ended=slot, generation=generation, next_image=ahead[1], idle=idle
            )
            if prepare.patch is None:
                log(f"::kruise-chain:: not preparing {slot} two ahead for stage {stage!r}: {prepare.why}")
                return prepare
            try:
                yield patch(prepare.patch)
            except ConflictError:
                pod = None
                continue
            log(prepared_two_ahead(slot, image, stage, ahead[0]))
            return prepare
        log(f"::kruise-chain:: not preparing {slot} for stage {stage!r}: the pod kept changing")
    except Exception as err:  # ahead-of-time work never fails the stage that ended
        log(f"::kruise-chain:: not preparing {slot} for stage {stage!r}: {err}")
    return None
