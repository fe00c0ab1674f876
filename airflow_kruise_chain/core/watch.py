"""Waiting on one object through watches, until a predicate holds or a deadline passes (`watch_until`).

Watches are opened in windows of at most `window` seconds; each resumes from the last resourceVersion seen,
so no change is missed or seen twice. A window that brings nothing (its timeout passed, or the version was too
old: 410 Gone, which the hook answers by ending the watch) is followed by a fresh read of the object
(`relist`), and watching resumes from the version read. `watch_versions` (sync) and `awatch_versions`
(async, for triggers) share that logic through `WatchWindows`, which does no I/O, as lightkube's sync and
async clients share one watch driver.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from .podview import ChainPod

Obj = Mapping[str, Any] | ChainPod
"""an object as a watch sends it: the chain pod's snapshot, or another object's API JSON (an ImagePullJob)"""
Watch = Callable[[int, "str | None"], Iterable["Obj | None"]]
"""``watch(seconds, resource_version)``: the object's versions as one watch sends them (None once deleted)."""
AsyncWatch = Callable[[int, "str | None"], AsyncIterator["Obj | None"]]
Window = float | Callable[[], float]
"""at most this many seconds per watch (a callable: asked before each watch)"""


def resource_version(obj: Obj | None) -> str | None:
    if isinstance(obj, ChainPod):
        return obj.resource_version
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


class WatchWindows:
    """What to watch next while waiting on one object: the window, the version to resume from, when to read
    the object again. No I/O: `watch_versions` and `awatch_versions` drive it."""

    def __init__(self, deadline: float, version: str | None = None, window: Window = 60.0) -> None:
        self.deadline = deadline
        self.version = version
        self.window = window
        self._seen = False

    def next_window(self, now: float) -> int | None:
        """Seconds for the next watch, None once the deadline has passed."""
        remaining = self.deadline - now
        if remaining <= 0:
            return None
        window = self.window() if callable(self.window) else self.window
        self._seen = False
        return max(1, int(min(window, remaining)))

    def seen(self, obj: Obj | None) -> None:
        """A version arrived on the watch."""
        self._seen = True
        self.version = resource_version(obj) or self.version

    def expired(self, now: float) -> bool:
        return now > self.deadline

    def relist(self, now: float) -> bool:
        """After a watch ended: whether to read the object again (the window brought nothing, and there is
        time left to use what the read finds)."""
        return not self._seen and now < self.deadline

    def relisted(self, obj: Obj | None) -> None:
        if obj is not None:
            self.version = resource_version(obj)


def watch_versions(
    watch: Watch,
    deadline: float,
    *,
    version: str | None = None,
    relist: Callable[[], Obj | None] | None = None,
    window: Window = 60.0,
) -> Iterator[Obj | None]:
    """Every version of the object (None: deleted) that watches from `version` on (None: from the object as
    it is now) send until `deadline`, with a fresh read after a window that brought nothing (if `relist`)."""
    state = WatchWindows(deadline, version, window)
    while (seconds := state.next_window(time.monotonic())) is not None:
        for obj in watch(seconds, state.version):
            state.seen(obj)
            yield obj
            if state.expired(time.monotonic()):
                return
        if relist is not None and state.relist(time.monotonic()):
            obj = relist()
            state.relisted(obj)
            yield obj


def watch_until(
    watch: Watch,
    until: Callable[[Obj | None], bool],
    deadline: float,
    *,
    version: str | None = None,
    relist: Callable[[], Obj | None] | None = None,
    window: Window = 60.0,
) -> tuple[bool, Obj | None]:
    """The first version for which `until` holds, as ``(True, version)``; ``(False, last seen)`` once
    `deadline` passes."""
    last: Obj | None = None
    for obj in watch_versions(watch, deadline, version=version, relist=relist, window=window):
        if until(obj):
            return True, obj
        last = obj
    return False, last


async def awatch_versions(
    watch: AsyncWatch,
    deadline: float,
    *,
    version: str | None = None,
    relist: Callable[[], Awaitable[Obj | None]] | None = None,
    window: Window = 60.0,
) -> AsyncIterator[Obj | None]:
    """`watch_versions` for an async watch (a trigger's)."""
    state = WatchWindows(deadline, version, window)
    while (seconds := state.next_window(time.monotonic())) is not None:
        objs = watch(seconds, state.version)
        try:
            async for obj in objs:
                state.seen(obj)
                yield obj
                if state.expired(time.monotonic()):
                    return
        finally:  # a window left early (expired, or this generator closed): its watch closed with it
            if (aclose := getattr(objs, "aclose", None)) is not None:
                await aclose()
        if relist is not None and state.relist(time.monotonic()):
            obj = await relist()
            state.relisted(obj)
            yield obj


class PodApi(Protocol):
    """The pod reads a pod wait needs (`api.ChainApi` has them): snapshots, None once the pod is gone."""

    def read_pod(self, name: str, namespace: str) -> ChainPod | None: ...

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]: ...


def pod_watch(api: PodApi, name: str, namespace: str) -> tuple[Watch, Callable[[], Obj | None]]:
    """The watch and the read of one pod, for `watch_versions` / `watch_until`."""

    def watch(seconds: int, version: str | None) -> Iterable[Obj | None]:
        return api.watch_pod(name, namespace, seconds, resource_version=version)

    return watch, lambda: api.read_pod(name, namespace)


def wait_pod_gone(api: PodApi, name: str, namespace: str, version: str | None, timeout: float) -> bool:
    """Whether the pod (last read at `version`) is gone within `timeout` seconds (read once more then)."""
    watch, read = pod_watch(api, name, namespace)
    gone, _ = watch_until(
        watch, lambda pod: pod is None, time.monotonic() + timeout, version=version, relist=read
    )
    return gone or read() is None
