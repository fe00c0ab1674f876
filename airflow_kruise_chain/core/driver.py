"""Running one stage of a chain against the API: swap it in, follow it, read its result, stop it.

The driver talks to the cluster through `api.ChainApi` (the provider's `KruiseHook` implements it), so it
knows Kubernetes and OpenKruise but nothing of Airflow.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from .api import ChainApi
from .constants import SLOTS, other_slot
from .errors import (
    ChainError,
    ConflictError,
    PodLostError,
    SlotBusyError,
    StageStartError,
    StageTimeoutError,
)
from .events import NO_EVENTS, StageEvents
from .follow import GenerationFollow, Next, Step
from .logpump import END, TIMEOUT, LogPump
from .output import TAIL_LINES, GenerationOutput
from .podview import ChainPod, Pod, lost_reason
from .sizing import BackgroundPark, SlotSizer
from .spec import StageSpec
from .status import (
    ResultMarker,
    StageResult,
    StageState,
    current_status,
    killed_by_kubelet,
    matches,
    parse_marker,
    slot_status,
    with_kill_reason,
)
from .swap import (
    PreparePlan,
    SwapPlan,
    earlier_generation,
    plan_prepare,
    plan_swap,
    plan_swap_unread,
)
from .watch import pod_watch, resource_version, watch_until
from .wire import STOP_FIELD, slot_annotation

__all__ = [
    "ChainApi",
    "ConflictError",
    "Detached",
    "StageDriver",
    "StageStartError",
    "StageTimeoutError",
    "Timeouts",
    "current_status",
]

PULLING = "ContainerCreating"
"""The waiting reason of a container whose image is being pulled (or whose container is being created)."""
LOST_POLICY = (
    "a chain cannot go on without its pod (the scratch data of the earlier stages is gone with it): clear "
    "the DAG run from the chain's setup task to run the chain again from its first stage in a fresh pod"
)


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


@dataclass(frozen=True)
class Detached:
    """`follow` left the stage running (its `detach_at` came first): `logged` lines of its output
    (`GenerationOutput.counted`) are in the log."""

    logged: int


def _lost_detail(pod: ChainPod | None) -> str:
    if pod is None:
        return "it was deleted (by someone, by an eviction, or with its node)"
    return lost_reason(pod) or "it cannot run stages"


def _swap_how(plan: SwapPlan) -> str:
    """How the swap starts the stage, for the log."""
    if plan.action == "go":
        return "annotations only (the slot already holds the image: its runner starts the stage, no restart)"
    if plan.backoff_wait > 0:
        return f"image patch; {plan.backoff_why}"
    return "image patch (the kubelet restarts the slot with the stage's image)"


class StageDriver:
    """Swaps a stage into the chain pod and follows it to its result."""

    def __init__(
        self, api: ChainApi, pod_name: str, namespace: str, *, log: Callable[[str], None] = lambda _line: None
    ) -> None:
        self.api = api
        self.pod_name = pod_name
        self.namespace = namespace
        self.log = log
        self.last_read: ChainPod | None = None
        """the chain pod as the driver last read it"""
        self._resized: ChainPod | None = None
        """the pod the next planning pass starts from instead of a read (the caller's, or the resizes')"""
        self._pump: LogPump | None = None  # the log stream followed last
        self._patched: Pod | None = None  # the swap patch's answer: waiting for the start begins from it
        self._finished: set[tuple[str, int]] = set()  # (slot, generation) seen ended: never read again
        self.on_started: Callable[[], None] | None = None
        """called once by `follow` when the stage's container runs (e.g. `prepare` the idle slot)"""
        self._swapped: tuple[Pod, set[str]] | None = None
        self.swap_requested_at: datetime | None = None
        """when the last swap's patch was sent (None: the swap found its generation, made no patch)"""
        """the pod the swap patch returned, and the slots its plan knew had finished"""

    def lost(self, pod: ChainPod | None, doing: str) -> PodLostError:
        """The error for a chain pod that is gone or can no longer run stages."""
        return PodLostError(
            f"chain pod {self.namespace}/{self.pod_name} lost {doing}: {_lost_detail(pod)}; {LOST_POLICY}"
        )

    # -- swapping ------------------------------------------------------------------------------------
    def read_pod(self) -> ChainPod:
        """The chain pod's snapshot (PodLostError when it does not exist)."""
        pod = self.snapshot()
        if pod is None:
            raise PodLostError(
                f"chain pod {self.namespace}/{self.pod_name} does not exist: it was deleted, evicted or "
                f"never created (did the chain's setup task run?); {LOST_POLICY}"
            )
        return pod

    def snapshot(self) -> ChainPod | None:
        """Read the chain pod once: its snapshot, None when it does not exist."""
        pod = self.api.read_pod(self.pod_name, self.namespace)
        self.last_read = None if pod is None else ChainPod.of(pod)
        return self.last_read

    def swap(
        self, stage: StageSpec, try_number: int, timeouts: Timeouts, pod: ChainPod | None = None
    ) -> SwapPlan:
        """Swap `stage` in, or find the generation that already runs it, and return the plan carried out.

        An earlier try's generation (its worker died) is followed while it runs and adopted if it ended with
        exit 0: a stage that finished is never run again. Waits while the slot it needs is still busy; a
        409 Conflict (a concurrent write) re-plans from a fresh read, so no update is lost or applied twice.
        `pod`: the pod as the caller has just read it (the first plan starts from it instead of a read).
        """
        self._resized = pod
        self.swap_requested_at = None
        started = time.monotonic()
        deadline = started + timeouts.swap
        conflicts = 0
        followed: StageResult | None = None  # the result of an earlier try's generation, followed to its end
        while True:
            pod, self._resized = self._resized or self.read_pod(), None
            earlier = earlier_generation(pod, stage.name, try_number)
            result = followed or (
                self.recorded_result(
                    pod, earlier.slot, earlier.generation, earlier.image, token=earlier.token
                )
                if earlier is not None
                else None
            )
            try:
                plan, finished = self.plan(pod, stage, try_number, result)
            except SlotBusyError as busy:
                # a slot prepared for this stage and still pulling its image: pull_timeout applies to the wait
                pulling = busy.preparing == PULLING
                if late := timeouts.ran_out(started, pulling):
                    if pulling:
                        raise StageTimeoutError.pull(*late, stage.image, stage.name, str(busy)) from None
                    raise StageTimeoutError(f"swap timeout ({timeouts.swap:g}s): {busy}") from None
                self.log(f"waiting: {busy}")
                # a result line changes nothing in the pod: look at the logs again soon
                self.wait_pod_change(pod, min(deadline, time.monotonic() + 0.5))
                continue
            if plan.action == "adopt":
                assert plan.result is not None
                self.log(
                    f"::kruise-chain:: adopting result of generation {plan.generation} from try "
                    f"{plan.from_try}, not re-running: stage {stage.name!r} already finished in {plan.slot} "
                    f"with exit code 0 at {plan.result.finished_at.isoformat()}"
                )
                return plan
            if plan.action == "reattach":
                if plan.from_try == try_number:
                    self.log(
                        f"reattaching to stage {stage.name!r} generation {plan.generation} in {plan.slot} "
                        f"(try {try_number} already swapped it in)"
                    )
                    return plan
                self.log(
                    f"::kruise-chain:: following generation {plan.generation} of stage {stage.name!r} from "
                    f"try {plan.from_try} in {plan.slot}: it is still running, not starting it again"
                )
                followed = self.follow(plan, timeouts)
                deadline = time.monotonic() + timeouts.swap
                continue  # its result decides, though the slot may not show Ready yet: adopt or run again
            previous = pod.record(stage.name)
            if result is not None and previous is not None:
                self.log(
                    f"::kruise-chain:: generation {result.generation} from try {previous.try_number} "
                    f"ended with exit code {result.exit_code} ({result.reason}): running stage "
                    f"{stage.name!r} again as a new generation"
                )
            assert plan.patch is not None
            if self.size_slot(pod, plan, deadline, finished):
                continue  # the resizes changed the pod: plan the guarded patch from a fresh read
            try:
                self.swap_requested_at = datetime.now(UTC)
                swapped = self.api.patch_pod(self.pod_name, self.namespace, plan.patch)
                self._patched = swapped
            except ConflictError:
                conflicts += 1
                if time.monotonic() > deadline:
                    raise StageTimeoutError(
                        f"swap timeout ({timeouts.swap:g}s): {conflicts} conflicting updates in a row"
                    ) from None
                continue
            self.log(
                f"::kruise-chain:: swap stage={stage.name} slot={plan.slot} generation={plan.generation} "
                f"image={stage.image} via {_swap_how(plan)}"
            )
            if plan.backoff_wait > 0:
                self.log(
                    f"::kruise-chain:: {plan.slot} will start about {plan.backoff_wait:g}s late: neither "
                    "slot could take the stage without a restart the kubelet holds back"
                )
            self._swapped = (swapped, finished)
            return plan

    def prepare(self, running: SwapPlan, stage: str, image: str) -> PreparePlan | None:
        """Prepare the idle slot for `stage` on `image`, predicted to run after `running`'s stage
        (`plan_prepare`): one resourceVersion-guarded image patch, planned again from a fresh read after a
        conflict (3 tries). Ahead-of-time work only: whatever goes wrong is logged, never raised (the next
        swap does the work)."""
        answer, finished = self._swapped or (None, set())
        swapped = ChainPod.of(answer) if answer is not None else None  # the pod as the swap's patch left it
        if swapped is not None and image in (swapped.slot(slot).image for slot in SLOTS):
            # nothing to prepare: no request needed to say so
            self.log(f"::kruise-chain:: not preparing: a slot already holds {image} (stage {stage!r})")
            return None
        try:
            for _ in range(3):
                # the swap's answer is fresh after a go; after a restart the kubelet has updated the pod since
                fresh = swapped if running.record.action == "go" else None
                pod, swapped = fresh or self.read_pod(), None
                idle = other_slot(running.slot)
                # read after the go when the swap did not need it; once finished, it stays finished
                done = finished if idle in finished else self.finished_slots(pod, {idle})
                prepare = plan_prepare(pod, stage, image, running=running.slot, finished=done)
                if prepare.patch is None:
                    self.log(f"::kruise-chain:: not preparing {prepare.slot}: {prepare.why}")
                    return prepare
                try:
                    self.api.patch_pod(self.pod_name, self.namespace, prepare.patch)
                except ConflictError:
                    continue
                self.log(
                    f"::kruise-chain:: prepare slot={prepare.slot} image={prepare.image} for the next stage "
                    f"{stage!r}: image patch (the kubelet restarts {prepare.slot}; its runner parks "
                    "with no generation until that stage's swap says go)"
                    + (f"; {prepare.why}" if prepare.backoff_wait > 0 else "")
                )
                return prepare
            self.log(f"::kruise-chain:: not preparing for stage {stage!r}: the pod kept changing")
        except Exception as err:  # ahead-of-time work never fails the running stage
            self.log(f"::kruise-chain:: not preparing for stage {stage!r}: {err}")
        return None

    def size_slot(self, pod: ChainPod, plan: SwapPlan, deadline: float, finished: set[str]) -> bool:
        """Size the slot for the plan's stage (`SlotSizer.size_for_swap`); True if it resized anything."""
        sizer = SlotSizer(self.api, self.pod_name, self.namespace, self.log)
        resized = sizer.size_for_swap(pod, plan.stage, plan.slot, plan.action == "patch", finished, deadline)
        self._resized = sizer.last
        return resized

    def park_slot(self, plan: SwapPlan) -> None:
        """The stage in `plan` has ended: shrink its slot to the parked minimum (in-place sizing only)."""
        self.park(plan.stage, plan.slot, plan.generation)

    def park(self, stage: str, slot: str, generation: int) -> None:
        """`SlotSizer.park_generation`; a failure is logged: the next swap parks the slot once it is idle."""
        self.start_park(stage, slot, generation).settle()

    def start_park(self, stage: str, slot: str, generation: int) -> BackgroundPark:
        """`park` on a thread: `settle` the returned park before the task returns."""
        api, name, ns, seen = self.api, self.pod_name, self.namespace, self.last_read
        return BackgroundPark(api, name, ns, self.log, stage, slot, generation, seen)

    def plan(
        self, pod: ChainPod, stage: StageSpec, try_number: int, result: StageResult | None
    ) -> tuple[SwapPlan, set[str]]:
        """`plan_swap` with the slots known to have finished (`finished_slots`), and that set. A slot whose
        end only its log can tell is read only when the plan depends on it (`plan_swap_unread`), the slot
        the last generation did not use first (a swap prefers it)."""
        known, unread = self._known_finished(pod)
        while unread:
            if (plan := plan_swap_unread(pod, stage, try_number, result, known, unread)) is not None:
                return plan, known
            slot = min(unread, key=lambda s: s == pod.slot_of(pod.generation))
            known, unread = known | self.finished_slots(pod, {slot}), unread - {slot}
        return plan_swap(pod, stage, try_number=try_number, earlier_result=result, finished=known), known

    def _known_finished(self, pod: ChainPod) -> tuple[set[str], set[str]]:
        """(slots this driver has seen finish, slots whose end only their log can tell): no request."""
        known, unknown = set[str](), set[str]()
        for slot, status in ((slot, slot_status(pod, slot)) for slot in SLOTS):
            ambiguous = status.state is StageState.RUNNING or (
                status.state is StageState.FINISHED and not status.confirmed
            )
            if status.generation and status.stage and ambiguous:
                (known if (slot, status.generation) in self._finished else unknown).add(slot)
        return known, unknown

    def finished_slots(self, pod: ChainPod, only: Collection[str] = SLOTS) -> set[str]:
        """The slots of `only` whose current generation's result line (generation, token) is in their log.

        Read only for slots whose pod status cannot tell: still not Ready (the readiness probe runs every
        second), or Ready from before an annotations-only swap (see `StageStatus.confirmed`)."""
        out, unknown = self._known_finished(pod)
        out &= set(only)
        for slot in sorted(unknown & set(only)):
            status = slot_status(pod, slot)
            record = pod.record(status.stage)
            token = record.token if record is not None else ""
            text = self.api.read_log(self.pod_name, self.namespace, slot, tail_lines=TAIL_LINES + 5)
            if any(
                isinstance(m := parse_marker(line), ResultMarker) and matches(m, status.generation, token)
                for line in text.splitlines()
            ):
                out.add(slot)
                self._finished.add((slot, status.generation))
        return out

    def wait_pod_change(self, pod: ChainPod, deadline: float) -> ChainPod | None:
        """Block until the pod changes (its new snapshot, None if deleted) or `deadline` passes (None)."""
        return self._pod_change(pod, deadline)[1]

    def _pod_change(self, pod: ChainPod, deadline: float) -> tuple[bool, ChainPod | None]:
        """(whether the pod changed before `deadline`, its new snapshot: None if it was deleted)."""
        watch, read = pod_watch(self.api, self.pod_name, self.namespace)
        changed, new = watch_until(
            watch,
            lambda seen: resource_version(seen) != pod.resource_version,
            deadline,
            version=pod.resource_version,
            relist=read,
        )
        if not changed:
            return False, None
        self.last_read = None if new is None else ChainPod.of(new)
        return True, self.last_read

    # -- following -----------------------------------------------------------------------------------
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
        watch-based. None when `detach_at` (monotonic) passes first.

        Raises StageStartError when it cannot start, StageTimeoutError naming the image pull timeout while
        the slot is still pulling (waiting in ContainerCreating), else the swap timeout.
        """
        swap_deadline = started + timeouts.swap
        pull_deadline = started + timeouts.pull if timeouts.pull is not None else swap_deadline
        pod, self._patched = (ChainPod.of(self._patched) if self._patched else self.snapshot()), None
        while True:
            step = follow.see(pod, time.monotonic())
            status = step.status
            assert status is not None
            if step.next in (Next.OPEN, Next.MOVED_ON):
                return step
            if step.next is Next.FAILED_TO_START:
                raise StageStartError(status, plan.record.image)
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
            new = self.wait_pod_change(pod, until if detach_at is None else min(until, detach_at))
            pod = new if new is not None else self.snapshot()

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
        broke the stream, or None when it ended without the result."""
        pump = self._open_stream(plan.slot, follow.since(datetime.now(UTC)))
        copy_until: float | None = None  # the result line is in: its other stream's copy is awaited
        while True:
            if copy_until is not None:  # the stage has ended: no watchdog
                item = pump.next(copy_until)
            else:
                until = min((t for t in (deadline, detach_at) if t is not None), default=None)
                item = pump.next(until)
                if item is TIMEOUT and until == detach_at:
                    pump.close()
                    return Detached(follow.output.counted)
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
            copy_until = step.at

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
            raise StageStartError(step.status, plan.record.image)
        return None

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
        if self._pump is not None:
            self._pump.close()

        def stream() -> Iterable[str]:
            return self.api.follow_log(self.pod_name, self.namespace, slot, since_seconds=since_seconds)

        self._pump = LogPump(stream, f"kruise-chain-log-{slot}")
        return self._pump

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

    def log_end(self, result: StageResult) -> None:
        self.log(
            f"::kruise-chain:: end stage={result.stage} generation={result.generation} "
            f"exit={result.exit_code} reason={result.reason} duration={result.duration_seconds:.3f}s "
            f"outputs={result.outputs_status}"
        )

    # -- results -------------------------------------------------------------------------------------
    def recorded_result(
        self,
        pod: ChainPod,
        slot: str,
        generation: int,
        image: str,
        tail: deque[str] | None = None,
        token: str = "",
    ) -> StageResult | None:
        """`generation`'s result, from `slot`'s log, previous log or last termination message.

        The runner prints it when the stage ends and again each time its container starts on a generation
        that already ended (from its records in scratch); None if none of them holds it (yet).
        """
        for previous in (False, True):
            if not previous and pod.slot(slot).generation != generation:
                continue
            text = self.api.read_log(self.pod_name, self.namespace, slot, previous=previous)
            result = StageResult.from_log(text.splitlines(), generation=generation, image=image, token=token)
            if result is not None:  # a runner restarted (OOM kill) holds none of the output followed before
                return result if result.log_tail or not tail else replace(result, log_tail=list(tail))
        last = pod.slot(slot).last_terminated
        marker = parse_marker(last.message if last else "")
        if isinstance(marker, ResultMarker) and matches(marker, generation, token):
            return StageResult.from_marker(marker, image=image, log_tail=list(tail or ()))
        return None

    def result_from_history(
        self, plan: SwapPlan, pod: ChainPod, tail: deque[str], required: bool = True
    ) -> StageResult | None:
        """The plan's result once its stream has ended (after a restart, or once the slot moved on)."""
        result = self.recorded_result(pod, plan.slot, plan.generation, plan.record.image, tail, plan.token)
        if result is None and required:
            raise ChainError(
                f"the result of stage {plan.stage!r} generation {plan.generation} is no longer "
                f"readable: {plan.slot} has been reused"
            )
        return result

    # -- stopping ------------------------------------------------------------------------------------
    def stop(self, stage: str, timeout: float | None = None) -> StageResult | None:
        """Stop `stage`'s latest generation if it is running; return its recorded result (None: nothing ran,
        or its end was not recorded within `timeout`, by default the pod's grace period + 20 s).

        The slot's stop annotation (`wire.STOP_FIELD`: the generation and the pod's grace period) asks
        its runner, which reads it while the stage runs: SIGTERM to the stage, SIGKILL to all of it after
        the grace period, result reason ``stopped``; the runner parks (no container restart, no
        ContainerRecreateRequest: the chain's identity needs nothing but its own pod).
        """
        pod = self.snapshot()
        record = pod.record(stage) if pod is not None else None
        if pod is None or record is None:
            return None
        if timeout is None:
            timeout = pod.grace_period + 20
        deadline = time.monotonic() + timeout
        status = current_status(pod, stage)
        while status.state is StageState.SWAPPING:  # about to start the stage: stop it once it runs
            new = self.wait_pod_change(pod, deadline)
            pod = new if new is not None else self.snapshot()
            if pod is None or time.monotonic() > deadline:
                self.log(
                    f"::kruise-chain:: could not stop stage {stage!r}: it did not start within {timeout:g}s"
                )
                return None
            status = current_status(pod, stage)
        if status.state is not StageState.RUNNING or status.generation != record.generation:
            return None
        grace, key = max(0, math.ceil(pod.grace_period)), slot_annotation(record.slot, STOP_FIELD)
        self.api.patch_pod(
            pod.name, self.namespace, {"metadata": {"annotations": {key: f"{record.generation} {grace}"}}}
        )
        self.log(
            f"::kruise-chain:: stopping stage {stage!r} generation {record.generation} in {record.slot} "
            f"(annotation {key}: SIGTERM, SIGKILL after {grace}s)"
        )
        while True:
            result = self.recorded_result(
                pod, record.slot, record.generation, record.image, token=record.token
            )
            if result is not None:
                self.log_end(result)
                return result
            new = self.wait_pod_change(pod, deadline)
            pod = new if new is not None else self.snapshot()
            if pod is None or time.monotonic() > deadline:
                self.log(f"::kruise-chain:: stage {stage!r} was told to stop; its end is not recorded yet")
                return None

    def run(self, stage: StageSpec, try_number: int, timeouts: Timeouts | None = None) -> StageResult:
        """Swap `stage` in and follow it to its result."""
        timeouts = timeouts or Timeouts()
        plan = self.swap(stage, try_number, timeouts)
        result = self.follow(plan, timeouts)
        assert isinstance(result, StageResult)  # no detach_at: followed to the end
        self.park_slot(plan)
        return result
