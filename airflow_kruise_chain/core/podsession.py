"""One chain pod as a stage driver works on it: its reads and watches, a generation's recorded result, the
stop of a stage.

`PodSession` is the base of the driver (core/driver.py: swap, prepare, sizing) and of its follow loop
(core/followloop.py); it talks to the cluster through `api.ChainApi` and knows nothing of Airflow.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from datetime import UTC, datetime

from .api import ChainApi
from .constants import SLOTS
from .errors import ChainError, PodLostError
from .follow import REOPEN_DELAY, RESULT_COPY_WAIT, since_seconds
from .logpump import END, TIMEOUT, LogPump
from .output import TAIL_LINES, GenerationOutput
from .podview import ChainPod, StageRecord, lost_reason
from .status import (
    ResultMarker,
    StageResult,
    StageState,
    current_status,
    matches,
    parse_marker,
    slot_status,
)
from .swap import SwapPlan
from .watch import pod_watch, resource_version, watch_until
from .wire import STOP_FIELD, replay_note, replay_request, slot_annotation

COPY_POLL = 0.1
"""seconds between reads of a log whose result line's copy from the other stream is still to come"""

LOST_POLICY = (
    "a chain cannot go on without its pod (the scratch data of the earlier stages is gone with it): clear "
    "the DAG run from the chain's setup task to run the chain again from its first stage in a fresh pod"
)


def _lost_detail(pod: ChainPod | None) -> str:
    if pod is None:
        return "it was deleted (by someone, by an eviction, or with its node)"
    return lost_reason(pod) or "it cannot run stages"


class PodSession:
    """Reads, watches and stops against one chain pod, remembering what it saw."""

    def __init__(
        self, api: ChainApi, pod_name: str, namespace: str, *, log: Callable[[str], None] = lambda _line: None
    ) -> None:
        self.api = api
        self.pod_name = pod_name
        self.namespace = namespace
        self.log = log
        self.last_read: ChainPod | None = None
        """the chain pod as the driver last read it"""
        self._finished: set[tuple[str, int]] = set()  # (slot, generation) seen ended: never read again
        self._ends_logged: set[tuple[str, int]] = set()  # (stage, generation) whose end line is logged

    def lost(self, pod: ChainPod | None, doing: str) -> PodLostError:
        """The error for a chain pod that is gone or can no longer run stages."""
        return PodLostError(
            f"chain pod {self.namespace}/{self.pod_name} lost {doing}: {_lost_detail(pod)}; {LOST_POLICY}"
        )

    # -- reading ------------------------------------------------------------------------------------
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
        self.last_read = self.api.read_pod(self.pod_name, self.namespace)
        return self.last_read

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

        Read only for slots whose pod status cannot tell: a slot holding a generation is Ready while its
        runner serves it, running the stage too, or its runner is starting (see `StageStatus.confirmed`)."""
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

    def pod_change_until(
        self, pod: ChainPod, deadline: float, until: Callable[[ChainPod], bool]
    ) -> ChainPod | None:
        """The first later version of the pod for which `until` holds, as one watch sent it; None when
        `deadline` passed first or the pod is gone (the caller reads it)."""
        return self._pod_change(pod, deadline, lambda seen: seen is None or until(seen))[1]

    def _pod_change(
        self,
        pod: ChainPod,
        deadline: float,
        until: Callable[[ChainPod | None], bool] | None = None,
        *,
        remember: bool = True,
    ) -> tuple[bool, ChainPod | None]:
        """(whether the pod changed before `deadline`, its new snapshot: None if it was deleted); with
        `until`, the first change for which it holds (one watch for all the versions before it). `remember`:
        kept as `last_read` (not by a watch on another thread)."""
        watch, read = pod_watch(self.api, self.pod_name, self.namespace)
        changed, new = watch_until(
            watch,
            lambda seen: resource_version(seen) != pod.resource_version and (until is None or until(seen)),
            deadline,
            version=pod.resource_version,
            relist=read,
        )
        if not changed:
            return False, None
        if remember:
            self.last_read = new
        return True, new

    def log_end(self, result: StageResult) -> None:
        """Log the generation's end line, once (`on_kill`'s stop and the follow loop it interrupted both read
        the end of a stopped stage)."""
        if (result.stage, result.generation) in self._ends_logged:
            return
        self._ends_logged.add((result.stage, result.generation))
        self.log(result.end_line())

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
            result = self._logged_result(slot, generation, image, token, previous)
            if result is not None:  # a runner restarted (OOM kill) holds none of the output followed before
                return result if result.log_tail or not tail else replace(result, log_tail=list(tail))
        last = pod.slot(slot).last_terminated
        marker = parse_marker(last.message if last else "")
        if isinstance(marker, ResultMarker) and matches(marker, generation, token):
            return StageResult.from_marker(marker, image=image, log_tail=list(tail or ()))
        return None

    def _logged_result(
        self, slot: str, generation: int, image: str, token: str, previous: bool
    ) -> StageResult | None:
        """`generation`'s result in `slot`'s log (`previous`: its last container's). A runtime copies a
        container's two streams into the log apart, so the running container's log may hold the stdout result
        line before the stage's last stderr lines: it is read again, every `COPY_POLL` s for up to
        `RESULT_COPY_WAIT` s (the follow's wait for that copy), until the other stream's end is in too."""
        due = time.monotonic() + RESULT_COPY_WAIT
        while True:
            text = self.api.read_log(self.pod_name, self.namespace, slot, previous=previous)
            result, complete = StageResult.scan_log(
                text.splitlines(), generation=generation, image=image, token=token
            )
            if result is None or complete or previous or time.monotonic() >= due:
                return result
            time.sleep(COPY_POLL)

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

    def replay(self, slot: str, generation: int) -> None:
        """Ask `slot`'s runner to print `generation`'s result again from its records once parked on it (the
        slot's replay annotation, `wire.REPLAY_FIELD`): its line may have been rotated out of the log."""
        key, value = replay_request(slot, generation)
        self.api.patch_pod(self.pod_name, self.namespace, {"metadata": {"annotations": {key: value}}})
        self.log(replay_note(slot, generation, key))

    # -- stopping ------------------------------------------------------------------------------------
    def stop(self, stage: str, timeout: float | None = None) -> StageResult | None:
        """Stop `stage`'s latest generation if it has not ended; return its recorded result (None: nothing
        ran, or its end was not recorded within `timeout`, by default the pod's grace period + 20 s).

        The slot's stop annotation (`wire.STOP_FIELD`: the generation and the pod's grace period) asks
        its runner, which reads it while the stage runs: SIGTERM to the stage, SIGKILL to all of it after
        the grace period, result reason ``stopped``; the runner parks (no container restart, no
        ContainerRecreateRequest: the chain's identity needs nothing but its own pod). Whether the generation
        ended is the runner's result line only (`await_result`): a slot is Ready while its runner serves it,
        running the stage too, and the pod does not change when the stage ends.
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
        if (
            status.state not in (StageState.RUNNING, StageState.FINISHED)
            or status.generation != record.generation
        ):
            return None
        slot, generation = record.slot, record.generation
        result = self.recorded_result(pod, slot, generation, record.image, token=record.token)
        if result is None:  # not ended yet (as far as its log tells): ask its runner to stop it
            grace, key = max(0, math.ceil(pod.grace_period)), slot_annotation(slot, STOP_FIELD)
            self.api.patch_pod(
                pod.name, self.namespace, {"metadata": {"annotations": {key: f"{generation} {grace}"}}}
            )
            self.log(
                f"::kruise-chain:: stopping stage {stage!r} generation {generation} in {slot} "
                f"(annotation {key}: SIGTERM, SIGKILL after {grace}s)"
            )
            result = self.await_result(record, deadline)
        if result is None:
            self.log(
                f"::kruise-chain:: stage {stage!r} was told to stop; its end is not recorded yet: the runner "
                f"of {slot} printed no result line for generation {generation} within {timeout:g}s (the "
                "stop request stays on the pod; the slot's log says what the runner did)"
            )
            return None
        self.log_end(result)
        return result

    def settle_stops(self, timeout: float) -> list[StageResult]:
        """Wait (at most `timeout` seconds in all) for the result of each generation a stop was asked for
        (its slot's stop annotation names it) whose runner has not recorded it yet: before the pod is
        deleted, whose deletion would end it as ``terminated`` instead (the stage task's own wait may have
        been shorter, e.g. `on_kill`'s). Returns the results read; a result that does not come is logged."""
        pod = self.snapshot()
        if pod is None or pod.lost is not None:
            return []
        deadline = time.monotonic() + timeout
        results = []
        for slot in SLOTS:
            hosted = pod.slot(slot)
            asked = (pod.annotations.get(slot_annotation(slot, STOP_FIELD)) or "").split()
            record = hosted.record
            if record is None or not hosted.generation or asked[:1] != [str(hosted.generation)]:
                continue
            found = self.recorded_result(pod, slot, record.generation, record.image, token=record.token)
            result = found or self.await_result(record, deadline)
            if result is None:
                self.log(
                    f"::kruise-chain:: {slot} was told to stop generation {record.generation} (stage "
                    f"{hosted.stage!r}); its runner printed no result line for it within {timeout:g}s"
                )
                continue
            if found is None:
                self.log(
                    f"::kruise-chain:: stage {hosted.stage!r} generation {record.generation} in {slot} "
                    f"ended as asked: exit code {result.exit_code} ({result.reason})"
                )
            results.append(result)
        return results

    def await_result(self, record: StageRecord, deadline: float) -> StageResult | None:
        """`record`'s generation's result as its runner records it: its result line (generation, token) in
        its slot's log, followed live until `deadline` (monotonic). A stream that ends without it (a
        restarted container, a cut connection) is followed by the slot's history (a restarted runner prints
        it again; previous log, termination message), then opened again. None when it did not come in time
        or the pod is gone."""
        slot, generation = record.slot, record.generation
        output = GenerationOutput(generation, record.token)
        while time.monotonic() < deadline:
            since = since_seconds(record.swapped_at, datetime.now(UTC)) if record.action == "go" else None

            def stream(since: int | None = since) -> Iterable[str]:
                return self.api.follow_log(self.pod_name, self.namespace, slot, since_seconds=since)

            pump = LogPump(stream, f"kruise-chain-stop-{slot}")
            output.reopen()
            try:
                while output.result is None:
                    item = pump.next(deadline)
                    if item is TIMEOUT or item is END or isinstance(item, Exception):
                        break
                    output.feed(str(item))
            finally:
                pump.close()
            if output.result is not None:
                return StageResult.from_marker(output.result, image=record.image, log_tail=list(output.tail))
            pod = self.snapshot()
            if pod is None or pod.lost is not None:
                return None
            found = self.recorded_result(pod, slot, generation, record.image, output.tail, record.token)
            if found is not None:
                return found
            time.sleep(max(0.0, min(REOPEN_DELAY, deadline - time.monotonic())))
        return None
