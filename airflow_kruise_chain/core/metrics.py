"""Memory of a chain pod's containers from the metrics API (PodMetrics), sampled while a stage runs."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import durationpy

from .resources import parse_quantity

ReadMetrics = Callable[[], Mapping[str, Any] | None]
SHORTEST_WINDOW = 10.0
"""Seconds: the shortest window a metrics-server reading covers (the time between its last two scrapes; it
refuses a `--metric-resolution` under 10 s: metrics-server `Options.Validate`). A stage shorter than the
window of every reading cannot have a reading of its own."""


def container_memory(metrics: Mapping[str, Any] | None) -> dict[str, int]:
    """Container name -> memory working set in bytes, from a PodMetrics object ({} without metrics)."""
    usage: dict[str, int] = {}
    for container in (metrics or {}).get("containers") or ():
        memory = (container.get("usage") or {}).get("memory")
        if container.get("name") and memory:
            try:
                usage[container["name"]] = int(parse_quantity(str(memory)))
            except ValueError:
                continue
    return usage


def sample_time(metrics: Mapping[str, Any] | None) -> tuple[datetime | None, float]:
    """When a PodMetrics sample was taken and its window in seconds (None, 0.0 when it does not say).

    The metrics API's sample covers [timestamp - window, timestamp]; metrics-server replaces it once per
    `--metric-resolution` (the window is the time between its last two scrapes), so a read before
    timestamp + window returns the same sample."""
    try:
        taken = datetime.fromisoformat(str((metrics or {})["timestamp"]).replace("Z", "+00:00"))
        window = durationpy.from_str(str((metrics or {}).get("window") or "0s")).total_seconds()
    except (KeyError, ValueError):
        return None, 0.0
    return (taken if taken.tzinfo else None), max(window, 0.0)


def max_reads(duration: float, interval: float, max_interval: float) -> int:
    """The most metrics reads a `MemorySampler` makes for a stage of `duration` seconds:
    ceil(log2(max_interval / interval)) while the gap doubles, one per `max_interval` after, one at the end
    (and never more than one per new sample: see `MemorySampler`)."""
    if interval <= 0:
        return 0
    cap = max(interval, max_interval)
    return 1 + math.ceil(math.log2(cap / interval)) + math.floor(duration / cap)


@dataclass(frozen=True)
class MemoryPeak:
    """What a `MemorySampler` saw: the peak of one container and of the whole pod, in bytes, and the time
    window of the reading that gave the container's peak (None, None: not measured)."""

    container_bytes: int | None
    pod_bytes: int | None
    samples: int
    interval: float
    reads: int = 0
    window_from: datetime | None = None
    window_to: datetime | None = None


class MemorySampler:
    """Samples a pod's PodMetrics on a thread while a stage runs; keeps the peaks.

    Use as a context manager around the stage, or `start` at the stage's start and `stop` at its end. The
    reads follow the metrics pipeline instead of a clock: none at the start (the stage's program has only
    begun, and the metrics server's sample predates it); the first `interval` seconds in, each later gap twice
    the last up to `max_interval`, and never before the sample read last is due for renewal (its `timestamp`
    + `window`: metrics-server publishes a new one once per `--metric-resolution`, 15 s in its shipped
    manifests); a last one at the end unless the sample read last is not due yet. So a stage of T seconds
    costs at most `max_reads(T, interval, max_interval)` reads, one per new sample at most. A reading counts
    for the stage only when the time window it covers, [timestamp - window, timestamp], lies within the stage,
    from `since` to `until` (its start and end, widened to the API's whole seconds): one that began before
    the stage measured the slot's previous stage or its idle runner, one taken after it the runner again. So
    a stage shorter than metrics-server's window (the time between its last two scrapes, 10 s at least) is
    not measured: its peak stays None, as a user of metrics-server sees it.
    Sampling gives up after `max_misses` consecutive reads without metrics (no metrics server, or no
    permission): the peak stays None.
    """

    def __init__(
        self,
        read: ReadMetrics,
        container: str,
        *,
        interval: float = 1.0,
        max_interval: float = 60.0,
        max_misses: int = 3,
    ) -> None:
        self.read = read
        self.container = container
        self.interval = interval
        self.max_interval = max(interval, max_interval)
        self.max_misses = max_misses
        self.since: datetime | None = None
        self.until: datetime | None = None
        self.container_peak: int | None = None
        self.pod_peak: int | None = None
        self.peak_window: tuple[datetime, datetime] | None = None
        self.samples = 0
        self.reads = 0
        self.misses = 0
        self._renewed_at = 0.0  # monotonic time from which the metrics API may hold a newer sample
        self._window: float | None = None  # the shortest window of the readings seen (None: none seen)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Read the metrics once and update the peaks."""
        if self.misses >= self.max_misses:
            return
        self.reads += 1
        metrics = self.read()
        usage = container_memory(metrics)
        if not usage:
            self.misses += 1
            return
        self.misses = 0
        taken, window = sample_time(metrics)
        if window > 0:
            self._window = min(window, self._window or window)
        if taken is not None and window > 0:
            due = (taken + timedelta(seconds=window) - datetime.now(taken.tzinfo)).total_seconds()
            self._renewed_at = time.monotonic() + min(max(due, 0.0), window)  # a skewed clock waits <= window
        began = taken - timedelta(seconds=window) if taken is not None else None
        if began is not None and not (
            _within(began, self.since, self.until) and _within(taken, self.since, self.until)
        ):
            return
        self.samples += 1
        self.pod_peak = max(self.pod_peak or 0, sum(usage.values()))
        if self.container in usage and usage[self.container] > (self.container_peak or 0):
            self.container_peak = usage[self.container]
            self.peak_window = (began, taken) if began is not None and taken is not None else None

    def _run(self) -> None:
        gap, last = self.interval, time.monotonic()
        while not self._stop.wait(max(last + gap, self._renewed_at) - time.monotonic()):
            last = time.monotonic()
            self.sample()
            gap = min(2 * gap, self.max_interval)

    def start(self, since: datetime | None = None) -> None:
        """Sample on a thread from now on (samples taken before `since` do not count; once, later calls
        no-op)."""
        if self._thread is not None:
            return
        self.since = since
        self._thread = threading.Thread(target=self._run, name=f"memory-{self.container}", daemon=True)
        self._thread.start()

    def stop(self, until: datetime | None = None) -> None:
        """Stop the thread and take a last sample if a newer one can exist and can be the stage's (samples
        taken after `until` do not count; nothing if it never started). No last read for a stage shorter
        than a reading's window (those seen, else `SHORTEST_WINDOW`): no reading can lie within it, and the
        read would delay the stage's end for nothing."""
        if self._thread is None:
            return
        self.until = until
        self._stop.set()
        self._thread.join()
        if time.monotonic() >= self._renewed_at and not self._too_short():
            self.sample()

    def _too_short(self) -> bool:
        """Whether the stage, from `since` to `until` widened to whole seconds (as `_within` widens them), is
        shorter than any reading's window: `self._window` once a reading said it, else `SHORTEST_WINDOW`."""
        if self.since is None or self.until is None:
            return False
        began = _aware(self.since).replace(microsecond=0)
        ended = _aware(self.until).replace(microsecond=0) + timedelta(seconds=bool(self.until.microsecond))
        return (ended - began).total_seconds() < (self._window or SHORTEST_WINDOW)

    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def peak(self) -> MemoryPeak:
        window = self.peak_window or (None, None)
        return MemoryPeak(
            self.container_peak, self.pod_peak, self.samples, self.interval, self.reads, *window
        )


def _within(taken: datetime, since: datetime | None, until: datetime | None) -> bool:
    """Whether a sample taken at `taken` (whole seconds) falls in [since, until] widened to whole seconds."""
    if since is not None and taken < _aware(since).replace(microsecond=0):
        return False
    if until is None:
        return True
    return taken <= _aware(until).replace(microsecond=0) + timedelta(seconds=bool(until.microsecond))


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)
