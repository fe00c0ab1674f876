"""Running one stage of a chain against the API: swap it in, prepare the idle slot, size and park slots.

`StageDriver` builds on `FollowLoop` (core/followloop.py: the follow of a generation to its result) over
`PodSession` (core/podsession.py: reads, watches, recorded results, the stop of a stage). It talks to the
cluster through `api.ChainApi` (the provider's `KruiseHook` implements it), so it knows Kubernetes and
OpenKruise but nothing of Airflow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from .api import ChainApi
from .conflicts import run as run_guarded
from .constants import SLOTS, other_slot
from .errors import ChainError, ConflictError, SlotBusyError, StageStartError, StageTimeoutError
from .followloop import PULLING, Detached, FollowLoop, Timeouts
from .podidentity import retire_patch
from .podsession import PodSession
from .podview import ChainPod
from .sizing import SETTLE_WAIT, BackgroundPark, SlotSizer, idle_by_pod, kubelet_settled, resize_unsettled
from .spec import StageSpec
from .status import StageResult, current_status, slot_status
from .swap import (
    PreparePlan,
    SwapPlan,
    earlier_generation,
    plan_prepare,
    plan_swap,
    plan_swap_unread,
    prepare_two_ahead,
)

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


RETIRE_CONFLICTS = 10
"""conflicting updates in a row after which retiring a stage's record gives up"""


def _swap_how(plan: SwapPlan) -> str:
    """How the swap starts the stage, for the log."""
    if plan.action == "go":
        return "annotations only (the slot already holds the image: its runner starts the stage, no restart)"
    if plan.backoff_wait > 0:
        return f"image patch; {plan.backoff_why}"
    return "image patch (the kubelet restarts the slot with the stage's image)"


class StageDriver(FollowLoop):
    """Swaps a stage into the chain pod and follows it to its result."""

    def __init__(
        self, api: ChainApi, pod_name: str, namespace: str, *, log: Callable[[str], None] = lambda _line: None
    ) -> None:
        super().__init__(api, pod_name, namespace, log=log)
        self._resized: ChainPod | None = None
        """the pod the next planning pass starts from instead of a read (the caller's, or the resizes')"""
        self._swapped: tuple[ChainPod, set[str]] | None = None
        """the pod the swap patch returned, and the slots its plan knew had finished"""

    # -- swapping ------------------------------------------------------------------------------------
    def swap(
        self,
        stage: StageSpec,
        try_number: int,
        timeouts: Timeouts,
        pod: ChainPod | None = None,
        on_go: Callable[[SwapPlan], Callable[[bool], None] | None] | None = None,
    ) -> SwapPlan:
        """Swap `stage` in, or find the generation that already runs it, and return the plan carried out.

        An earlier try's generation (its worker died) is followed while it runs and adopted if it ended with
        exit 0: a stage that finished is never run again. Waits while the slot it needs is still busy; a
        409 Conflict (a concurrent write) re-plans from a fresh read, so no update is lost or applied twice.
        `pod`: the pod as the caller has just read it (the first plan starts from it instead of a read).
        `on_go`: called with a ``go`` plan right before its patch (e.g. to open the fast go's exec meanwhile,
        `fastgo.open_go`); what it returns is called with whether that patch succeeded, however it ended.
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
                if busy.preparing is None:
                    # a result line changes nothing in the pod: look at the logs again soon
                    self.wait_pod_change(pod, min(deadline, time.monotonic() + 0.5))
                    continue
                # a slot prepared for this stage: its restart changes the pod; one watch until its state or
                # reason changes (the pull timeout applies from then on), planned again from that version
                pull = started + timeouts.pull if pulling and timeouts.pull is not None else deadline
                self._resized = self.prepared_moved(pod, busy.slot, min(deadline, pull))
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
            decide = on_go(plan) if on_go is not None and plan.action == "go" else None
            patched = False
            try:
                self.swap_requested_at = datetime.now(UTC)
                swapped = self.api.patch_pod(self.pod_name, self.namespace, plan.patch)
                self._patched = self.last_read = swapped
                patched = True
            except ConflictError:
                self._resized = None  # a concurrent write (e.g. another stage's record): plan from a read
                conflicts += 1
                if time.monotonic() > deadline:
                    raise StageTimeoutError(
                        f"swap timeout ({timeouts.swap:g}s): {conflicts} conflicting updates in a row"
                    ) from None
                continue
            finally:
                if decide is not None:
                    decide(patched)
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

    def prepared_moved(self, pod: ChainPod, slot: str, deadline: float) -> ChainPod | None:
        """The first version of the pod in which `slot` (being prepared: the kubelet restarts it) shows
        another state or waiting reason, as the watch sent it; None when `deadline` passed first or the pod
        is gone (the caller reads it)."""
        before = slot_status(pod, slot)

        def moved(seen: ChainPod | None) -> bool:
            now = slot_status(seen, slot)
            return seen is None or now.state is not before.state or now.reason != before.reason

        changed, new = self._pod_change(pod, deadline, moved)
        return new if changed else None

    def prepare(self, running: SwapPlan, stage: str, image: str) -> PreparePlan | None:
        """Prepare the idle slot for `stage` on `image`, predicted to run after `running`'s stage
        (`plan_prepare`): one resourceVersion-guarded image patch, planned again from a fresh read after a
        conflict (3 tries). Ahead-of-time work only: whatever goes wrong is logged, never raised (the next
        swap does the work)."""
        swapped, finished = self._swapped or (None, set())  # the pod as the swap's patch left it
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
                    self.last_read = self.api.patch_pod(self.pod_name, self.namespace, prepare.patch)
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

    def start_park(
        self,
        stage: str,
        slot: str,
        generation: int,
        ahead: tuple[str, str] | None = None,
        then: tuple[str, str] | None = None,
    ) -> BackgroundPark:
        """`park` on a thread: `settle` the returned park before the task returns. `ahead`: (stage, image)
        predicted to run next; once `slot` is parked, the other slot is sized for it
        (`SlotSizer.size_ahead`), when it holds that image and runs nothing. `then`: (stage, image)
        predicted to run after that one; then `slot` itself is prepared for it (`prepare_two_ahead`)."""
        api, name, ns, seen = self.api, self.pod_name, self.namespace, self.last_read
        size, sized = None, None
        if ahead is not None:
            session = PodSession(api, name, ns)  # its own: the thread shares nothing with this driver
            running: set[tuple[str, int]] = set()  # (slot, generation) its log showed running: read once

            def idle(pod: ChainPod, other: str) -> bool:
                # or its result line in its log
                if idle_by_pod(pod, other):
                    return True
                seen = (other, pod.slot(other).generation)
                if seen not in running and other in session.finished_slots(pod, {other}):
                    return True
                running.add(seen)
                return False

            def size(sizer: SlotSizer) -> None:
                try:
                    sizer.size_ahead(*ahead, slot, idle)
                finally:  # a failed size ahead is logged by the park; the prepare is independent of it
                    if then is not None:  # from the resizes' answer, made since the stage ended, or a read
                        pod = sizer.last
                        if pod is not None and resize_unsettled(pod):
                            # the kubelet still writes about the resize: plan from its last write, not to
                            # meet it (409, a read and the patch again)
                            until = time.monotonic() + SETTLE_WAIT
                            pod = session.pod_change_until(
                                pod, until, lambda seen: not resize_unsettled(seen)
                            )
                        steps = prepare_two_ahead(sizer.log, slot, generation, ahead, then, idle, pod)
                        run_guarded(steps, api, name, ns)

            sized = (*ahead, idle)  # the park's resize sizes ahead too when it can: then `size` asks nothing
        # the pod as this driver last saw it (a read, its watch, or its own patch's answer) guards the park,
        # unless its kubelet had more to report then
        fresh = seen is not None and kubelet_settled(seen)
        return BackgroundPark(api, name, ns, self.log, stage, slot, generation, seen, size, sized, fresh)

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

    def retire(self, stage: str, pod: ChainPod, generation: int) -> ChainPod:
        """Remove `stage`'s record of `generation` (`podidentity.retire_patch`, guarded by `pod`'s
        resourceVersion) and return the pod as patched. A 409 Conflict (a concurrent write, e.g. another
        stage's swap) retires again from a fresh read, so no record that write made is lost; a record of
        another generation (a swap of the stage since) is left alone."""
        for _ in range(RETIRE_CONFLICTS):
            record = pod.record(stage)
            if record is None or record.generation != generation:
                return pod
            try:
                return self.api.patch_pod(self.pod_name, self.namespace, retire_patch(pod, stage))
            except ConflictError:
                pod = self.read_pod()
        raise ChainError(
            f"could not retire generation {generation} of stage {stage!r}: the pod kept changing "
            f"({RETIRE_CONFLICTS} conflicting updates in a row)"
        )

    def run(self, stage: StageSpec, try_number: int, timeouts: Timeouts | None = None) -> StageResult:
        """Swap `stage` in and follow it to its result."""
        timeouts = timeouts or Timeouts()
        plan = self.swap(stage, try_number, timeouts)
        result = self.follow(plan, timeouts)
        assert isinstance(result, StageResult)  # no detach_at: followed to the end
        self.park_slot(plan)
        return result
