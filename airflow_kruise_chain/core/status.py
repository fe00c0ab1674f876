"""Reading a chain's progress: runner markers and stage states."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from .constants import SLOTS
from .image import same_image
from .lines import clip
from .podview import (
    FAILED_TO_START_REASONS,
    ChainPod,
    PrepareRecord,
    StageRecord,
)
from .wire import (  # noqa: F401 (re-exported: the runner's wire format lives in wire.py)
    MAX_OUTPUTS_DEPTH,
    Marker,
    ResultMarker,
    StartMarker,
    StreamMarker,
    load_outputs,
    matches,
    parse_marker,
)


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
    confirmed: bool = True
    """False for a FINISHED the pod cannot vouch for: a slot is Ready while its runner serves it, parked or
    running a stage (so that a healthy chain raises no probe failure: each is an `Unhealthy` warning event),
    so Ready says nothing of the slot's generation. Only the runner's result line for the generation (and
    its token) settles it. True for a slot with no generation (idle, or prepared ahead): nothing runs."""


def _doc(what: str) -> dict[str, str]:
    """A `StageResult` field's description in its XCom (docs/writing-chains.md's table is made of these)."""
    return {"doc": what}


@dataclass(frozen=True)
class StageResult:
    """The outcome of one stage run, as the operator reports it: its XCom `return_value` is `to_xcom`, every
    field below (each one's `doc` is its description in docs/writing-chains.md)."""

    stage: str = field(metadata=_doc("the stage's name"))
    generation: int = field(metadata=_doc("the chain's swap counter when this run was swapped in"))
    slot: str = field(metadata=_doc("the container that ran it: `slot-a` or `slot-b`"))
    image: str = field(metadata=_doc("the image it ran on"))
    exit_code: int = field(metadata=_doc("the stage's exit code (0: success)"))
    reason: str = field(
        metadata=_doc(
            "how it ended: `completed` (its command returned, whatever its exit code), `stopped` (the "
            "task's `on_kill` or `stage_timeout` asked the runner), `terminated` (the slot was signalled: "
            "the pod's deletion), `interrupted` (its container restarted while it ran), `lost-record` (never "
            "run again: its records are gone), `OOMKilled` (the kubelet: see `detail`)"
        )
    )
    started_at: datetime = field(metadata=_doc("when the stage's command started (ISO 8601, UTC)"))
    finished_at: datetime = field(metadata=_doc("when it ended (ISO 8601, UTC)"))
    duration_seconds: float = field(metadata=_doc("`finished_at - started_at`, in seconds"))
    outputs: dict[str, Any] = field(
        metadata=_doc(
            "the JSON object the stage wrote to `$CHAIN_OUTPUT` (at most 16 KiB); `{}` unless "
            "`outputs_status` is `ok`"
        ),
        default_factory=dict,
    )
    outputs_status: str = field(
        metadata=_doc("`ok`, `absent`, `too-big` or `invalid` (see below)"), default="absent"
    )
    log_tail: list[str] = field(
        metadata=_doc("the last lines of the stage's output (each at most about 2 KiB)"), default_factory=list
    )
    detail: str = field(
        metadata=_doc(
            "why the kubelet ended it, when it did (e.g. OOMKilled, with the slot's memory limit); else empty"
        ),
        default="",
    )

    @property
    def succeeded(self) -> bool:
        return self.exit_code == 0

    def end_line(self) -> str:
        """The task log's line for the generation's end."""
        return (
            f"::kruise-chain:: end stage={self.stage} generation={self.generation} exit={self.exit_code} "
            f"reason={self.reason} duration={self.duration_seconds:.3f}s outputs={self.outputs_status}"
        )

    def exit_line(self) -> str:
        """The task log's line for the stage's exit, as the stage task reports it."""
        return (
            f"::kruise-chain:: stage {self.stage} generation {self.generation} in {self.slot} exited "
            f"{self.exit_code} after {self.duration_seconds:.2f}s"
        )

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
        cls, lines: Iterable[str], *, generation: int, image: str, token: str = "", tail: int = 20
    ) -> StageResult | None:
        """The result of `generation` (swapped in with `token`) in a slot's log, with up to `tail` lines of
        the stage's own output. Marker-like lines of other generations or tokens count as output. The
        output runs on after the result line until its copy from the container's other stream.

        None when the log holds no result line for `generation` (the stage has not finished, or the log was
        rotated: fall back to the termination message via `parse_marker`).
        """
        return cls.scan_log(lines, generation=generation, image=image, token=token, tail=tail)[0]

    @classmethod
    def scan_log(
        cls, lines: Iterable[str], *, generation: int, image: str, token: str = "", tail: int = 20
    ) -> tuple[StageResult | None, bool]:
        """`from_log`'s result, and whether the log holds all of the stage's output (the result line's copy,
        or the stream end, from each of the container's streams)."""
        output: list[str] = []
        result: ResultMarker | None = None
        started = copies = 0
        for line in lines:
            marker = parse_marker(line)
            if not matches(marker, generation, token):
                output.append(line.rstrip("\n"))
            elif isinstance(marker, StartMarker) or (isinstance(marker, StreamMarker) and not marker.end):
                started += 1
                if started == 1:  # not at the other stream's begin: output may precede that
                    output.clear()
            elif isinstance(marker, (ResultMarker, StreamMarker)):
                if isinstance(marker, ResultMarker):
                    result = result or marker
                copies += 1
                if output and output[-1] == "":
                    output.pop()  # the runner ends a line the stage may have left open before its result
                if result is not None and copies >= result.streams:  # both streams' ends: all output is in
                    break
        if result is None:
            return None, False
        complete = copies >= result.streams
        return cls.from_marker(result, image=image, log_tail=output[-tail:] if tail > 0 else []), complete

    def to_xcom(self) -> dict[str, Any]:
        """A JSON-safe dict of every field: times in ISO 8601, lists copied."""
        return {f.name: _json_safe(getattr(self, f.name)) for f in fields(self)}


def _json_safe(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return list(value) if isinstance(value, list) else value


def _container_state(
    pod: ChainPod, slot: str, generation: int, stage: str | None, record: StageRecord | None
) -> StageStatus:
    """Classify `slot`'s container; `record` is the swap that put `generation` there (None: idle/unknown)."""
    previous_id = record.previous_container_id if record else None
    view = pod.slot(slot)
    if not view.has_status:
        return StageStatus(
            StageState.SWAPPING,
            slot,
            generation,
            stage,
            "",
            "ContainerStatusPending",
            f"no status for {slot} yet",
        )
    container_id = view.container_id
    context = (slot, generation, stage, container_id)
    reason = view.waiting_reason
    if reason:
        stale = record is not None and container_id == previous_id and reason == record.previous_reason
        if reason in FAILED_TO_START_REASONS and not stale:
            return StageStatus(StageState.FAILED_TO_START, *context, reason, view.waiting_message)
        return StageStatus(StageState.SWAPPING, *context, reason, view.waiting_message)
    same_container = record is not None and container_id == previous_id
    if same_container and record is not None and record.action != "go":
        return StageStatus(
            StageState.SWAPPING,
            *context,
            "Swapping",
            f"{slot} still shows the container it had before the swap",
        )
    if view.running:
        if view.serving:  # parked, or running the generation (only its log tells)
            return StageStatus(StageState.FINISHED, *context, confirmed=not generation)
        return StageStatus(StageState.RUNNING, *context)  # its runner is starting
    terminated = view.terminated
    return StageStatus(
        StageState.RUNNING,
        *context,
        (terminated.reason if terminated else "") or "Terminated",
        f"the runner exited (code {terminated.exit_code if terminated else None}); the kubelet restarts it",
    )


def _prepared_state(pod: ChainPod, slot: str, prepared: PrepareRecord) -> StageStatus:
    """State of a slot prepared ahead (no generation): SWAPPING until the kubelet has restarted it on the
    prepared image (a restart the kubelet's back-off holds included: it starts by itself), then FINISHED
    as soon as the status shows the NEW container running (another id than the one the prepare found),
    whether or not its startup probe has passed yet; FAILED_TO_START if the prepared image cannot start.

    Safe on a real kubelet, and up to a startup probe period sooner than `started`: the image patch makes
    `kuberuntime_manager.go` `computePodActions` put the old container in ContainersToKill and the new one in
    ContainersToStart, and `SyncPod` kills first (`killContainer` returns once the runtime stopped it) and
    only then starts (`startContainer`); the status shows the new container's id only once the PLEG's relist
    (`pleg/generic.go` `Relist`) saw it started, so the old runner is gone by then. `started` comes later
    still: the startup probe worker (`prober/worker.go` `doProbe`) probes a container only once the status
    manager's status shows it, at the worker's next tick. What a go needs of the new runner it gets without
    the probe: the run spec reaches it by the annotation (the downwardAPI volume it polls once it serves) or
    by `runner --go`, which waits until THIS container's runner serves (core/runner.sh). The status must
    also show the container on the prepared image (its ``image``): a runner that ends its container to start
    afresh (core/runner.sh `kc_renew`) may have the kubelet restart it on the old image before the kubelet
    sees the prepare, and that container, killed by the next sync, is not the prepared one; a runtime that
    reports the image otherwise keeps the startup probe's rule. A slot that holds a generation (idle after a
    stage, or running one) keeps `_container_state`'s rule."""
    record = StageRecord(
        generation=0,
        slot=slot,
        image=prepared.image,
        try_number=0,
        previous_container_id=prepared.previous_container_id,
        swapped_at=prepared.at,
        action="prepare",
        previous_reason=prepared.previous_reason,
    )
    status = _container_state(pod, slot, 0, None, record)
    if status.state is StageState.FAILED_TO_START and status.reason == "CrashLoopBackOff":
        last = pod.slot(slot).last_terminated
        stopped = last is not None and last.container_id == prepared.previous_container_id
        if stopped and last is not None and last.exit_code in (0, 137, 143):
            return replace(
                status,
                state=StageState.SWAPPING,
                message=f"{status.message} (the kubelet's restart back-off holds the restart that prepares "
                f"{slot} for {prepared.image}; it starts by itself)",
            )
    shown = pod.slot(slot)
    if shown.prepare_id and _before_shown(status):
        # a go names the prepare (`wire.run_spec` kc_p), which only the container created for it takes (its
        # env, resolved from the pod whose image it starts): the old container still running, one restarted
        # on the old image, or the new one not shown yet are all safe to say go to
        return replace(
            status,
            state=StageState.FINISHED,
            reason="",
            confirmed=True,
            message=f"{slot} is prepared for {prepared.image}: a go names the prepare, which only the "
            "container created for it runs",
        )
    on_it = same_image(shown.status_image, prepared.image)
    if status.state is StageState.RUNNING and shown.running and on_it:
        # the new container runs the prepared image (`_container_state` saw another id), its startup probe
        # not passed yet
        return replace(
            status,
            state=StageState.FINISHED,
            reason="",
            message=f"{slot} runs {prepared.image} (its startup probe has not passed yet: a go waits for "
            "the runner to serve)",
        )
    return status


_NOT_SHOWN_YET = frozenset({"Swapping", "ContainerCreating", "PodInitializing", "ContainerStatusPending"})


def _before_shown(status: StageStatus) -> bool:
    """Whether a prepared slot is on its way to its new container with nothing failed: the status still
    shows the old one (or none), or a container of the slot runs that is not serving yet."""
    if status.state is StageState.SWAPPING:
        return status.reason in _NOT_SHOWN_YET
    return status.state is StageState.RUNNING


def slot_status(pod: ChainPod | None, slot: str) -> StageStatus:
    """State of the generation `slot` hosts; an idle slot (generation 0) is FINISHED once Ready, a slot
    prepared ahead once the status shows the kubelet's new container on the prepared image running, before
    its startup probe passed (see `_prepared_state`)."""
    view = pod
    if view is None or view.lost is not None:
        return StageStatus(StageState.POD_LOST, slot, reason="PodLost", message=_lost_message(view))
    hosted = view.slot(slot)
    if hosted.prepared is not None:
        return _prepared_state(view, slot, hosted.prepared)
    return _container_state(view, slot, hosted.generation, hosted.stage, hosted.record)


def _lost_message(view: ChainPod | None) -> str:
    return "the chain pod does not exist" if view is None else view.lost or ""


def stage_status(pod: ChainPod | None, stage: str) -> StageStatus:
    """State of `stage`'s latest swap in the chain pod (`pod` None: the pod is gone)."""
    view = pod
    if view is None or view.lost is not None:
        return StageStatus(StageState.POD_LOST, stage=stage, reason="PodLost", message=_lost_message(view))
    record = view.record(stage)
    if record is None or record.slot not in SLOTS:
        return StageStatus(StageState.NOT_STARTED, stage=stage)
    current = view.slot(record.slot).generation
    if current != record.generation:
        return StageStatus(
            StageState.SUPERSEDED,
            record.slot,
            record.generation,
            stage,
            reason="Superseded",
            message=f"{record.slot} now hosts generation {current}; see the log or termination message",
        )
    return _container_state(view, record.slot, record.generation, stage, record)


def restart_backoff(pod: ChainPod | None, status: StageStatus) -> bool:
    """Whether a CrashLoopBackOff is only the kubelet's restart back-off after the swap's own kill.

    Restarting the same container again within Kubernetes' back-off window (10 s, doubling) makes the
    kubelet wait before starting it (an image patch back to an image the slot ran recently): the
    slot shows CrashLoopBackOff on the container the swap stopped, which exited cleanly (the parked runner
    exits 0 on SIGTERM; 137 after the grace period). That ends by itself; a crash of the stage's new container
    (a different container id, or an error exit) is a real failure to start.
    """
    view = pod
    if view is None or status.state is not StageState.FAILED_TO_START or status.reason != "CrashLoopBackOff":
        return False
    record = view.record(status.stage) if status.stage else None
    if record is None or not status.slot:
        return False
    last = view.slot(status.slot).last_terminated
    stopped = (last.container_id if last else None) or status.container_id
    if record.previous_container_id and stopped != record.previous_container_id:
        return False
    return last is not None and last.exit_code in (0, 137, 143)


def current_status(pod: ChainPod | None, stage: str) -> StageStatus:
    """`stage_status`, with the kubelet's restart back-off after our own kill counted as still swapping."""
    view = pod
    status = stage_status(view, stage)
    if restart_backoff(view, status):
        return replace(
            status,
            state=StageState.SWAPPING,
            message=f"{status.message} (the kubelet's restart back-off after the swap stopped {status.slot}; "
            "it starts again by itself)",
        )
    return status


def killed_by_kubelet(pod: ChainPod, slot: str, record: StageRecord) -> str:
    """Why the stage's own container (generation `record` in `slot`) was killed, runner and all, if the
    kubelet says so, else '': its OOM kill, or a signal from outside the pod (its pid 1, the runner, ended by
    a signal: exit code 128 + signal with reason Error, as runc's `ExitStatus` reports it and the kubelet's
    `toKubeContainerStatus` copies it), since the stage's swap. The runner then records the generation as
    exit 137 `interrupted` when it restarts: this is the cause, not the stage's own exit."""
    hosted = pod.slot(slot)
    last = hosted.last_terminated
    if last is None:
        return ""
    # an image patch's own kill stops the container the slot had before; after an annotations-only swap that
    # container is the one that ran the stage
    swapped_out = record.action != "go" and last.container_id == record.previous_container_id
    if swapped_out:
        return ""
    code = last.exit_code or 0
    if last.reason == "Error" and 128 < code <= 128 + 64 and _since(last.finished_at, record.swapped_at):
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return (
            f"its container ({slot}) was killed by {name} from outside the pod, runner and all (the "
            f"kubelet: exit code {code}, reason Error), not by the stage's own exit: the node's OOM killer "
            "or an agent on the node; the node's kernel log (dmesg) names the process killed"
        )
    if last.reason != "OOMKilled":
        return ""
    limit = ((hosted.resources or {}).get("limits") or {}).get("memory")
    return (
        f"OOMKilled (exit code {last.exit_code}): it used more memory than its slot's limit"
        f"{' of ' + str(limit) if limit else ''}; raise the stage's resources limits.memory"
    )


def with_kill_reason(result: StageResult, killed: str) -> StageResult:
    """`result`, `killed` its detail (and its reason `OOMKilled` for an OOM kill) when an interrupted stage
    was `killed` (`killed_by_kubelet`)."""
    if killed and result.reason == "interrupted":
        return replace(
            result, reason="OOMKilled" if killed.startswith("OOMKilled") else result.reason, detail=killed
        )
    return result


def _since(finished_at: str | None, swapped_at: str) -> bool:
    """Whether a termination at `finished_at` (the kubelet's, whole seconds) is not before `swapped_at`."""
    try:
        finished = datetime.fromisoformat((finished_at or "").replace("Z", "+00:00"))
        swapped = datetime.fromisoformat(swapped_at.replace("Z", "+00:00")).replace(microsecond=0)
    except ValueError:
        return False
    return finished >= swapped


def needs_log(status: StageStatus) -> bool:
    """Whether `status` is a FINISHED the pod alone cannot vouch for (see `StageStatus.confirmed`): read the
    slot's log and pass it to `confirm_from_log`."""
    return status.state is StageState.FINISHED and not status.confirmed


def confirm_from_log(pod: ChainPod | None, status: StageStatus, lines: Iterable[str]) -> StageStatus:
    """`status` confirmed by the runner's result line for its generation (and token) among `lines` of the
    slot's log, else RUNNING: the runner has not reported the end of that generation yet."""
    view = pod
    if not needs_log(status) or view is None or not status.stage:
        return status
    record = view.record(status.stage)
    token = record.token if record is not None else ""
    for line in lines:
        marker = parse_marker(line)
        if isinstance(marker, ResultMarker) and matches(marker, status.generation, token):
            return replace(status, confirmed=True)
    return replace(
        status,
        state=StageState.RUNNING,
        reason="AwaitingResult",
        message=f"{status.slot} shows Ready, but its runner has not reported generation {status.generation}",
    )


def stage_state(pod: ChainPod | None, stage: str) -> StageState:
    """Just the `StageState` of `stage_status`."""
    return stage_status(pod, stage).state
