"""Following one generation of a stage: what its log lines and the chain pod's snapshots mean.

Sans I/O: `GenerationFollow` is told what its reader saw (a pod snapshot, log lines, the end of a log
stream, time passing) and answers what to do next (a `Step`); it reads nothing, waits for nothing and keeps no
clock (the reader passes its own monotonic `now`). Two thin loops drive it: the worker's, blocking
(`StageDriver.follow`, core/followloop.py), and the triggerer's, async (`StageOutputFollower`,
triggers/output.py). The constants and give-up rules below are the only ones either applies:

- a snapshot in which the pod is gone or cannot run stages ends the follow (`LOST`); one in which the stage
  cannot start (`FAILED_TO_START`), or its slot or its record moved on to another generation (`MOVED_ON`),
  too: the result, if any, is then in the slot's history (previous log, termination message);
- the log of the slot's container is opened once the stage runs there (`OPEN`), again for each new container
  (a restart), and again `REOPEN_DELAY` after a stream that ended without the result while its container
  still runs (a cut connection); a reader that can hand over (the triggerer) gives up after
  `HAND_OVER_AFTER` such reopens of one container (`GAVE_UP`);
- a stream is due to end `RESULT_COPY_WAIT` after the generation's result line (its copy from the other
  stream): then it ends with the result (`ENDED`). The pod never says that a generation ended (a slot is
  Ready while its runner serves it, running a stage too: see `StageStatus.confirmed`), only the log does;
- a stream that ended without the result, whose container no longer runs, leaves the result to the slot's
  history or to the restarted runner (`STOPPED`: a reader that can read the history does; then it waits);
- a stream silent for `SILENT_REPLAY_AFTER` without the result asks the slot's runner, once per container, to
  print the generation's result again from its records (`REPLAY`): a stage that ended while no one read its
  stream may have had its result line rotated out of the log since (the kubelet's `containerLogMaxSize`), and
  the pod cannot say it ended. The runner answers only once parked on that generation, whose end it would
  print anyway: a stage still running is not disturbed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from .output import TAIL_LINES, GenerationOutput
from .podview import ChainPod
from .status import StageState, StageStatus, current_status
from .wire import RUN_FIELD, StartMarker, names_prepare, slot_annotation

RESULT_COPY_WAIT = 5.0
"""seconds an open log stream may lag after the generation's result line, for its copy from the container's
other stream (printed right after it)."""
SILENT_REPLAY_AFTER = 120.0
"""seconds an open log stream may stay silent without the generation's result before its runner is asked to
print the result again from its records (once per container)"""
REOPEN_DELAY = 0.5
"""seconds before the log stream of a container that still runs is opened again after it ended without
the result (the connection was cut, or the kubelet has not reported the container's exit yet)"""
HAND_OVER_AFTER = 5
"""times a reader that can hand over (the triggerer, to the resumed task, which reads the slot's history)
opens the stream of one running container again without the result before it gives up"""


class Next(StrEnum):
    """What the reader does next."""

    WAIT = "wait"
    """wait for the next pod snapshot, log lines or stream end, or until `Step.at` (then `tick`)"""
    OPEN = "open"
    """(close the open stream, if any, and) open the slot's log stream, of container `Step.status`'s"""
    REPLAY = "replay"
    """ask the slot's runner to print the generation's result again from its records (`PodSession.replay`),
    keep reading the open stream, then wait (`Step.at`)"""
    ENDED = "ended"
    """the generation's result is in (`GenerationFollow.output.result`)"""
    STOPPED = "stopped"
    """the stream ended without the result and its container no longer runs: the result is in the slot's
    history, or will be printed by its restarted runner; then wait"""
    MOVED_ON = "moved_on"
    """the slot or the stage's record hosts another generation now: the result is in the slot's history"""
    LOST = "lost"
    """the chain pod is gone or can no longer run stages"""
    FAILED_TO_START = "failed_to_start"
    """the slot cannot start the stage's container (`Step.status` says why)"""
    GAVE_UP = "gave_up"
    """a stream of one running container ended `HAND_OVER_AFTER` times without the result"""


@dataclass(frozen=True)
class Step:
    """One answer of `GenerationFollow`."""

    next: Next
    status: StageStatus | None = None
    """the stage's status as last seen"""
    at: float | None = None
    """`WAIT`: call `tick` at this time (reader's monotonic clock) if nothing else comes first"""
    report: bool = False
    """the slot waits for a reason not reported since the last stream opened: report it (`status`'s reason
    and message) once"""
    lines: tuple[str, ...] = ()
    """`read`: the output lines to log (not logged by an earlier reader)"""
    started: StartMarker | None = None
    """`read`: the generation's start marker, read just now (again after a stream opened again)"""


TERMINAL = frozenset({Next.ENDED, Next.MOVED_ON, Next.LOST, Next.FAILED_TO_START, Next.GAVE_UP})
"""the steps after which the machine has nothing more to say"""


def since_seconds(swapped_at: str, now: datetime) -> int | None:
    """Seconds from one second before `swapped_at` (whole seconds, ``%Y-%m-%dT%H:%M:%SZ``) until `now`, as
    a log request's sinceSeconds: the stream skips the output of the slot's earlier generations but not the
    start of this one. None for a time it cannot read."""
    try:
        when = datetime.strptime(swapped_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return max(1, math.ceil((now - when).total_seconds()) + 1)


def _refuses(pod: ChainPod | None, stage: str, slot: str, container: str) -> bool:
    """Whether `container` is the container a slot had before its prepare, and `stage`'s go into that slot
    named the prepare (run spec ``kc_p``): it never runs the generation (its runner refuses it:
    core/runner.sh `kc_mine`), so its log is not opened; the kubelet serves the new container's log once its
    status shows it (`pods/log` reads the container the status names, `kubelet_pods.go`
    `GetKubeletContainerLogs`)."""
    record = pod.record(stage) if pod is not None else None
    if pod is None or record is None or record.action != "go":
        return False
    prepare = pod.slot(slot).prepare
    if prepare is None or prepare.previous_container_id != container:
        return False
    return names_prepare(pod.annotations.get(slot_annotation(slot, RUN_FIELD)) or "")


class GenerationFollow:
    """The follow of generation `generation` (swapped in with `token`) of `stage` in `slot`.

    `go`: swapped in annotations only at `swapped_at`, so the slot's container (and its log) predates the
    generation: a stream starts at `since` instead of the container's start. `skip`, `tail`: see
    `GenerationOutput`. `hand_over_after`: give up after that many reopens of one running container's stream
    (None: never, for a reader that has no one to hand over to).
    """

    def __init__(
        self,
        stage: str,
        slot: str,
        generation: int,
        token: str,
        *,
        swapped_at: str = "",
        go: bool = False,
        skip: int = 0,
        tail: int = TAIL_LINES,
        hand_over_after: int | None = None,
    ) -> None:
        self.stage = stage
        self.slot = slot
        self.generation = generation
        self.swapped_at = swapped_at if go else ""
        self.hand_over_after = hand_over_after
        self.output = GenerationOutput(generation, token, skip=skip, tail=tail)
        self.status: StageStatus | None = None
        self.streaming = ""
        """the container whose log stream is open ('' none)"""
        self.followed = ""
        """the container whose stream ended last without the result"""
        self.opened = ""
        """the container whose stream was opened last (its reopens are counted)"""
        self.reopened = 0
        self._due: float | None = None  # the open stream is due to end then
        self._heard: float | None = None  # the open stream's last line (or its opening)
        self.replayed = ""
        """the container whose runner was asked to print the result again"""
        self._reopen_at: float | None = None  # the followed container still ran: open it again then
        self._reported = ""

    @property
    def started(self) -> bool:
        """Whether a stream was opened: the stage's container ran."""
        return bool(self.opened)

    def since(self, now: datetime) -> int | None:
        """The sinceSeconds of a stream opened at `now` (wall clock), None: from the container's start."""
        return since_seconds(self.swapped_at, now) if self.swapped_at else None

    # -- inputs --------------------------------------------------------------------------------------
    def see(self, pod: ChainPod | None, now: float) -> Step:
        """A snapshot of the chain pod (None: it is gone)."""
        self.status = current_status(pod, self.stage)
        if (end := self._end(self.status)) is not None:
            return end
        return self._decide(pod, now)

    def read(self, lines: Iterable[str], now: float) -> Step:
        """Lines of the open stream, in order."""
        before = self.output.started
        fresh: list[str] = []
        for line in lines:
            fresh.extend(self.output.feed(line)[1])
        started = self.output.started if self.output.started is not before else None
        if self.output.complete:
            return Step(Next.ENDED, self.status, lines=tuple(fresh), started=started)
        if self.output.result is not None and self._due is None:
            self._due = now + RESULT_COPY_WAIT
        self._heard = now
        return Step(Next.WAIT, self.status, at=self._wake(), lines=tuple(fresh), started=started)

    def read_whole(self, lines: list[str]) -> Step | None:
        """The generation's lines all at once, start line to result line, read before any log stream (a
        fast go's capture, `core.fastgo.Capture`): `ENDED` with the lines to log, or None when they are not
        a whole output of this generation with its token (nothing taken: the log is read as before)."""
        if self.opened:
            return None
        shown = self.output.take_whole(lines)
        if shown is None:
            return None
        return Step(Next.ENDED, self.status, lines=tuple(shown), started=self.output.started)

    def stream_ended(self, pod: ChainPod | None, now: float) -> Step:
        """The open stream ended (or broke); `pod`: the chain pod read after it (None: gone)."""
        container, self.streaming, self._due = self.streaming, "", None
        if self.output.result is not None:  # the copy never came, or the stream ended after it: all there is
            return Step(Next.ENDED, self.status)
        self.status = current_status(pod, self.stage)
        if (end := self._end(self.status)) is not None:
            return end
        self.followed = container
        hosted = pod.slots.get(self.slot) if pod is not None else None
        if hosted is not None and hosted.container_id == container and hosted.running:
            self.reopened += 1
            if self.hand_over_after is not None and self.reopened > self.hand_over_after:
                return Step(Next.GAVE_UP, self.status)
            self._reopen_at = now + REOPEN_DELAY
            return Step(Next.WAIT, self.status, at=self._reopen_at)
        return Step(Next.STOPPED, self.status)

    def tick(self, pod: ChainPod | None, now: float) -> Step:
        """Time passed (a `Step.at`, or the reader's own wait) with `pod` as last seen."""
        if self.streaming and self._due is not None and now >= self._due:
            return Step(Next.ENDED, self.status)  # the result line's copy did not come in time
        if (at := self.replay_at) is not None and now >= at:
            self.replayed = self.streaming
            return Step(Next.REPLAY, self.status, at=self._wake())
        if self.status is None:
            return self.see(pod, now)
        return self._decide(pod, now)

    @property
    def replay_at(self) -> float | None:
        """When the open stream, silent without the result, asks its runner for it (None: not to ask)."""
        if not self.streaming or self.output.result is not None or self.replayed == self.streaming:
            return None
        return None if self._heard is None else self._heard + SILENT_REPLAY_AFTER

    def shows_old_container(self, pod: ChainPod | None) -> bool:
        """Whether `pod` still shows the slot's container from before its prepare, which refuses this
        generation (see `_refuses`), and nothing else to act on: a reader waits for a version that does not
        (one watch for the kubelet's writes before it)."""
        status = current_status(pod, self.stage)
        if self.streaming or self._end(status) is not None or not status.container_id:
            return False
        return _refuses(pod, self.stage, self.slot, status.container_id)

    # -- decisions -----------------------------------------------------------------------------------
    def _wake(self) -> float | None:
        return min((t for t in (self._due, self.replay_at) if t is not None), default=None)

    def _end(self, status: StageStatus) -> Step | None:
        if status.state is StageState.POD_LOST:
            return Step(Next.LOST, status)
        if status.state is StageState.FAILED_TO_START:
            return Step(Next.FAILED_TO_START, status)
        if status.state is StageState.SUPERSEDED or status.generation not in (0, self.generation):
            return Step(Next.MOVED_ON, status)
        return None

    def _decide(self, pod: ChainPod | None, now: float) -> Step:
        status = self.status
        assert status is not None
        if self.streaming:
            return Step(Next.WAIT, status, at=self._wake())
        hosted = pod.slots.get(self.slot) if pod is not None else None
        container = status.container_id
        if container and _refuses(pod, self.stage, self.slot, container):
            return Step(Next.WAIT, status)  # the status shows the new container at the kubelet's next sync
        if status.state in (StageState.RUNNING, StageState.FINISHED) and container:
            if container != self.followed:
                return self._open(container, now)
            if self._reopen_at is not None and hosted is not None and hosted.running:
                if now >= self._reopen_at:
                    return self._open(container, now)
                return Step(Next.WAIT, status, at=self._reopen_at)
        reason = status.reason if status.state is StageState.SWAPPING else ""
        report = bool(reason) and reason != self._reported
        if report:
            self._reported = status.reason
        return Step(Next.WAIT, status, report=report)

    def _open(self, container: str, now: float) -> Step:
        if container != self.opened:
            self.reopened = 0
        self.streaming = self.opened = container
        self._reopen_at = self._due = None
        self._heard = now
        self._reported = ""
        self.output.reopen()
        return Step(Next.OPEN, self.status)
