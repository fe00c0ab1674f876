"""The kubelet's pod lifecycle event generator and its pod status cache, as far as they set the kubelet's pace
(`pkg/kubelet/pleg/generic.go`, `pkg/kubelet/container/cache.go`).

- `GenericPLEG.Relist` runs every `relistPeriod` (1 s, `wait.Until`: the period counts from the end of one
  relist to the start of the next). It lists the runtime's containers, turns the differences into pod
  lifecycle events (ContainerStarted, ContainerDied: a pod sync each, `syncLoopIteration`) and, last,
  `cache.UpdateTime(timestamp)` with the time the relist began. An exit the kubelet did not cause is known
  from that relist on.
- `cache.GetNewerThan(uid, minTime)` blocks until the cache's global timestamp (or the pod's entry) is newer
  than `minTime`. `podWorkerLoop` calls it with the time its last sync ended before each sync, so a sync that
  follows another within a relist period waits for the next relist (upstream: "this adds ~1s of latency").

With `period` 0 (the fast profile's shortcut) nothing waits: the cache is always newer.
"""

from __future__ import annotations

import asyncio


class Pleg:
    """One node's relist clock and the cache timestamp it publishes."""

    def __init__(self, period: float) -> None:
        self.period = period
        self.timestamp = float("-inf")  # `cache.timestamp`: the start of the last finished relist
        self.relists = 0
        self._relisted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.period > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            await asyncio.sleep(0)  # the relist itself: list the runtime's pods, update the cache
            self.timestamp = began  # `cache.UpdateTime(timestamp)`, after all pods are updated
            self.relists += 1
            relisted, self._relisted = self._relisted, asyncio.Event()
            relisted.set()
            await asyncio.sleep(self.period)

    async def newer_than(self, min_time: float) -> None:
        """Return once the cache is newer than `min_time` (loop time): `cache.GetNewerThan`."""
        while self.period > 0 and self._task is not None and self.timestamp <= min_time:
            await self._relisted.wait()

    async def relisted(self) -> None:
        """Return after the next relist has begun and ended: when a runtime change made now is known."""
        await self.newer_than(asyncio.get_running_loop().time())
