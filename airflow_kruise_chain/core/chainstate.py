"""A chain's state for monitoring: what each stage did and when, what each slot holds, memory per stage.

`StageMonitor` follows one stage run on the operator's side and publishes a `StageTrack` (JSON-safe dict,
the stage task's XCom ``chain_state``) when the swap is made, when the stage starts and when it ends.
`chain_view` turns the tracks of a DAG run (and the live pod and its metrics, while it exists) into what
the UI shows. Times from the operator and the runner have sub-second resolution; the kubelet's container
times (`container_stopped_at`, `container_started_at`) have one-second resolution, as in Kubernetes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

from .constants import SLOTS
from .errors import MalformedTrack
from .image import same_image
from .metrics import MemorySampler, ReadMetrics, container_memory
from .podview import ChainPod, Slot, lost_reason
from .status import StageResult, StageState, StartMarker, confirm_from_log, needs_log, slot_status
from .wire import MARKER

XCOM_KEY = "chain_state"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class StageTrack:
    """One stage run (one generation) as the operator saw it; every time is an ISO 8601 string."""

    chain: str
    namespace: str
    pod: str
    stage: str
    slot: str
    generation: int
    image: str
    try_number: int
    action: str
    state: str = "swapping"
    """swapping, running, succeeded, failed"""
    swapped_at: str | None = None
    waiting: list[dict[str, str]] = field(default_factory=list)
    """waiting reasons the slot showed between swap and start (e.g. ContainerCreating, ErrImagePull)"""
    container_stopped_at: str | None = None
    container_started_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    exit_code: int | None = None
    reason: str = ""
    duration_seconds: float | None = None
    memory_peak_bytes: int | None = None
    """the slot's peak working set in the metrics API's readings whose window lies within the stage; None:
    not measured (a stage shorter than metrics-server's window, 10-15 s, has no such reading)"""
    pod_memory_peak_bytes: int | None = None
    memory_samples: int = 0
    memory_window: list[str] | None = None
    """[from, to] of the reading that gave the peak (metrics-server's window: between its two scrapes)"""
    error: str = ""
    updated_at: str | None = None

    def to_xcom(self) -> dict[str, Any]:
        self.updated_at = now_iso()
        return asdict(self)

    @classmethod
    def from_xcom(cls, data: Any) -> StageTrack:
        """The track an XCom holds, checked field by field (any task can push a ``chain_state``):
        `MalformedTrack` names the first field that is missing or of the wrong type."""
        if not isinstance(data, Mapping):
            raise MalformedTrack(f"not a JSON object but {type(data).__name__}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            expected, nullable = _field_type(f.type)
            if f.name not in data:
                if f.default is MISSING and f.default_factory is MISSING:
                    raise MalformedTrack(f"{f.name} is missing")
                continue
            value = data[f.name]
            if value is None and nullable:
                values[f.name] = None
                continue
            if isinstance(value, bool) or not isinstance(value, expected):
                raise MalformedTrack(f"{f.name} is {value!r}, not {_TYPE_NAMES[expected]}")
            times = [value] if f.name.endswith("_at") else value if f.name.endswith("_window") else []
            for time_value in times:
                try:
                    _parse_time(time_value)
                except (TypeError, ValueError):
                    what = "an ISO 8601 time" if f.name.endswith("_at") else "a list of ISO 8601 times"
                    raise MalformedTrack(f"{f.name} is {value!r}, not {what}") from None
            if f.name == "waiting" and not all(
                isinstance(w, Mapping) and isinstance(w.get("reason"), str) for w in value
            ):
                raise MalformedTrack("waiting holds an entry without a reason")
            values[f.name] = value
        return cls(**values)


_TYPES: dict[str, type | tuple[type, ...]] = {"str": str, "int": int, "float": (int, float), "list": list}
_TYPE_NAMES: dict[type | tuple[type, ...], str] = {
    str: "a string",
    int: "an integer",
    (int, float): "a number",
    list: "a list",
}


def _field_type(annotation: Any) -> tuple[type | tuple[type, ...], bool]:
    """(the JSON type a `StageTrack` field's annotation asks for, whether it may be None)."""
    text = str(annotation)
    return _TYPES[text.split("[")[0].split("|")[0].strip()], "None" in text


class StageMonitor:
    """Follows a stage run for monitoring: the driver's events (`core.events.StageEvents`), the published
    `StageTrack`, memory sampling.

    `publish` receives the track as a dict each time it changes; `read_metrics` reads the chain pod's
    PodMetrics (None when unavailable); `interval` is the first gap between two memory samples (0: no
    sampling), `max_interval` the longest (see `MemorySampler`).
    """

    def __init__(
        self,
        track: StageTrack,
        *,
        publish: Callable[[dict[str, Any]], None],
        read_metrics: ReadMetrics,
        log: Callable[[str], None],
        interval: float = 1.0,
        max_interval: float = 60.0,
    ) -> None:
        self.track = track
        self.publish = publish
        self.read_metrics = read_metrics
        self.log = log
        self.interval = interval
        self.max_interval = max_interval
        self._swapped = time.monotonic()
        self._sampler: MemorySampler | None = None
        self.on_end: Callable[[StageResult], None] | None = None
        """called first when the stage ends, with its result (the operator parks its slot and sizes the next
        stage's: as soon as the result is read)"""

    def swapped(self, at: datetime | None = None) -> None:
        """The swap request was made `at` (or found, on a reattach: now): publish the swapping state. The
        stage may already run by then (the fast go starts it while the task goes on), so `swapped_at` is
        the request's time, not this call's."""
        self._swapped = time.monotonic()
        self.track.swapped_at = self.track.swapped_at or (at.isoformat() if at is not None else now_iso())
        self.publish(self.track.to_xcom())

    def waiting(self, slot: str, reason: str, message: str) -> None:
        """The slot waits (pull, back-off, ...): note the reason."""
        if slot == self.track.slot:
            self.track.waiting.append({"reason": reason, "at": now_iso()})

    def started(self, marker: StartMarker, slot: Slot | None) -> None:
        """The runner announced the stage: log the container start (image pull included), publish."""
        track = self.track
        track.state = "running"
        track.started_at = marker.at.isoformat()
        last = slot.last_terminated if slot is not None else None
        track.container_stopped_at = last.finished_at if last is not None else None
        track.container_started_at = slot.started_at if slot is not None else None
        waited = ", ".join(w["reason"] for w in track.waiting) or "none"
        self.log(
            f"{MARKER} pull stage={track.stage} slot={track.slot} image={track.image} "
            f"old_container_stopped={track.container_stopped_at or '-'} "
            f"container_started={track.container_started_at or '-'} waiting_reasons={waited} "
            f"swap_to_start={time.monotonic() - self._swapped:.3f}s"
        )
        self.publish(track.to_xcom())
        if self._sampler is not None:
            self._sampler.start(since=marker.at)

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Sample the slot's memory from the stage's start marker until it ends (at the latest, the end of
        the block; nothing when `interval` is 0): a slot still pulling or backing off costs no metrics
        reads."""
        if self.interval > 0:
            self._sampler = MemorySampler(
                self.read_metrics, self.track.slot, interval=self.interval, max_interval=self.max_interval
            )
        try:
            yield
        finally:
            self._stop_sampling()

    def _stop_sampling(self, until: datetime | None = None) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is None:
            return
        sampler.stop(until)
        peak = sampler.peak()
        self.track.memory_peak_bytes = peak.container_bytes
        self.track.pod_memory_peak_bytes = peak.pod_bytes
        self.track.memory_samples = peak.samples
        window = [peak.window_from.isoformat(), peak.window_to.isoformat()] if peak.window_from else None
        self.track.memory_window = window if peak.window_to else None
        measured = f"window={window[0]}..{window[1]}" if window else "window=-"
        if peak.container_bytes is None:
            measured = "(not measured: no metrics reading whose window lies within the stage)"
        self.log(
            f"{MARKER} memory stage={self.track.stage} slot={self.track.slot} "
            f"peak={_mib(peak.container_bytes)} pod_peak={_mib(peak.pod_bytes)} {measured} "
            f"samples={peak.samples} reads={peak.reads} first_gap={peak.interval:g}s"
        )

    def ended(self, result: StageResult) -> None:
        """The stage's result is in: `on_end`, stop sampling, publish it."""
        if self.on_end is not None:
            self.on_end(result)
        self._stop_sampling(until=result.finished_at)
        track = self.track
        track.state = "succeeded" if result.succeeded else "failed"
        track.started_at = result.started_at.isoformat()
        track.finished_at = result.finished_at.isoformat()
        track.exit_code = result.exit_code
        track.reason = result.reason
        track.duration_seconds = result.duration_seconds
        track.error = result.detail  # e.g. OOMKilled, with the slot's memory limit
        self.publish(track.to_xcom())

    def failed(self, error: BaseException) -> None:
        """The stage could not run to a result (failed to start, timeout, pod lost): publish why."""
        self._stop_sampling()
        self.track.state = "failed"
        self.track.error = str(error).splitlines()[0][:500] if str(error) else type(error).__name__
        self.publish(self.track.to_xcom())


def _mib(value: int | None) -> str:
    """Memory as the chain page shows it too (plugins/page.html `mib`): ``4.0 MiB``."""
    return "-" if value is None else f"{value / 1048576:.1f} MiB"


def stage_phases(track: StageTrack, parked_until: str | None) -> list[dict[str, Any]]:
    """The stage's timeline: swap (request → old container stopped), pull (→ the runner's start: image pull
    if the image was not on the node, container creation and start), run (→ result), park (→ `parked_until`).

    The kubelet's stop time has one-second resolution: it is clamped into [swap, run start].
    """
    swap = _parse_time(track.swapped_at)
    run_start = _parse_time(track.started_at)
    run_end = _parse_time(track.finished_at)
    phases: list[dict[str, Any]] = []

    def add(name: str, start: datetime | None, end: datetime | None) -> None:
        if start is not None:
            phases.append(
                {
                    "phase": name,
                    "start": start.isoformat(),
                    "end": _iso(end),
                    "seconds": round((end - start).total_seconds(), 3) if end else None,
                }
            )

    if swap is not None and run_start is not None:
        stopped = _parse_time(track.container_stopped_at) or swap
        stopped = min(max(stopped, swap), max(run_start, swap))
        add("swap", swap, stopped)
        add("pull", stopped, max(run_start, stopped))
    else:  # still swapping, or it failed before the stage started
        add("swap", swap, _parse_time(track.updated_at) if track.state == "failed" else None)
    add("run", run_start, run_end)
    add("park", run_end, _parse_time(parked_until))
    return phases


def slot_views(
    pod: ChainPod, metrics: Mapping[str, Any] | None, ended: Collection[str] = ()
) -> list[dict[str, Any]]:
    """What each slot of the live chain pod holds: image, stage, generation, state and memory now. A slot
    holding a generation is parked only when it is in `ended` (its runner's result line for that generation
    was read): Ready says only that its runner serves it, running a stage too (`StageStatus.confirmed`)."""
    memory = container_memory(metrics)
    view = pod
    views = []
    for slot in SLOTS:
        status = slot_status(view, slot)
        hosted = view.slot(slot)
        state = status.state.value
        if status.state is StageState.FINISHED:
            state = "parked" if status.confirmed or slot in ended else "running"
        stage = hosted.stage
        image = hosted.image
        record = view.record(stage) if stage else None
        if record is not None and same_image(record.image, image):
            image = record.image  # the stage's own reference, not the other spelling a swap patched in
        views.append(
            {
                "slot": slot,
                "image": image,
                "stage": stage,
                "generation": hosted.generation,
                "state": state,
                "reason": status.reason,
                "restarts": hosted.restart_count,
                "memory_bytes": memory.get(slot),
            }
        )
    return views


def reported_slots(pod: ChainPod, read_log: Callable[[str], str]) -> set[str]:
    """The slots whose current generation's result line (generation, token) is in their log (`read_log`:
    the last lines of a slot's log), read only for the slots whose pod status cannot tell (a Ready slot
    holding a generation: see `StageStatus.confirmed`)."""
    reported = set()
    for slot in SLOTS:
        status = slot_status(pod, slot)
        if needs_log(status) and confirm_from_log(pod, status, read_log(slot).splitlines()).confirmed:
            reported.add(slot)
    return reported


def failure_reason(track: StageTrack) -> str:
    """Why a stage run failed, in one line ('' unless it failed): the operator's error, else its exit."""
    if track.state != "failed":
        return ""
    if track.error:
        return track.error
    if track.exit_code is None:
        return "failed"
    reason = f": {track.reason}" if track.reason and track.reason != "completed" else ""
    return f"exit code {track.exit_code}{reason}"


RECORDED = "as its stage tasks recorded it (no live view: [kruise_chain] ui_kubernetes_conn_id is not set)"
"""The pod's state on the page of an active run when the API server does not read the cluster."""


def recorded_slot(slot: str, runs: Sequence[StageTrack], *, ended: bool) -> dict[str, Any]:
    """A slot as the stage tasks' tracks leave it: the last stage swapped into it, running (since its start)
    or swapping (since its swap) or, once that stage ended, parked (since its end); `gone` once the run has
    ended or the pod was not found."""
    last = next((t for t in reversed(runs) if t.slot == slot), None)
    if last is None:
        state, since = "idle", None
    elif ended:
        state, since = "gone", None
    elif last.state == "running":
        state, since = "running", last.started_at
    elif last.state == "swapping":
        state, since = "swapping", last.swapped_at
    else:  # its stage ended: its task parks the slot
        state, since = "parked", last.finished_at or last.updated_at
    return {
        "slot": slot,
        "image": last.image if last else "",
        "stage": last.stage if last else None,
        "generation": last.generation if last else 0,
        "state": state,
        "since": since,
        "reason": "",
        "restarts": None,
        "memory_bytes": None,
    }


def chain_view(
    tracks: Sequence[Mapping[str, Any]],
    *,
    pod: ChainPod | None = None,
    metrics: Mapping[str, Any] | None = None,
    ended_at: str | None = None,
    live_view: bool = False,
    reported: Collection[str] = (),
) -> dict[str, Any]:
    """One chain of a DAG run for the UI: its pod, the two slots, and every stage run with its timeline.

    `tracks` are the stage tasks' ``chain_state`` XComs (raises `MalformedTrack` for one that is not);
    `pod` and `metrics` the live chain pod and its PodMetrics while it exists (then the slots are read from
    it, else reconstructed from the tracks); `ended_at` closes the last park phases (the DAG run's end; None
    while it runs); `live_view`: the pod was looked for (so its absence means it is gone); `reported`: the
    slots whose log holds their generation's result line (`reported_slots`).
    """
    runs = sorted((StageTrack.from_xcom(t) for t in tracks), key=lambda t: (t.generation, t.stage))
    stages = []
    for i, track in enumerate(runs):
        later = [t for t in runs[i + 1 :] if t.slot == track.slot and t.swapped_at]
        parked_until = later[0].swapped_at if later else ended_at
        stages.append(
            {
                **asdict(track),
                "failure": failure_reason(track),
                "phases": stage_phases(track, parked_until),
            }
        )
    first = runs[0] if runs else None
    live = pod is not None and lost_reason(pod) is None
    if live:
        assert pod is not None
        # a generation has ended once its runner's result line was read: by the page (`reported`) or by the
        # stage's task (its track has the exit code)
        results = {(t.slot, t.generation) for t in runs if t.exit_code is not None}
        ended = set(reported) | {s for s in SLOTS if (s, pod.slot(s).generation) in results}
        slots = slot_views(pod, metrics, ended)
        for view in slots:
            recorded = recorded_slot(view["slot"], runs, ended=False)
            same = (recorded["stage"], recorded["generation"]) == (view["stage"], view["generation"])
            view["since"] = recorded["since"] if same and recorded["state"] == view["state"] else None
        pod_state = pod.phase or "Unknown"
    else:
        slots = [recorded_slot(slot, runs, ended=bool(ended_at) or pod is not None) for slot in SLOTS]
        if pod is not None:
            pod_state = lost_reason(pod) or ""
        elif ended_at:
            pod_state = "not read: the DAG run has ended"
        elif live_view:
            pod_state = "not found"
        else:
            pod_state = RECORDED
    return {
        "chain": first.chain if first else "",
        "namespace": first.namespace if first else "",
        "pod": first.pod if first else "",
        "pod_state": pod_state,
        "live": live,
        "slots": slots,
        "stages": stages,
    }
