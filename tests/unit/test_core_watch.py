"""`core.watch`: waiting on one object through watches in windows, resumed from the last version seen, with a
fresh read after a window that brought nothing (its timeout, or 410 Gone)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.watch import awatch_versions, wait_pod_gone, watch_until, watch_versions
from tests.unit.podfactory import chain_pod


def pod(version: int, phase: str = "Pending") -> dict[str, Any]:
    return {"metadata": {"resourceVersion": str(version)}, "status": {"phase": phase}}


class ScriptedWatch:
    """Each call returns the next batch of versions and records (seconds, resource_version) it was asked."""

    def __init__(self, *batches: list[dict[str, Any] | None]) -> None:
        self.batches = list(batches)
        self.calls: list[tuple[int, str | None]] = []

    def __call__(self, seconds: int, version: str | None) -> Iterable[dict[str, Any] | None]:
        self.calls.append((seconds, version))
        return self.batches.pop(0) if self.batches else []


def test_each_window_resumes_from_the_last_version_seen() -> None:
    watch = ScriptedWatch([pod(2), pod(3)], [pod(4, "Running")])
    found, obj = watch_until(
        watch,
        lambda p: p is not None and p["status"]["phase"] == "Running",
        time.monotonic() + 30,
        version="1",
    )
    assert found and obj == pod(4, "Running")
    assert [version for _, version in watch.calls] == ["1", "3"]


def test_a_window_that_brings_nothing_reads_the_object_again_and_resumes_from_it() -> None:
    """An empty window is a timeout or a 410 Gone (the hook ends the watch): read, then watch from there."""
    watch = ScriptedWatch([], [pod(9, "Running")])
    reads: list[int] = []

    def relist() -> dict[str, Any]:
        reads.append(1)
        return pod(7)

    seen = list(itertools.islice(watch_versions(watch, time.monotonic() + 30, version="1", relist=relist), 2))
    assert seen == [pod(7), pod(9, "Running")]
    assert [version for _, version in watch.calls] == ["1", "7"]
    assert reads == [1]


def test_windows_are_at_most_the_window_and_never_past_the_deadline() -> None:
    watch = ScriptedWatch([pod(2)])
    next(watch_versions(watch, time.monotonic() + 5.5, window=60))
    assert watch.calls[0][0] == 5
    watch = ScriptedWatch([pod(2)])
    found, last = watch_until(watch, lambda p: False, time.monotonic() + 0.3, window=2)
    assert (found, last) == (False, pod(2))
    assert watch.calls[0][0] == 1  # at least one second per watch


def test_no_read_once_the_deadline_has_passed() -> None:
    reads: list[int] = []
    found, _ = watch_until(
        ScriptedWatch(), lambda p: True, time.monotonic() - 1, relist=lambda: reads.append(1)
    )
    assert not found and reads == []


def test_a_deletion_is_seen_as_none() -> None:
    class Api:
        def __init__(self) -> None:
            self.read = 0

        def watch_pod(self, name: str, namespace: str, seconds: int, resource_version: str | None = None):
            assert resource_version == "5"
            return iter([chain_pod(resource_version="6"), None])

        def read_pod(self, name: str, namespace: str) -> ChainPod | None:
            self.read += 1
            return chain_pod(resource_version="6")

    api = Api()
    assert wait_pod_gone(api, "p", "ns", "5", 30)
    assert api.read == 0


def test_the_async_watch_shares_the_windows() -> None:
    batches: list[list[dict[str, Any] | None]] = [[], [pod(3, "Running")]]
    calls: list[str | None] = []

    async def watch(seconds: int, version: str | None) -> AsyncIterator[dict[str, Any] | None]:
        calls.append(version)
        for item in batches.pop(0) if batches else []:
            yield item

    async def relist() -> dict[str, Any]:
        return pod(2)

    async def first_running() -> dict[str, Any] | None:
        async for seen in awatch_versions(watch, time.monotonic() + 30, version="1", relist=relist):
            if seen is not None and seen["status"]["phase"] == "Running":
                return seen
        return None

    assert asyncio.run(first_running()) == pod(3, "Running")
    assert calls == ["1", "2"]
