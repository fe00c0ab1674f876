"""metrics-server as its shipped manifests run it (kubernetes-sigs/metrics-server; `--metric-resolution=15s`
in `manifests/base/deployment.yaml`, 60 s being the binary's default): what the `metrics.k8s.io` PodMetrics
API serves in the realistic profile.

- `server.go` `runScrape`: one scrape at start, then one per resolution (a ticker). A scrape reads each
  node's running containers: start time, cumulative CPU, working set, at the scrape's time. (The kubelet's
  own stats may be older than the scrape: cAdvisor's housekeeping staleness is not modelled.)
- `pkg/storage/pod.go` `podStorage.Store` keeps the last two points per container: the new point, and as
  the previous one the point of the scrape before if the container has not restarted since (its start time
  is before that point's timestamp). A fresh container between 10 s (`freshContainerMinMetricsResolution`)
  and the resolution old gets its start time as previous point (CPU 0). So a container younger than 10 s at
  a scrape has no previous point.
- `GetMetrics` serves a pod only when every container of its last scrape has a previous point (a restarted
  container hides the whole pod until its second point); per container the window is the time between its
  two points and the memory is the working set of the last one (`types.go` `resourceUsage`); the pod's
  timestamp and window are those of its container with the earliest last point.
CPU usage is not measured by the local runtime (reported as 0).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from .backoff import go_duration
from .store import Obj, now_iso

FRESH_CONTAINER_MIN_RESOLUTION = 10.0  # `freshContainerMinMetricsResolution`

PodKey = tuple[str, str]


@dataclass(frozen=True)
class Point:
    """`MetricsPoint`: one container at one scrape (times in epoch seconds)."""

    start: float
    timestamp: float
    cpu: int
    memory: int


Scrape = dict[PodKey, dict[str, Point]]


class MetricsServer:
    """Scrapes every `resolution` seconds with `scrape` and serves PodMetrics from the last two scrapes."""

    def __init__(self, resolution: float, scrape: Callable[[], Scrape]) -> None:
        self.resolution = resolution
        self.scrape = scrape
        self.last: Scrape = {}
        self.prev: Scrape = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()
        ticks = 0
        while True:
            self.store(self.scrape())
            ticks += 1
            await asyncio.sleep(max(0.0, began + ticks * self.resolution - loop.time()))

    def store(self, scrape: Scrape) -> None:
        """`podStorage.Store`."""
        last: Scrape = {}
        prev: Scrape = {}
        for key, containers in scrape.items():
            new_prev: dict[str, Point] = {}
            for name, point in containers.items():
                age = point.timestamp - point.start
                stored = self.last.get(key, {}).get(name)
                if 0 < age < self.resolution and age >= FRESH_CONTAINER_MIN_RESOLUTION:
                    new_prev[name] = replace(point, timestamp=point.start, cpu=0)
                elif stored is not None and point.start < stored.timestamp:
                    if point.timestamp > stored.timestamp:
                        new_prev[name] = stored
                    elif (older := self.prev.get(key, {}).get(name)) is not None and (
                        older.timestamp < point.timestamp
                    ):
                        new_prev[name] = older
            last[key] = dict(containers)
            if new_prev:
                prev[key] = new_prev
        self.last, self.prev = last, prev

    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None:
        """`podStorage.GetMetrics` for one pod: its PodMetrics, or None while it has none."""
        meta = pod["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        last, prev = self.last.get(key), self.prev.get(key)
        if last is None or prev is None:
            return None
        containers = []
        earliest: tuple[float, float] | None = None
        for name, point in last.items():
            before = prev.get(name)
            if before is None:
                return None  # not all containers present
            window = point.timestamp - before.timestamp
            cpu = (point.cpu - before.cpu) / window if window > 0 else 0
            usage = {"cpu": f"{int(cpu)}n" if cpu else "0", "memory": f"{point.memory // 1024}Ki"}
            containers.append({"name": name, "usage": usage})
            if earliest is None or point.timestamp < earliest[0]:
                earliest = (point.timestamp, window)
        assert earliest is not None
        return {
            "kind": "PodMetrics",
            "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "labels": meta.get("labels", {}),
                "creationTimestamp": now_iso(),
            },
            "timestamp": datetime.fromtimestamp(earliest[0], UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "window": go_duration(round(earliest[1], 9)),
            "containers": containers,
        }


def points(running: Iterable[tuple[str, datetime, int]], now: float | None = None) -> dict[str, Point]:
    """One pod's scrape: (container name, start time, working set bytes) of its running containers."""
    at = time.time() if now is None else now
    return {name: Point(started.timestamp(), at, 0, memory) for name, started, memory in running}
