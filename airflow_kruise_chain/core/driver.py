"""Running one stage of a chain against the API: swap it in, follow it, read its result.

The driver talks to the cluster through `ChainApi` (the provider's `KruiseHook` implements it), so it knows
Kubernetes and OpenKruise but nothing of Airflow.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from .errors import ChainError, PodLostError, SlotBusyError
from .podview import Pod, container_status, stage_record
from .spec import StageSpec
from .status import (
    ResultMarker,
    StageResult,
    StageState,
    StageStatus,
    StartMarker,
    crr_outcome,
    parse_marker,
    stage_status,
)
from .swap import SwapPlan, plan_swap

CRR_PLURAL = "containerrecreaterequests"
TAIL_LINES = 20


class ConflictError(ChainError):
    """A conditional write lost a race (409 Conflict): re-read and try again."""


class StageStartError(ChainError):
    """The stage's container could not start (image pull failure, crash loop, bad config)."""

    def __init__(self, status: StageStatus, image: str = "") -> None:
        hint = _START_HINTS.get(status.reason, "")
        super().__init__(
            f"stage {status.stage!r} could not start in {status.slot} (generation {status.generation}"
            f"{', image ' + image if image else ''}): {status.reason}: {status.message}{hint}"
        )
        self.status = status
        self.image = image


_PULL_HINT = (
    "; check that the image reference exists and that the chain's image_pull_secrets give access to its "
    "registry"
)
_START_HINTS = {
    "ErrImagePull": _PULL_HINT,
    "ImagePullBackOff": _PULL_HINT,
    "InvalidImageName": "; fix the image reference",
    "ErrImageNeverPull": "; with image_pull_policy='Never' the image must already be on the node",
}


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


class StageTimeoutError(ChainError):
    """A stage exceeded one of its timeouts; the message names which."""


class ChainApi(Protocol):
    """What the driver needs from a Kubernetes client."""

    def read_pod(self, name: str, namespace: str) -> dict[str, Any] | None: ...

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def create_kruise(self, plural: str, body: dict[str, Any], namespace: str) -> dict[str, Any]: ...

    def get_kruise(self, plural: str, name: str, namespace: str) -> dict[str, Any] | None: ...

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any] | None]: ...

    def follow_log(self, name: str, namespace: str, container: str) -> Iterator[str]: ...

    def read_log(
        self,
        name: str,
        namespace: str,
        container: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str: ...


@dataclass
class Timeouts:
    """Seconds allowed for each phase of a stage (None: no limit)."""

    swap: float = 600.0
    """from the swap request until the stage's new container runs (image pull included)"""
    execution: float | None = None
    """from the stage's start until its result"""


class StageDriver:
    """Swaps a stage into the chain pod and follows it to its result."""

    def __init__(
        self, api: ChainApi, pod_name: str, namespace: str, *, log: Callable[[str], None] = lambda _line: None
    ) -> None:
        self.api = api
        self.pod_name = pod_name
        self.namespace = namespace
        self.log = log

    # -- swapping ------------------------------------------------------------------------------------
    def read_pod(self) -> Pod:
        pod = self.api.read_pod(self.pod_name, self.namespace)
        if pod is None:
            raise PodLostError(
                f"chain pod {self.namespace}/{self.pod_name} does not exist: it was deleted, evicted or "
                "never created (did the chain's setup task run?)"
            )
        return pod

    def swap(self, stage: StageSpec, try_number: int, timeouts: Timeouts) -> SwapPlan:
        """Swap `stage` in (or find this try's earlier swap) and return the plan that was carried out.

        Waits while the slot it needs is still busy; a 409 Conflict (a concurrent write) re-plans from a
        fresh read, so no update is ever lost or applied twice.
        """
        deadline = time.monotonic() + timeouts.swap
        conflicts = 0
        while True:
            pod = self.read_pod()
            try:
                plan = plan_swap(pod, stage, try_number=try_number)
            except SlotBusyError as busy:
                self.log(f"waiting: {busy}")
                self.wait_pod_change(pod, deadline, f"slot {busy.slot} to become free")
                continue
            if plan.action == "reattach":
                self.log(
                    f"reattaching to stage {stage.name!r} generation {plan.generation} in {plan.slot} "
                    f"(try {try_number} already swapped it in)"
                )
                if plan.needs_crr and current_status(pod, stage.name).state is StageState.SWAPPING:
                    self.ensure_crr(plan)
                return plan
            assert plan.patch is not None
            try:
                self.api.patch_pod(self.pod_name, self.namespace, plan.patch)
            except ConflictError:
                conflicts += 1
                if time.monotonic() > deadline:
                    raise StageTimeoutError(
                        f"swap timeout: {conflicts} conflicting updates in a row"
                    ) from None
                continue
            how = "image patch" if plan.action == "patch" else "ContainerRecreateRequest (same image)"
            self.log(
                f"::kruise-chain:: swap stage={stage.name} slot={plan.slot} generation={plan.generation} "
                f"image={stage.image} via {how}"
            )
            if plan.needs_crr:
                self.ensure_crr(plan)
            return plan

    def ensure_crr(self, plan: SwapPlan) -> None:
        crr = self.api.create_kruise(CRR_PLURAL, plan.build_crr(), self.namespace)
        outcome = crr_outcome(crr)
        if outcome == "failed":
            raise ChainError(f"ContainerRecreateRequest {plan.crr_name} failed: {outcome.message}")

    def wait_pod_change(self, pod: Pod, deadline: float, what: str) -> Pod | None:
        """Block until the pod changes (watch), or raise the swap timeout naming `what`."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StageTimeoutError(f"swap timeout: gave up waiting for {what}")
        rv = (pod.get("metadata") or {}).get("resourceVersion")
        for new in self.api.watch_pod(self.pod_name, self.namespace, max(1, int(min(remaining, 60)))):
            if new is None or (new.get("metadata") or {}).get("resourceVersion") != rv:
                return new
        return None

    # -- waiting -------------------------------------------------------------------------------------
    def wait_started(self, plan: SwapPlan, timeouts: Timeouts, started: float) -> StageStatus:
        """Wait until the stage's new container exists (or fails to start); watch-based."""
        deadline = started + timeouts.swap
        pod = self.read_pod()
        reported = ""
        while True:
            status = current_status(pod, plan.stage)
            if status.state in (StageState.RUNNING, StageState.FINISHED, StageState.SUPERSEDED):
                return status
            if status.state is StageState.FAILED_TO_START:
                raise StageStartError(status, plan.record.image)
            if status.state is StageState.POD_LOST:
                raise PodLostError(
                    f"chain pod {self.namespace}/{self.pod_name} lost while swapping stage "
                    f"{plan.stage!r}: {status.message}"
                )
            detail = f"{status.reason or status.state}{': ' + status.message if status.message else ''}"
            if status.reason and status.reason != reported:
                self.log(f"::kruise-chain:: {plan.slot} {detail}")
                reported = status.reason
            if time.monotonic() > deadline:
                raise StageTimeoutError(
                    f"swap timeout ({timeouts.swap:.0f}s): stage {plan.stage!r} did not start in "
                    f"{plan.slot}: {detail}"
                )
            new = self.wait_pod_change(pod, deadline, f"stage {plan.stage!r} to start")
            pod = new if new is not None else self.read_pod()

    def follow(self, plan: SwapPlan, timeouts: Timeouts) -> StageResult:
        """Stream the stage's output through `log` until its result line; survives container restarts."""
        started = time.monotonic()
        self.wait_started(plan, timeouts, started)
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        run_started: float | None = None
        while True:
            forwarding = False
            for line in self.api.follow_log(self.pod_name, self.namespace, plan.slot):
                marker = parse_marker(line)
                if isinstance(marker, StartMarker) and marker.generation == plan.generation:
                    forwarding = True
                    run_started = run_started or time.monotonic()
                    tail.clear()
                    self.log(line)
                    continue
                if isinstance(marker, ResultMarker) and marker.generation == plan.generation:
                    self.log(
                        f"::kruise-chain:: end stage={marker.stage} generation={marker.generation} "
                        f"exit={marker.exit_code} reason={marker.reason} "
                        f"duration={(marker.finished_at - marker.started_at).total_seconds():.3f}s "
                        f"outputs={marker.outputs_status}"
                    )
                    return StageResult.from_marker(marker, image=plan.record.image, log_tail=list(tail))
                if forwarding:
                    tail.append(line)
                    self.log(line)
                if (
                    timeouts.execution is not None
                    and run_started is not None
                    and (time.monotonic() - run_started > timeouts.execution)
                ):
                    raise StageTimeoutError(
                        f"execution timeout ({timeouts.execution:.0f}s): stage {plan.stage!r} still running"
                    )
            # the stream ended without our result: the container stopped or was restarted
            pod = self.read_pod()
            status = current_status(pod, plan.stage)
            if status.state is StageState.SUPERSEDED:
                return self.result_from_history(plan, pod, tail)
            if status.state is StageState.POD_LOST:
                raise PodLostError(
                    f"chain pod {self.namespace}/{self.pod_name} lost while stage {plan.stage!r} "
                    f"ran: {status.message}"
                )
            if status.state is StageState.FAILED_TO_START:
                raise StageStartError(status, plan.record.image)
            result = self.result_from_history(plan, pod, tail, required=False)
            if result is not None:
                return result
            time.sleep(0.2)

    def result_from_history(
        self, plan: SwapPlan, pod: Pod, tail: deque[str], required: bool = True
    ) -> StageResult | None:
        """The result from the slot's previous log or last termination message (after a later restart)."""
        for previous in (False, True):
            text = self.api.read_log(self.pod_name, self.namespace, plan.slot, previous=previous)
            result = StageResult.from_log(
                text.splitlines(), generation=plan.generation, image=plan.record.image
            )
            if result is not None:
                return result
        last = ((container_status(pod, plan.slot) or {}).get("lastState") or {}).get("terminated") or {}
        marker = parse_marker(last.get("message") or "")
        if isinstance(marker, ResultMarker) and marker.generation == plan.generation:
            return StageResult.from_marker(marker, image=plan.record.image, log_tail=list(tail))
        if required:
            raise ChainError(
                f"the result of stage {plan.stage!r} generation {plan.generation} is no longer "
                f"readable: {plan.slot} has been reused"
            )
        return None

    def run(self, stage: StageSpec, try_number: int, timeouts: Timeouts | None = None) -> StageResult:
        """Swap `stage` in and follow it to its result."""
        timeouts = timeouts or Timeouts()
        plan = self.swap(stage, try_number, timeouts)
        return self.follow(plan, timeouts)
