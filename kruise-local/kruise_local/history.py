"""One resource's watch history: the events a watch may resume from, bounded by count, age and bytes.

kube-apiserver's watch cache (`staging/src/k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`) keeps a
cyclic buffer of events per resource whose capacity `resizeCacheLocked` adapts on each new event: it doubles
(up to `defaultUpperBoundCapacity`) when the buffer is full and even its oldest event is younger than
`eventFreshDuration` (75 s), and halves (down to `defaultLowerBoundCapacity`, 100) when the buffer is full and
the first event of its newest quarter is older than that. What falls out of the buffer is gone: a watch from
an older resourceVersion gets 410 Gone `too old resource version` (`getAllEventsSinceLocked`).

The real cache holds each event's object once, shared with the store and the watchers; here each version is
its own Python object, so the history also has a byte budget (`HISTORY_BYTES`, the local cluster's own
bound, not upstream's): the oldest events go once the kept versions weigh more. Without it 150 updates of a
200 KB object held 30 MB per burst for as long as the capacity grew.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

EVENT_FRESH_SECONDS = 75.0  # eventFreshDuration
LOWER_BOUND_CAPACITY = 100  # defaultLowerBoundCapacity
HISTORY_BYTES = 16 * 1024 * 1024
"""what one resource's kept versions may weigh (approximate JSON size)"""


def approx_size(value: Any) -> int:
    """About the bytes of `value` as JSON: its strings and keys, plus a few bytes per other value."""
    t = type(value)
    if t is str:
        return len(value) + 2
    if t is dict:
        n = 2
        for k, v in value.items():
            tv = type(v)
            n += len(k) + 3 + (len(v) + 2 if tv is str else approx_size(v) if tv is dict or tv is list else 8)
        return n
    if t is list:
        n = 2
        for v in value:
            tv = type(v)
            n += 1 + (len(v) + 2 if tv is str else approx_size(v) if tv is dict or tv is list else 8)
        return n
    return 8


class History:
    """The kept events of one resource (ordered by resourceVersion) and the newest one dropped."""

    def __init__(
        self, upper: int, budget: int = HISTORY_BYTES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.events: deque[Any] = deque()
        self._times: deque[float] = deque()
        self._sizes: deque[int] = deque()
        self.bytes = 0
        self.upper = upper
        self.capacity = min(LOWER_BOUND_CAPACITY, upper)
        self.budget = budget
        self.expired = 0
        """the newest resourceVersion dropped: a watch from an older one is 410 Gone"""
        self._clock = clock

    def __len__(self) -> int:
        return len(self.events)

    def append(self, event: Any, size: int) -> None:
        """Keep `event` (with its `rv`) of about `size` bytes, dropping what the bounds no longer allow."""
        if self.upper <= 0:  # a history of length 0 keeps nothing
            self.expired = event.rv
            return
        now = self._clock()
        self._resize(now)
        if len(self.events) >= self.capacity:
            self._drop(len(self.events) - self.capacity + 1)
        self.events.append(event)
        self._times.append(now)
        self._sizes.append(size)
        self.bytes += size
        while self.bytes > self.budget and len(self.events) > 1:
            self._drop(1)

    def set_upper(self, upper: int) -> None:
        """A new upper bound of the capacity; what is over it is dropped."""
        self.upper = upper
        self.capacity = min(self.capacity, upper)
        if len(self.events) > max(upper, 0):
            self._drop(len(self.events) - max(upper, 0))

    def _resize(self, now: float) -> None:
        """`resizeCacheLocked`, before an event is added."""
        n = len(self.events)
        if n < self.capacity or n == 0:
            return
        if now - self._times[0] < EVENT_FRESH_SECONDS:
            self.capacity = min(self.capacity * 2, self.upper)
        elif now - self._times[(n - self.capacity // 4) % n] > EVENT_FRESH_SECONDS:
            self.capacity = max(self.capacity // 2, min(LOWER_BOUND_CAPACITY, self.upper))
            if n > self.capacity:
                self._drop(n - self.capacity)

    def _drop(self, count: int) -> None:
        for _ in range(count):
            self.expired = self.events.popleft().rv
            self._times.popleft()
            self.bytes -= self._sizes.popleft()
