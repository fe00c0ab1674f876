"""Planning a swap (which slot, which generation, one patch) and the Kruise objects around it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from .constants import (
    CHAIN_LABEL,
    DAG_ID_LABEL,
    GENERATION_ANNOTATION,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    SLOTS,
    other_slot,
    stage_annotation,
)
from .errors import ChainError, PodLostError, SlotBusyError
from .image import alternate_reference, same_image
from .manifest import slot_annotations
from .podview import (
    Pod,
    StageRecord,
    container_spec,
    container_status,
    int_annotation,
    pod_lost_reason,
    slot_generation,
    stage_record,
    waiting_reason,
)
from .spec import StageSpec
from .status import StageResult, StageState, current_status, slot_status

KRUISE_API_VERSION = "apps.kruise.io/v1alpha1"
_AVAILABLE = (StageState.FINISHED, StageState.FAILED_TO_START)
_ON = (StageState.SWAPPING, StageState.RUNNING)
_IDENTITY_LABELS = (DAG_ID_LABEL, RUN_ID_LABEL, CHAIN_LABEL, MANAGED_BY_LABEL)

SwapAction = Literal["patch", "recreate", "reattach", "adopt"]


class ResultUnavailableError(ChainError):
    """An earlier try's generation of a stage ended, but its result can no longer be read."""


@dataclass(frozen=True)
class SwapPlan:
    """What to do to run a stage.

    - ``patch``: apply `patch` (strategic merge); the kubelet restarts the slot if its image changed (to
      the stage's image, or to its other spelling when the slot already runs it: see `image`), or starts it
      with the new annotations when it was not running.
    - ``recreate``: apply `patch` (annotations only), then create `build_crr()`: the slot runs the stage's
      image and no other spelling of it is known (no digest in its imageID, or a bare ``repo@sha256:D``),
      so only a ContainerRecreateRequest restarts the slot.
    - ``reattach``: no new swap (`patch` is None): follow generation `generation` in `slot`, which this try
      swapped in, or which an earlier try (`from_try`, its worker gone) swapped in and is still running.
      `needs_crr` tells whether that swap was a recreate (create the CRR again, idempotently by name, only if
      the stage is still SWAPPING on the previous container).
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
    needs_crr: bool
    from_try: int = 0
    """the try that swapped this generation in"""
    result: StageResult | None = None
    """the adopted result (``adopt`` only)"""
    image: str | None = None
    """the slot image the patch sets (None: unchanged); when the slot already held the stage's image
    (`same_image`), its other spelling (``repo:tag`` <-> ``repo:tag@sha256:D``): a spec change, so the
    kubelet restarts the slot at once, and no pull. Records and results keep the stage's own reference."""
    same_image: bool = False
    """the slot held the stage's image (under either spelling) before the swap"""

    @property
    def crr_name(self) -> str:
        return crr_name(self.pod_name, self.slot, self.generation)

    def build_crr(
        self, *, active_deadline_seconds: int = 300, ttl_seconds_after_finished: int = 600
    ) -> dict[str, Any]:
        """The ContainerRecreateRequest restarting this plan's slot (a deterministic name per generation).

        Its deadline only bounds the kill: the CRR stays Recreating while the new stage runs (the slot is not
        Ready until it finishes), so the stage's state, not this CRR, tells when the stage is done.
        """
        if not self.needs_crr:
            raise ValueError(f"a {self.action!r} swap of {self.slot} needs no ContainerRecreateRequest")
        return build_crr(
            self.crr_name,
            self.namespace,
            self.pod_name,
            self.slot,
            self.labels,
            active_deadline_seconds=active_deadline_seconds,
            ttl_seconds_after_finished=ttl_seconds_after_finished,
        )


def crr_name(pod_name: str, slot: str, generation: int, purpose: str = "") -> str:
    """Deterministic name of the ContainerRecreateRequest restarting (or stopping) `slot` for `generation`."""
    return f"{pod_name}-{slot}-g{generation}{'-' + purpose if purpose else ''}"


def build_crr(
    name: str,
    namespace: str,
    pod_name: str,
    slot: str,
    labels: Mapping[str, str],
    *,
    active_deadline_seconds: int = 300,
    ttl_seconds_after_finished: int = 600,
) -> dict[str, Any]:
    """A ContainerRecreateRequest restarting `slot` of the chain pod (kruise-daemon stops it, the kubelet
    starts it again)."""
    return {
        "apiVersion": KRUISE_API_VERSION,
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "podName": pod_name,
            "containers": [{"name": slot}],
            "strategy": {"failurePolicy": "Fail", "orderedRecreate": False, "minStartedSeconds": 0},
            "activeDeadlineSeconds": active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
        },
    }


def build_stop_crr(pod: Pod, record: StageRecord, *, active_deadline_seconds: int = 120) -> dict[str, Any]:
    """The ContainerRecreateRequest stopping the generation `record` describes (on_kill, stage timeout).

    kruise-daemon stops the slot (SIGTERM, then SIGKILL after the grace period); the runner records the
    stage as terminated (or, killed outright, as interrupted when it starts again), never runs it again,
    and parks.
    """
    pod_name, namespace, labels = _identity(pod)
    return build_crr(
        crr_name(pod_name, record.slot, record.generation, "stop"),
        namespace,
        pod_name,
        record.slot,
        labels,
        active_deadline_seconds=active_deadline_seconds,
    )


def _identity(pod: Pod) -> tuple[str, str, dict[str, str]]:
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    return (
        metadata.get("name", ""),
        metadata.get("namespace", ""),
        {k: labels[k] for k in _IDENTITY_LABELS if k in labels},
    )


def _slot_of(pod: Pod, generation: int) -> str | None:
    """The slot hosting `generation` (None for generation 0, before the first swap)."""
    return next((slot for slot in SLOTS if generation and slot_generation(pod, slot) == generation), None)


def earlier_generation(pod: Pod, stage: str, try_number: int) -> StageRecord | None:
    """The record of an earlier try's generation of `stage` that is no longer running, else None.

    Its result (the slot's log, previous log or termination message, all written by the runner from its
    records in scratch) decides between adopting it and running a new generation: pass it to `plan_swap`.
    """
    record = stage_record(pod, stage)
    if record is None or record.try_number == try_number:
        return None
    return None if current_status(pod, stage).state in _ON else record


def plan_swap(
    pod: Pod,
    stage: StageSpec,
    *,
    try_number: int,
    earlier_result: StageResult | None = None,
    now: datetime | None = None,
) -> SwapPlan:
    """Plan running `stage` (already validated) for Airflow try `try_number` in the chain pod `pod`.

    The stage's latest generation decides first: swapped in by this try, or by an earlier try and still
    swapping or running (that try's worker died) -> ``reattach``; an earlier try's generation that ended
    with exit 0 (`earlier_result`, see `earlier_generation`) -> ``adopt``; one that failed, was interrupted
    or never started -> a new generation. A finished stage is never run again: when an earlier try's
    generation ended but `earlier_result` is missing, raises ResultUnavailableError.

    Raises PodLostError if the pod cannot run stages, and SlotBusyError when the slot to use (the one the
    latest generation did not use) still runs or is still swapping. The patch carries
    ``metadata.resourceVersion``: a 409 Conflict means another swap won the race; re-read the pod and plan
    again.
    """
    lost = pod_lost_reason(pod)
    if lost is not None:
        raise PodLostError(lost)
    pod_name, namespace, labels = _identity(pod)
    record = stage_record(pod, stage.name)
    if record is not None:
        state = current_status(pod, stage.name).state
        kept: dict[str, Any] = {
            "stage": stage.name,
            "slot": record.slot,
            "generation": record.generation,
            "record": record,
            "pod_name": pod_name,
            "namespace": namespace,
            "labels": labels,
            "patch": None,
            "needs_crr": record.action == "recreate",
            "from_try": record.try_number,
        }
        if record.try_number == try_number:
            return SwapPlan(action="reattach", **kept)
        if earlier_result is not None and earlier_result.generation == record.generation:
            # the runner's result line is final, even while the slot does not show Ready yet
            if earlier_result.succeeded:
                return SwapPlan(action="adopt", result=earlier_result, **kept)
        elif state in _ON:
            return SwapPlan(action="reattach", **kept)
        elif state is not StageState.FAILED_TO_START:
            raise ResultUnavailableError(
                f"try {record.try_number} of stage {stage.name!r} ran generation {record.generation} in "
                f"{record.slot}, which has ended ({state}), but its result is no longer readable: not "
                "running the stage again in case it succeeded. Clear the DAG run from the chain's setup "
                "task to run the chain again from its first stage"
            )
    last = int_annotation(pod, GENERATION_ANNOTATION)
    last_slot = _slot_of(pod, last)
    slot = other_slot(last_slot) if last_slot else SLOTS[0]
    current = slot_status(pod, slot)
    if current.state not in _AVAILABLE:
        detail = f" ({current.reason}: {current.message})" if current.reason else ""
        raise SlotBusyError(
            slot,
            current.generation,
            current.state,
            f"{slot} is {current.state} with generation {current.generation}{detail}: "
            f"stage {stage.name!r} must wait for it to finish",
        )
    status = container_status(pod, slot) or {}
    slot_image = (container_spec(pod, slot) or {}).get("image") or ""
    image: str | None = stage.image  # what the patch sets; None: the slot keeps its image
    action: SwapAction = "patch"
    if slot_image == stage.image:
        # The same image: patch in its other spelling, a spec change, so the kubelet restarts the slot at
        # once. A CRR restart would wait out the kubelet's crash-loop back-off (a container it finds exited);
        # it is left for a running slot whose image has no other known spelling. A waiting slot with none
        # (never started) keeps its image: the kubelet starts it with the new annotations.
        image = alternate_reference(stage.image, slot_image, status.get("imageID") or "")
        if image is None and "running" in (status.get("state") or {}):
            action = "recreate"
    generation = last + 1
    new_record = StageRecord(
        generation=generation,
        slot=slot,
        image=stage.image,
        try_number=try_number,
        previous_container_id=status.get("containerID") or "",
        swapped_at=(now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        action=action,
        previous_reason=waiting_reason(status),
    )
    metadata: dict[str, Any] = {
        "annotations": {
            GENERATION_ANNOTATION: str(generation),
            **slot_annotations(slot, stage, generation),
            stage_annotation(stage.name): new_record.to_annotation(),
        }
    }
    resource_version = (pod.get("metadata") or {}).get("resourceVersion")
    if resource_version:
        metadata["resourceVersion"] = resource_version
    patch: dict[str, Any] = {"metadata": metadata}
    if image is not None:
        patch["spec"] = {"containers": [{"name": slot, "image": image}]}
    return SwapPlan(
        action=action,
        stage=stage.name,
        slot=slot,
        generation=generation,
        record=new_record,
        pod_name=pod_name,
        namespace=namespace,
        labels=labels,
        patch=patch,
        needs_crr=action == "recreate",
        from_try=try_number,
        image=image,
        same_image=same_image(slot_image, stage.image),
    )


def image_pull_job_name(prefix: str, image: str, attempt: int = 1) -> str:
    """Deterministic name (at most 63 characters) of the ImagePullJob for `image` in prewarm try `attempt`:
    a replay of the same try finds its own job; a retry makes a new one instead of finding a failed one."""
    digest = hashlib.sha256(f"{image}\n{attempt}".encode()).hexdigest()[:10]
    return f"{prefix[:47].rstrip('-.')}-pull-{digest}"


def build_image_pull_job(
    name: str,
    namespace: str,
    image: str,
    *,
    node_name: str,
    parallelism: int = 1,
    timeout_seconds: int = 600,
    backoff_limit: int = 3,
    active_deadline_seconds: int | None = None,
    ttl_seconds_after_finished: int = 600,
    image_pull_policy: Literal["IfNotPresent", "Always"] = "IfNotPresent",
    pull_secrets: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    api_version: str = KRUISE_API_VERSION,
) -> dict[str, Any]:
    """An ImagePullJob prewarming `image` on the node `node_name` (the chain pod's node).

    `active_deadline_seconds` defaults to room for every attempt (``timeout * (backoff_limit + 1)``); the
    webhook requires it to be at least `timeout_seconds`. Requires Kruise's ImagePullJobGate feature gate.
    """
    if not node_name:
        raise ValueError("node_name is required: an ImagePullJob without a node would target every node")
    if active_deadline_seconds is None:
        active_deadline_seconds = timeout_seconds * (backoff_limit + 1)
    if active_deadline_seconds < timeout_seconds:
        raise ValueError(
            f"active_deadline_seconds ({active_deadline_seconds}) must be >= "
            f"timeout_seconds ({timeout_seconds})"
        )
    spec: dict[str, Any] = {
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "parallelism": parallelism,
        "selector": {"names": [node_name]},
        "pullPolicy": {"timeoutSeconds": timeout_seconds, "backoffLimit": backoff_limit},
        "completionPolicy": {
            "type": "Always",
            "activeDeadlineSeconds": active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
        },
    }
    if pull_secrets:
        spec["pullSecrets"] = list(pull_secrets)
    return {
        "apiVersion": api_version,
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }
