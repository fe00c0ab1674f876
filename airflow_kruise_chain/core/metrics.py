"""Memory of a chain pod's containers from the metrics API (PodMetrics), sampled while a stage runs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .resources import parse_quantity

ReadMetrics = Callable[[], Mapping[str, Any] | None]


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


@dataclass(frozen=True)
class MemoryPeak:
    """What a `MemorySampler` saw: the peak of one container and of the whole pod, in bytes."""

    container_bytes: int | None
    pod_bytes: int | None
    samples: int
    interval: float


class MemorySampler:
    """Samples a pod's PodMetrics every `interval` seconds on a thread; keeps the peaks.

    Use as a context manager around the stage. The first sample is taken at once and one more when it ends,
    so a stage shorter than `interval` still gets two samples. Sampling gives up after `max_misses`
    consecutive reads without metrics (no metrics server, or no permission): the peak stays None.
    """

    def __init__(
        self, read: ReadMetrics, container: str, *, interval: float = 1.0, max_misses: int = 3
    ) -> None:
        self.read = read
        self.container = container
        self.interval = interval
        self.max_misses = max_misses
        self.container_peak: int | None = None
        self.pod_peak: int | None = None
        self.samples = 0
        self.misses = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        """Read the metrics once and update the peaks."""
        if self.misses >= self.max_misses:
            return
        usage = container_memory(self.read())
        if not usage:
            self.misses += 1
            return
        self.misses = 0
        self.samples += 1
        self.pod_peak = max(self.pod_peak or 0, sum(usage.values()))
        if self.container in usage:
            self.container_peak = max(self.container_peak or 0, usage[self.container])

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> None:
        """Take the first sample and go on every `interval` seconds on a thread (once; later calls no-op)."""
        if self._thread is not None:
            return
        self.sample()
        self._thread = threading.Thread(target=self._run, name=f"memory-{self.container}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and take a last sample (nothing if it never started)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self.sample()

    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def peak(self) -> MemoryPeak:
        return MemoryPeak(self.container_peak, self.pod_peak, self.samples, self.interval)
