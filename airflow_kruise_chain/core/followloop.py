"""The blocking follow of one generation: wait for its start, stream its output, read its result, and carry
out what `GenerationFollow` (core/follow.py) says each read means.

`FollowLoop` sits between `PodSession` (reads, results, stop) and `StageDriver` (swap, prepare, sizing); the
triggerer's async loop over the same state machine is `triggers/output.py`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from .api import ChainApi
from .conflicts import run as run_guarded
from .errors import ChainError, StageStartError, StageTimeoutError
from .events import NO_EVENTS, StageEvents
from .follow import GenerationFollow, Next, Step
from .logpump import END, TIMEOUT, LogPump
from .output import GenerationOutput
from .podsession import PodSession
from .podview import ChainPod
from .status import StageResult, StageStatus, killed_by_kubelet, with_kill_reason
from .swap import SwapPlan, retire_unstarted

PULLING = "ContainerCreating"
"""The waiting reason of a container whose image is being pulled (or whose container is being created)."""


@dataclass
class Timeouts:
    """Seconds allowed for each phase of a stage (None: no limit of its own)."""

    swap: float = 600.0
    """from the swap request until the stage's new container runs (image pull included)"""
    execution: float | None = None
    """from the stage's start until its result (`stage_timeout`): the stage is stopped when it runs out"""
    pull: float | None = None
    """from the swap request, while the slot waits in ContainerCreating (pulling the stage's image)"""

    def ran_out(self, since: float, pulling: bool) -> tuple[str, float] | None:
        """The timeout (option name, seconds) that has run out now for a swap requested at `since`."""
        elapsed = time.monotonic() - since
        if pulling and self.pull is not None and self.pull <= self.swap and elapsed > self.pull:
            return "pull_timeout", self.pull
        return ("swap_timeout", self.swap) if elapsed > self.swap else None


class CapturedLines(Protocol):
    """A fast go's capture (`core.fastgo.Capture`)."""

    def lines(self) -> list[str]: ...


class CaptureSource(Protocol):
    """A fast go whose exec may give its generation's output and result once it ended
    (`core.fastgo.PendingGo`)."""

    @property
    def ended(self) -> bool: ...

    @property
    def capture(self) -> CapturedLines | None: ...

    def on_end(self, callback: Callable[[], None]) -> None: ...


@dataclass(frozen=True)
class Detached:
    """`follow` left the stage running (its `detach_at` came first): `logged` lines of its output
    (`GenerationOutput.counted`) are in the log."""

    logged: int


class FollowLoop(PodSession):
    """Follows a swapped-in generation to its result (`follow`)."""

    def __init__(
        self, api: ChainApi, pod_name: str, namespace: str, *, log: Callable[[str], None] = lambda _line: None
    ) -> None:
        super().__init__(api, pod_name, namespace, log=log)
        self._pump: LogPump | None = None  # the log stream followed last
        self._patched: ChainPod | None = None  # the swap patch's answer: waiting for the start begins from it
        self.on_started: Callable[[], None] | None = None
        """called once by `follow` when the stage's container runs (e.g. `prepare` the idle slot)"""
        self.swap_requested_at: datetime | None = None
        """when the last swap's patch was sent (None: the swap found its generation, made no patch)"""
        self.capture_go: CaptureSource | None = None
        """the fast go of the generation `follow` follows next, whose exec may give its output and result
        before the slot's log is readable (`wait_started`); taken or dropped by that follow"""

    def wait_started(
        self,
        plan: SwapPlan,
        follow: GenerationFollow,
        timeouts: Timeouts,
        started: float,
        detach_at: float | None = None,
        events: StageEvents = NO_EVENTS,
    ) -> Step | None:
        """Wait until the stage's new container exists (`Next.OPEN`) or the slot moved on (`Next.MOVED_ON`);
        watch-based. `Next.ENDED` with the lines to log when the fast go's capture (`capture_go`) came
        while the status still showed the slot's container from before its prepare. None when `detach_at`
        (monotonic) passes first.

        Raises StageStartError when it cannot start, StageTimeoutError naming the image pull timeout while
        the slot is still pulling (waiting in ContainerCreating), else the swap timeout.
        """
        swap_deadline = started + timeouts.swap
        pull_deadline = started + timeouts.pull if timeouts.pull is not None else swap_deadline
        pod, self._patched = self._patched or self.snapshot(), None
        while True:
            step = follow.see(pod, time.monotonic())
            status = step.status
            assert status is not None
            if step.next in (Next.OPEN, Next.MOVED_ON):
                return step
            if step.next is Next.FAILED_TO_START:
                raise self.cannot_start(plan, status)
            if step.next is Next.LOST:
                raise self.lost(pod, f"while swapping stage {plan.stage!r} in")
            detail = f"{status.reason or status.state}{': ' + status.message if status.message else ''}"
            if step.report:
                self.log(f"::kruise-chain:: {plan.slot} {detail}")
                events.waiting(plan.slot, status.reason, status.message)
            pulling, now, where = status.reason == PULLING, time.monotonic(), f"{plan.slot}: {detail}"
            if late := timeouts.ran_out(started, pulling):
                if pulling:
                    raise StageTimeoutError.pull(*late, plan.record.image, plan.stage, where)
                raise StageTimeoutError(
                    f"swap timeout ({timeouts.swap:g}s): stage {plan.stage!r} did not start in {where}"
                )
            if detach_at is not None and now >= detach_at:
                return None
            until = min(pull_deadline, swap_deadline) if pulling else swap_deadline
            until = until if detach_at is None else min(until, detach_at)
            if follow.shows_old_container(pod):  # one watch until the status shows the prepared container
                waited = self._shown_or_captured(pod, until, follow)
                if not isinstance(waited, ChainPod) and waited is not None:
                    captured = follow.read_whole(waited.lines())
                    if captured is not None:
                        return captured
                    waited = self.pod_change_until(
                        pod, until, lambda seen: not follow.shows_old_container(seen)
                    )
                new = waited
            else:
                new = self.wait_pod_change(pod, until)
            pod = new if new is not None else self.snapshot()

    def _shown_or_captured(
        self, pod: ChainPod, until: float, follow: GenerationFollow
    ) -> ChainPod | CapturedLines | None:
        """`pod_change_until` the status shows the prepared container, or the fast go's capture
        (`capture_go`) if its exec ends first with one: whichever comes first is read, the other dropped
        (the output is logged once, from the capture or from the log). The watch then runs on a thread of
        its own, left to end by itself (the status shows the container soon after, or `until`)."""
        go, self.capture_go = self.capture_go, None

        def shown(seen: ChainPod) -> bool:
            return not follow.shows_old_container(seen)

        if go is None:
            return self.pod_change_until(pod, until, shown)
        woken = threading.Event()
        seen: list[ChainPod | None] = []

        def watch() -> None:
            try:
                seen.append(
                    self._pod_change(pod, until, lambda new: new is None or shown(new), remember=False)[1]
                )
            finally:
                woken.set()

        thread = threading.Thread(target=watch, name="kruise-chain-status", daemon=True)
        thread.start()
        go.on_end(woken.set)
        woken.wait()
        if not seen and go.ended and (capture := go.capture) is not None:
            return capture
        thread.join()
        if seen and seen[0] is not None:
            self.last_read = seen[0]
        return seen[0] if seen else None

    def follow(
        self,
        plan: SwapPlan,
        timeouts: Timeouts,
        *,
        skip: int = 0,
        detach_at: float | None = None,
        events: StageEvents = NO_EVENTS,
    ) -> StageResult | Detached:
        """Stream the stage's output through `log` until its result line; survives container restarts.

        What the log and the pod mean is `GenerationFollow`'s (core/follow.py); this loop does its reads.
        An adopted plan returns its result at once. With `timeouts.execution`, a watchdog stops the stage
        (see `stop`) when it runs out, silent or not, and raises StageTimeoutError. `skip`: the first `skip`
        lines of the generation's output (`GenerationOutput`) were logged by an earlier reader: not logged
        again. `detach_at` (monotonic): a stage still running then is left running and
        `Detached` is returned, with how far its output was logged. `events` hears how it goes
        (`core.events`).
        """
        events.swapped(self.swap_requested_at)
        try:
            outcome = self._follow(plan, timeouts, skip, detach_at, events)
        except Exception as err:
            events.failed(err)
            raise
        finally:
            self._close_stream()
            self.capture_go = None  # this generation's, taken or not
        if isinstance(outcome, StageResult):
            events.ended(outcome)
        return outcome

    def _follow(
        self, plan: SwapPlan, timeouts: Timeouts, skip: int, detach_at: float | None, events: StageEvents
    ) -> StageResult | Detached:
        if plan.action == "adopt":
            assert plan.result is not None
            return plan.result
        follow = GenerationFollow(
            plan.stage,
            plan.slot,
            plan.generation,
            plan.token,
            swapped_at=plan.record.swapped_at,
            go=plan.record.action == "go",
            skip=skip,
        )
        step = self.wait_started(plan, follow, timeouts, time.monotonic(), detach_at, events)
        if step is None:
            return Detached(skip)
        hook, self.on_started = self.on_started, None
        if hook is not None:
            hook()
        if step.next is Next.ENDED:  # the fast go's capture, read before the log (`wait_started`)
            for line in step.lines:
                self.log(line)
            self.log(
                f"::kruise-chain:: generation {plan.generation} ended before the pod's status showed its "
                "container: its output and result came with the go's exec"
            )
            if step.started is not None:
                events.started(
                    step.started, pod.slot(plan.slot) if (pod := self.last_read) is not None else None
                )
            return self.ended(plan, follow.output)
        deadline = None if timeouts.execution is None else time.monotonic() + timeouts.execution
        pod = self.last_read
        while True:
            if step.next is Next.OPEN:
                streamed = self._stream(plan, follow, timeouts, deadline, detach_at, events)
                if isinstance(streamed, StageResult | Detached):
                    return streamed
                # the stream ended without the result (or the copy never came): ask the pod, unless it is in
                pod = self.snapshot() if follow.output.result is None else self.last_read
                step = follow.stream_ended(pod, time.monotonic())
                if step.next is Next.ENDED:
                    return self.ended(plan, follow.output)
                if step.next is not Next.LOST and streamed is not None:
                    raise streamed
            if step.next is not Next.OPEN:
                if (result := self._settle(plan, follow, pod, step)) is not None:
                    return result
                step, pod = self._between(plan, follow, pod, timeouts, deadline, events)

    def _stream(
        self,
        plan: SwapPlan,
        follow: GenerationFollow,
        timeouts: Timeouts,
        deadline: float | None,
        detach_at: float | None,
        events: StageEvents,
    ) -> StageResult | Detached | Exception | None:
        """Read one log stream of the slot into `follow`: the result once in, `Detached`, the exception that
        broke the stream, or None when it ended without the result. A stream silent for long without it asks
        the slot's runner for the result again (`Next.REPLAY`) and reads on."""
        pump = self._open_stream(plan.slot, follow.since(datetime.now(UTC)))
        copy_until: float | None = None  # the result line is in: its other stream's copy is awaited
        while True:
            if copy_until is not None:  # the stage has ended: no watchdog
                item = pump.next(copy_until)
            else:
                replay_at = follow.replay_at
                until = min((t for t in (deadline, detach_at, replay_at) if t is not None), default=None)
                item = pump.next(until)
                if item is TIMEOUT and until == detach_at:
                    pump.close()
                    return Detached(follow.output.counted)
                if item is TIMEOUT and until == replay_at:
                    if follow.tick(self.last_read, time.monotonic()).next is Next.REPLAY:
                        self.replay(plan.slot, plan.generation)
                    continue
                if item is TIMEOUT:
                    self.expire(plan, timeouts)
            if item is END or item is TIMEOUT:
                return None
            if isinstance(item, Exception):
                return item
            step = follow.read((str(item),), time.monotonic())
            for line in step.lines:  # lines an earlier reader logged are not logged again
                self.log(line)
            if step.started is not None:
                last = self.last_read
                events.started(step.started, last.slot(plan.slot) if last is not None else None)
            if step.next is Next.ENDED:
                return self.ended(plan, follow.output)
            copy_until = step.at if follow.output.result is not None else None  # not the replay time

    def _settle(
        self, plan: SwapPlan, follow: GenerationFollow, pod: ChainPod | None, step: Step
    ) -> StageResult | None:
        """After a stream ended without the result, or the pod said none will come: the result from the
        slot's history (a restarted runner prints it again), an error, or None (wait for the restart)."""
        if step.next is Next.LOST:
            raise self.lost(pod, f"while stage {plan.stage!r} ran (generation {plan.generation})")
        assert pod is not None
        tail = follow.output.tail
        if step.next is Next.MOVED_ON:
            return self.result_from_history(plan, pod, tail)
        killed = killed_by_kubelet(pod, plan.slot, plan.record)
        result = self.result_from_history(plan, pod, tail, required=False)
        if result is not None:
            return with_kill_reason(result, killed)
        if step.next is Next.FAILED_TO_START:
            assert step.status is not None
            if killed:  # the crash-loop back-off after the kill: the runner records it once restarted
                raise ChainError(
                    f"stage {plan.stage!r} (generation {plan.generation} in {plan.slot}) was killed: "
                    f"{killed}; last lines:\n" + "\n".join(list(tail)[-10:])
                )
            raise self.cannot_start(plan, step.status)
        return None

    def cannot_start(self, plan: SwapPlan, status: StageStatus) -> StageStartError:
        """The error of a generation whose container cannot start, once its run spec is retired (no later
        start of that container runs it: `swap.retire_unstarted`; a failure to retire is logged)."""
        try:
            run_guarded(retire_unstarted(plan.slot, plan.generation), self.api, self.pod_name, self.namespace)
        except Exception as e:  # the error below is what the task reports
            self.log(f"::kruise-chain:: could not retire the run spec of generation {plan.generation}: {e}")
        return StageStartError(status, plan.record.image)

    def _between(
        self,
        plan: SwapPlan,
        follow: GenerationFollow,
        pod: ChainPod | None,
        timeouts: Timeouts,
        deadline: float | None,
        events: StageEvents,
    ) -> tuple[Step, ChainPod | None]:
        """Between two streams: wait on the pod watch until `follow` opens a stream again (a restarted
        container, or the same one after `REOPEN_DELAY`) or says the follow ends; stops the stage when the
        execution `deadline` passes. Each waiting reason (e.g. a restart back-off) is logged once."""
        step = follow.tick(pod, time.monotonic())
        while True:
            status = step.status
            if step.report and status is not None:
                message = status.message
                self.log(
                    f"::kruise-chain:: {plan.slot} {status.reason}{': ' + message if message else ''} "
                    f"(stage {plan.stage!r} generation {plan.generation}: waiting for the kubelet to "
                    "restart it)"
                )
                events.waiting(plan.slot, status.reason, message)
            now = time.monotonic()
            if step.next is not Next.WAIT or pod is None:
                return step, pod
            if deadline is not None and now > deadline:
                self.expire(plan, timeouts)
            until = min(t for t in (step.at, deadline, now + 60) if t is not None)
            changed, new = self._pod_change(pod, until)
            if changed:
                pod = new
                step = follow.see(pod, time.monotonic())
            else:
                step = follow.tick(pod, time.monotonic())

    def ended(self, plan: SwapPlan, output: GenerationOutput) -> StageResult:
        """The result of `plan`'s generation, whose result line `output` has read."""
        assert output.result is not None
        result = StageResult.from_marker(output.result, image=plan.record.image, log_tail=list(output.tail))
        if result.reason != "completed":  # stopped by a signal: the pod going away, or a kill?
            pod = self.snapshot()
            if pod is None or pod.lost is not None:
                self.log_end(result)
                raise self.lost(
                    pod,
                    f"while stage {plan.stage!r} ran (generation {plan.generation}; it was "
                    f"stopped with the pod: exit code {result.exit_code}, {result.reason})",
                )
            # an interrupted generation's result, printed by its restarted runner: the restart
            # may reach the log before the pod status says why the kubelet killed it
            killed = killed_by_kubelet(pod, plan.slot, plan.record)
            settle = time.monotonic() + 2.0
            while not killed and result.reason == "interrupted" and time.monotonic() < settle:
                pod = self.wait_pod_change(pod, settle)
                if pod is None:
                    break
                killed = killed_by_kubelet(pod, plan.slot, plan.record)
            result = with_kill_reason(result, killed)
        self.log_end(result)
        return result

    def _open_stream(self, slot: str, since_seconds: int | None) -> LogPump:
        """Follow `slot`'s log on a thread (`LogPump`); the stream opened before is closed."""
        self._close_stream()

        def stream() -> Iterable[str]:
            return self.api.follow_log(self.pod_name, self.namespace, slot, since_seconds=since_seconds)

        self._pump = LogPump(stream, f"kruise-chain-log-{slot}")
        return self._pump

    def _close_stream(self) -> None:
        """Stop reading the stream followed last: a follow that ended leaves no reader of a slot's log
        behind (its thread ends at the stream's next line, which later generations of the slot print)."""
        pump, self._pump = self._pump, None
        if pump is not None:
            pump.close()

    def expire(self, plan: SwapPlan, timeouts: Timeouts) -> None:
        """Stop the stage that ran out of its execution time and raise the stage timeout."""
        self.log(
            f"::kruise-chain:: stage timeout: stage {plan.stage!r} generation {plan.generation} ran longer "
            f"than {timeouts.execution:g}s; stopping it"
        )
        result = self.stop(plan.stage)
        ended = (
            f"; it ended with exit code {result.exit_code} ({result.reason})"
            if result is not None
            else "; its end was not recorded yet"
        )
        raise StageTimeoutError(
            f"stage timeout (stage_timeout {timeouts.execution:g}s): stage {plan.stage!r} (generation "
            f"{plan.generation} in {plan.slot}) was still running; stopped it{ended}"
        )
