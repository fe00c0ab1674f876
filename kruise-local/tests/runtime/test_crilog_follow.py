"""Following a container's CRI log (`crilog.follow_log`, cri-client logs.go `ReadLogs`): woken by inotify
events, one inotify instance for many follows, the force check where inotify is missing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kruise_local import crilog
from kruise_local.crilog import follow_log
from runtime_helpers import until


def _rec(text: str) -> bytes:
    return f"2026-12-02T18:20:01.000000000Z stdout F {text}\n".encode()


async def _collect(follow: Any, out: list[bytes]) -> None:
    async for chunk in follow:
        out.append(chunk)


@pytest.mark.asyncio
async def test_follow_log_wakes_on_inotify_events_for_a_late_file_and_a_rotation(tmp_path: Path) -> None:
    """cri-client logs.go `ReadLogs`/`waitLogs`: a follow watches the log's directory; a write wakes it, and a
    Create of the log's name (a rotation: renamed away, created anew) reopens it from its start. With a
    force check far beyond the test's bounds, only the events can have woken it."""
    log = tmp_path / "c" / "0.log"
    log.parent.mkdir()
    running = True
    out: list[bytes] = []
    task = asyncio.create_task(_collect(follow_log(log, is_running=lambda: running, force_check=3600), out))
    await asyncio.sleep(0.1)
    log.write_bytes(_rec("one"))  # the file appears late
    await until(lambda: b"".join(out) == b"one\n", "the late file's line")
    with log.open("ab") as f:
        f.write(_rec("two"))
    await until(lambda: b"".join(out) == b"one\ntwo\n", "the appended line")
    log.rename(log.with_name("0.log.20261202-182001"))  # the kubelet's rotation, then the runtime reopens
    log.write_bytes(_rec("three"))
    await until(lambda: b"".join(out) == b"one\ntwo\nthree\n", "the new file's line")
    running = False
    with log.open("ab") as f:
        f.write(_rec("last"))
    await asyncio.wait_for(task, 20)
    assert b"".join(out) == b"one\ntwo\nthree\nlast\n"
    # the shared inotify instance of this loop went with its last follow (a cluster another test left running
    # in this process has its own loop and instance)
    assert asyncio.get_running_loop() not in crilog._Notifier._by_loop


@pytest.mark.asyncio
async def test_follows_share_one_inotify_instance_and_end_without_an_event(tmp_path: Path) -> None:
    """Many follows (the API server's) share one inotify instance; a follow whose container stopped without a
    last write ends at its next force check (`logForceCheckPeriod`), and a follow that is closed early
    releases its watch."""
    running = True
    logs = [tmp_path / f"c{i}" / "0.log" for i in range(5)]
    for log in logs:
        log.parent.mkdir()
        log.write_bytes(_rec(log.parent.name))
    outs: list[list[bytes]] = [[] for _ in logs]
    tasks = [
        asyncio.create_task(_collect(follow_log(log, is_running=lambda: running, force_check=0.2), out))
        for log, out in zip(logs, outs, strict=True)
    ]
    await until(lambda: all(outs), "every first line")
    notifiers = [n for loop, n in crilog._Notifier._by_loop.items() if loop is asyncio.get_running_loop()]
    assert len(notifiers) == 1 and len(notifiers[0].wakes) == len(logs)
    tasks[0].cancel()
    await asyncio.gather(tasks[0], return_exceptions=True)
    assert len(notifiers[0].wakes) == len(logs) - 1
    running = False
    await asyncio.wait_for(asyncio.gather(*tasks[1:]), 20)
    assert [b"".join(o) for o in outs[1:]] == [f"c{i}\n".encode() for i in range(1, 5)]
    assert asyncio.get_running_loop() not in crilog._Notifier._by_loop


@pytest.mark.asyncio
async def test_follow_log_without_inotify_reads_again_at_each_force_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where inotify is missing (not Linux) a follow still sees new lines and ends: the force check alone."""
    monkeypatch.setattr(crilog, "INotify", None)
    log = tmp_path / "0.log"
    running = True
    out: list[bytes] = []
    task = asyncio.create_task(_collect(follow_log(log, is_running=lambda: running, force_check=0.05), out))
    await asyncio.sleep(0.1)
    log.write_bytes(_rec("late"))
    await until(lambda: b"".join(out) == b"late\n", "the line")
    running = False
    await asyncio.wait_for(task, 20)
