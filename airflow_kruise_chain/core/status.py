"""Reading a chain's progress: runner markers, stage states, and Kruise job outcomes."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .constants import MARKER, SLOTS, slot_annotation
from .lines import clip
from .podview import (
    Pod,
    StageRecord,
    annotations,
    container_status,
    pod_lost_reason,
    slot_generation,
    stage_record,
    waiting_reason,
)

FAILED_TO_START_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "RegistryUnavailable",
        "SignatureValidationFailed",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreStartHookError",
        "PostStartHookError",
        "CrashLoopBackOff",
    }
)
"""Waiting reasons meaning the container cannot start as things stand."""

_MARKER_LINE = re.compile(re.escape(MARKER) + r" (start|result)((?: [a-z_]+=\S*)+)\s*$")
_FRACTION = re.compile(r"\.(\d+)Z$")


class StageState(StrEnum):
    """Where a stage (or the generation a slot hosts) stands."""

    NOT_STARTED = "not_started"
    SWAPPING = "swapping"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED_TO_START = "failed_to_start"
    SUPERSEDED = "superseded"
    POD_LOST = "pod_lost"


@dataclass(frozen=True)
class StageStatus:
    """A `StageState` with its context; `reason`/`message` come from Kubernetes when it gave any."""

    state: StageState
    slot: str | None = None
    generation: int = 0
    stage: str | None = None
    container_id: str = ""
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class StartMarker:
    """``::kruise-chain:: start gen=N stage=NAME slot=S at=TS``."""

    generation: int
    stage: str
    slot: str
    at: datetime


@dataclass(frozen=True)
class ResultMarker:
    """``::kruise-chain:: result gen=N ... outputs=B64|- outputs_status=S``.

    `outputs_status` is the runner's (``ok``, ``absent``, ``too-big``, ``no-base64``; ``truncated`` in a
    termination message, where the outputs are left to the log line) or ``invalid`` when the outputs are not
    a base64-encoded JSON object.
    """

    generation: int
    stage: str
    slot: str
    exit_code: int
    reason: str
    started_at: datetime
    finished_at: datetime
    outputs: dict[str, Any] | None
    outputs_status: str


Marker = StartMarker | ResultMarker


def _timestamp(text: str) -> datetime:
    """An RFC 3339 UTC time as the runner writes it, whole seconds or with up to nanoseconds."""
    fraction = _FRACTION.search(text)
    whole = text[: fraction.start()] if fraction else text.rstrip("Z")
    parsed = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    if fraction:
        parsed = parsed.replace(microsecond=int(fraction.group(1)[:6].ljust(6, "0")))
    return parsed


MAX_OUTPUTS_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in a stage's outputs (the object itself is level 1)."""


def _decode_outputs(encoded: str, status: str) -> tuple[dict[str, Any] | None, str]:
    if encoded == "-":
        return None, status or "absent"
    try:
        value = load_outputs(base64.b64decode(encoded, validate=True))
    except binascii.Error:
        value = None
    return (value, "ok") if value is not None else (None, "invalid")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} overflows a float")
    return value


def load_outputs(data: bytes) -> dict[str, Any] | None:
    """A stage's outputs as a JSON object XCom can carry, or None (outputs_status ``invalid``): not UTF-8
    JSON, not an object, NaN/Infinity (or a number that overflows to it), nested deeper than
    `MAX_OUTPUTS_DEPTH`, or a string holding a lone surrogate. Never raises for any input."""
    try:
        value = json.loads(data, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return None
        elif isinstance(item, (dict, list)):
            if depth > MAX_OUTPUTS_DEPTH:
                return None
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return value


def parse_marker(line: str) -> Marker | None:
    """The runner marker in `line` (it may follow a log timestamp or unterminated stage output), else None."""
    match = _MARKER_LINE.search(line)
    if match is None:
        return None
    fields = dict(item.split("=", 1) for item in match.group(2).split())
    try:
        generation = int(fields["gen"])
        if match.group(1) == "start":
            return StartMarker(generation, fields["stage"], fields["slot"], _timestamp(fields["at"]))
        outputs, outputs_status = _decode_outputs(
            fields.get("outputs", "-"), fields.get("outputs_status", "")
        )
        return ResultMarker(
            generation=generation,
            stage=fields["stage"],
            slot=fields["slot"],
            exit_code=int(fields["exit"]),
            reason=fields.get("reason", ""),
            started_at=_timestamp(fields["started"]),
            finished_at=_timestamp(fields["finished"]),
            outputs=outputs,
            outputs_status=outputs_status,
        )
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class StageResult:
    """The outcome of one stage run, as the operator reports it (XCom via `to_xcom`)."""

    stage: str
    generation: int
    slot: str
    image: str
    exit_code: int
    reason: str
    started_at: datetime
    finished_at: datetime
    duration_seconds: float
    outputs: dict[str, Any] = field(default_factory=dict)
    outputs_status: str = "absent"
    log_tail: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def from_marker(cls, marker: ResultMarker, *, image: str, log_tail: Iterable[str] = ()) -> StageResult:
        return cls(
            stage=marker.stage,
            generation=marker.generation,
            slot=marker.slot,
            image=image,
            exit_code=marker.exit_code,
            reason=marker.reason,
            started_at=marker.started_at,
            finished_at=marker.finished_at,
            duration_seconds=(marker.finished_at - marker.started_at).total_seconds(),
            outputs=dict(marker.outputs or {}),
            outputs_status=marker.outputs_status,
            log_tail=[clip(line) for line in log_tail],
        )

    @classmethod
    def from_log(
        cls, lines: Iterable[str], *, generation: int, image: str, tail: int = 20
    ) -> StageResult | None:
        """The result of `generation` in a slot's log, with up to `tail` lines of the stage's own output.

        None when the log holds no result line for `generation` (the stage has not finished, or the log was
        rotated: fall back to the termination message via `parse_marker`).
        """
        output: list[str] = []
        result: ResultMarker | None = None
        for line in lines:
            marker = parse_marker(line)
            if marker is None:
                output.append(line.rstrip("\n"))
            elif marker.generation == generation:
                if isinstance(marker, StartMarker):
                    output.clear()
                else:
                    result = marker
                    break
        if result is None:
            return None
        return cls.from_marker(result, image=image, log_tail=output[-tail:] if tail > 0 else [])

    def to_xcom(self) -> dict[str, Any]:
        """A JSON-safe dict."""
        return {
            "stage": self.stage,
            "generation": self.generation,
            "slot": self.slot,
            "image": self.image,
            "exit_code": self.exit_code,
            "reason": self.reason,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "duration_seconds": self.duration_seconds,
            "outputs": self.outputs,
            "outputs_status": self.outputs_status,
            "log_tail": list(self.log_tail),
        }


def _container_state(
    pod: Pod, slot: str, generation: int, stage: str | None, record: StageRecord | None
) -> StageStatus:
    """Classify `slot`'s container; `record` is the swap that put `generation` there (None: idle/unknown)."""
    previous_id = record.previous_container_id if record else None
    status = container_status(pod, slot)
    if status is None:
        return StageStatus(
            StageState.SWAPPING,
            slot,
            generation,
            stage,
            "",
            "ContainerStatusPending",
            f"no status for {slot} yet",
        )
    container_id = status.get("containerID") or ""
    state = status.get("state") or {}
    context = (slot, generation, stage, container_id)
    reason = waiting_reason(status)
    if reason:
        message = state["waiting"].get("message") or ""
        stale = record is not None and container_id == previous_id and reason == record.previous_reason
        if reason in FAILED_TO_START_REASONS and not stale:
            return StageStatus(StageState.FAILED_TO_START, *context, reason, message)
        return StageStatus(StageState.SWAPPING, *context, reason, message)
    if record is not None and container_id == previous_id:
        return StageStatus(
            StageState.SWAPPING,
            *context,
            "Swapping",
            f"{slot} still shows the container it had before the swap",
        )
    if "running" in state:
        return StageStatus(StageState.FINISHED if status.get("ready") else StageState.RUNNING, *context)
    terminated = state.get("terminated") or {}
    return StageStatus(
        StageState.RUNNING,
        *context,
        terminated.get("reason") or "Terminated",
        f"the runner exited (code {terminated.get('exitCode')}); the kubelet restarts it",
    )


def slot_status(pod: Pod | None, slot: str) -> StageStatus:
    """State of the generation `slot` hosts; an idle slot (generation 0) is FINISHED once Ready."""
    lost = pod_lost_reason(pod)
    if lost is not None or pod is None:
        return StageStatus(StageState.POD_LOST, slot, reason="PodLost", message=lost or "")
    generation = slot_generation(pod, slot)
    stage = annotations(pod).get(slot_annotation(slot, "stage")) or None
    record = stage_record(pod, stage) if generation and stage else None
    if record is not None and (record.generation, record.slot) != (generation, slot):
        record = None  # the stage has been swapped in again since, elsewhere
    return _container_state(pod, slot, generation, stage, record)


def stage_status(pod: Pod | None, stage: str) -> StageStatus:
    """State of `stage`'s latest swap in the chain pod (`pod` None: the pod is gone)."""
    lost = pod_lost_reason(pod)
    if lost is not None or pod is None:
        return StageStatus(StageState.POD_LOST, stage=stage, reason="PodLost", message=lost or "")
    record = stage_record(pod, stage)
    if record is None or record.slot not in SLOTS:
        return StageStatus(StageState.NOT_STARTED, stage=stage)
    current = slot_generation(pod, record.slot)
    if current != record.generation:
        return StageStatus(
            StageState.SUPERSEDED,
            record.slot,
            record.generation,
            stage,
            reason="Superseded",
            message=f"{record.slot} now hosts generation {current}; see the log or termination message",
        )
    return _container_state(pod, record.slot, record.generation, stage, record)


def restart_backoff(pod: Pod | None, status: StageStatus) -> bool:
    """Whether a CrashLoopBackOff is only the kubelet's restart back-off after the swap's own kill.

    Restarting the same container again within Kubernetes' back-off window (10 s, doubling) makes the
    kubelet wait before starting it (a ContainerRecreateRequest re-run of a slot, e.g. an Airflow retry): the
    slot shows CrashLoopBackOff on the container the swap stopped, which exited cleanly (the parked runner
    exits 0 on SIGTERM; 137 after the grace period). That ends by itself; a crash of the stage's new container
    (a different container id, or an error exit) is a real failure to start.
    """
    if pod is None or status.state is not StageState.FAILED_TO_START or status.reason != "CrashLoopBackOff":
        return False
    record = stage_record(pod, status.stage) if status.stage else None
    if record is None or not status.slot:
        return False
    last = ((container_status(pod, status.slot) or {}).get("lastState") or {}).get("terminated") or {}
    stopped = last.get("containerID") or status.container_id
    if record.previous_container_id and stopped != record.previous_container_id:
        return False
    return last.get("exitCode") in (0, 137, 143)


def current_status(pod: Pod | None, stage: str) -> StageStatus:
    """`stage_status`, with the kubelet's restart back-off after our own kill counted as still swapping."""
    status = stage_status(pod, stage)
    if restart_backoff(pod, status):
        return replace(
            status,
            state=StageState.SWAPPING,
            message=f"{status.message} (the kubelet's restart back-off after the swap stopped {status.slot}; "
            "it starts again by itself)",
        )
    return status


def stage_state(pod: Pod | None, stage: str) -> StageState:
    """Just the `StageState` of `stage_status`."""
    return stage_status(pod, stage).state


class Outcome(str):
    """An outcome name (``"running"``, ``"succeeded"``, ``"failed"``) that also carries a human `message`."""

    message: str

    def __new__(cls, state: str, message: str = "") -> Outcome:
        outcome = super().__new__(cls, state)
        outcome.message = message
        return outcome


def image_pull_job_outcome(job: Mapping[str, Any]) -> Outcome:
    """Outcome of an ImagePullJob: done once ``status.completionTime`` is set, successful by the counts."""
    status = job.get("status") or {}
    if not status.get("completionTime"):
        return Outcome("running", status.get("message") or "")
    desired = int(status.get("desired") or 0)
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    image = (job.get("spec") or {}).get("image", "")
    if desired == 0:
        return Outcome("failed", f"ImagePullJob for {image} matched no node: check the node name or selector")
    if failed == 0 and succeeded == desired:
        return Outcome("succeeded", f"{image} pulled on {succeeded} node(s)")
    nodes = ", ".join(status.get("failedNodes") or ()) or "unknown nodes"
    said = f" (OpenKruise: {status['message']})" if status.get("message") else ""
    return Outcome(
        "failed",
        f"pulling {image} failed on {nodes}: {failed} of {desired} pull(s) failed{said}. Check that the "
        "image exists and that the node can pull it (registry access, image_pull_secrets); kruise-daemon's "
        "error is in the node's NodeImage: kubectl get nodeimage <node> -o yaml",
    )


def crr_outcome(crr: Mapping[str, Any]) -> Outcome:
    """Outcome of a ContainerRecreateRequest, from ``status.containerRecreateStates[].phase``.

    The CRR phase only reaches ``Completed``; a container counts as Succeeded once its new instance is
    Ready, which for a slot means its stage has finished. So the stage's own state (the container id change)
    is the authority on whether the kill happened; a CRR failure only matters if the container never changed.
    """
    status = crr.get("status") or {}
    states = status.get("containerRecreateStates") or ()
    failed = [s for s in states if s.get("phase") == "Failed"]
    if failed:
        detail = "; ".join(f"{s.get('name')}: {s.get('message') or 'failed'}" for s in failed)
        return Outcome("failed", detail)
    if status.get("phase") != "Completed":
        return Outcome("running", status.get("message") or status.get("phase") or "Pending")
    if states and all(s.get("phase") == "Succeeded" for s in states):
        return Outcome("succeeded", status.get("message") or "")
    return Outcome("failed", status.get("message") or "completed without every container recreated")
