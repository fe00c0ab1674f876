"""Container logs in the CRI format (`<RFC3339 ns> stdout|stderr F|P <text>`): written as containerd's CRI
plugin writes them (`pkg/cri/io`: lines longer than 16 KiB split into P(artial) records) and read back as the
kubelet serves `pods/log` (`pkg/kubelet/kuberuntime/logs/logs.go` `ReadLogs`, now
`staging/src/k8s.io/cri-client/pkg/logs/logs.go`: sinceTime, tailLines, limitBytes, timestamps, follow on
inotify)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, ClassVar

try:
    from inotify_simple import INotify, flags
except ImportError:  # not Linux: a follow reads again every LOG_FORCE_CHECK_PERIOD only
    INotify = None  # type: ignore[assignment,misc]

MAX_LOG_LINE = 16 * 1024  # containerd splits longer lines into P(artial) records


FOLLOW_READ_BYTES = 64 * 1024
"""A followed log is read this much at a time: the kubelet streams a log record by record (logs.go `ReadLogs`,
a bufio reader over the file), never the whole backlog at once."""

LOG_FORCE_CHECK_PERIOD = 1.0
"""cri-client `logs.go` `logForceCheckPeriod`: a follow that saw no event in its log's directory for this long
reads the log again (and checks the container's state before it waits again)."""

_DIR_EVENTS = (
    0
    if INotify is None
    else flags.CREATE
    | flags.MODIFY
    | flags.ATTRIB
    | flags.DELETE
    | flags.DELETE_SELF
    | flags.MOVED_FROM
    | flags.MOVED_TO
    | flags.MOVE_SELF
)
"""fsnotify's inotify mask for a watched directory (`backend_inotify.go`: its Create, Write, Remove, Rename
and Chmod events)."""


_ts_cache: tuple[int, str] = (-1, "")


def _now_ts() -> bytes:
    """Current UTC time as `2026-12-02T18:20:01.123456789Z` (fixed nanosecond width, as containerd writes)."""
    global _ts_cache
    ns = time.time_ns()
    sec, frac = divmod(ns, 1_000_000_000)
    if _ts_cache[0] != sec:
        _ts_cache = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{_ts_cache[1]}.{frac:09d}Z".encode()


class CriLogWriter:
    """Appends stdout/stderr chunks to a CRI log file, one record per line, as they arrive."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._partial: dict[int, bytes] = {1: b"", 2: b""}

    @staticmethod
    def _records(out: list[bytes], ts: bytes, stream: bytes, line: bytes) -> None:
        while len(line) > MAX_LOG_LINE:
            out.append(b"%s %s P %s\n" % (ts, stream, line[:MAX_LOG_LINE]))
            line = line[MAX_LOG_LINE:]
        out.append(b"%s %s F %s\n" % (ts, stream, line))

    def feed(self, fd: int, data: bytes) -> None:
        stream = b"stdout" if fd == 1 else b"stderr"
        buf = self._partial.get(fd, b"") + data
        out: list[bytes] = []
        ts = _now_ts()
        start = 0
        while (nl := buf.find(b"\n", start)) != -1:
            self._records(out, ts, stream, buf[start:nl])
            start = nl + 1
        rest = buf[start:]
        while len(rest) > MAX_LOG_LINE:
            out.append(b"%s %s P %s\n" % (ts, stream, rest[:MAX_LOG_LINE]))
            rest = rest[MAX_LOG_LINE:]
        self._partial[fd] = rest
        if out:
            self._write(b"".join(out))

    def flush(self, fd: int) -> None:
        """End of a stream: an unterminated last line becomes a full record (as containerd does at EOF)."""
        rest = self._partial.get(fd, b"")
        self._partial[fd] = b""
        if rest:
            out: list[bytes] = []
            self._records(out, _now_ts(), b"stdout" if fd == 1 else b"stderr", rest)
            self._write(b"".join(out))

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        for fd in (1, 2):
            self.flush(fd)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fixed_ts(dt: datetime) -> bytes:
    """`dt` in the fixed-width log timestamp format (naive datetimes are taken as UTC)."""
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()


def _rfc3339nano(ts: bytes) -> bytes:
    """Go's RFC3339Nano rendering (trailing zeros of the fraction dropped) of a fixed-width timestamp."""
    head, _, frac = ts[:-1].partition(b".")
    frac = frac.rstrip(b"0")
    return head + (b"." + frac if frac else b"") + b"Z"


def _format_record(line: bytes, since: bytes | None, timestamps: bool) -> bytes | None:
    """One CRI record (without its newline) -> the bytes `pods/log` returns for it, or None to skip it."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    ts, _stream, tag = parts[0], parts[1], parts[2]
    text = parts[3] if len(parts) == 4 else b""
    if since is not None and ts < since:
        return None
    if not tag.startswith(b"P"):
        text += b"\n"
    return _rfc3339nano(ts) + b" " + text if timestamps else text


def _tail_offset(f: BinaryIO, size: int, n: int) -> int:
    """Offset where the last `n` lines of an open file of length `size` start (the kubelet's tail logic)."""
    if n < 0:
        return 0
    block = 64 * 1024
    pos = size
    count = 0
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        idx = len(chunk)
        while (idx := chunk.rfind(b"\n", 0, idx)) != -1:
            count += 1
            if count == n + 1:  # the (n+1)-th newline from the end precedes the last n lines
                return start + idx + 1
        pos = start
    return 0


def read_log(
    path: Path | str,
    *,
    since_time: datetime | None = None,
    timestamps: bool = False,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
) -> bytes:
    """The container log as `pods/log` returns it (no follow). Missing file -> b"".

    As the kubelet: `tail_lines` picks the last N records first, then `since_time` drops older records;
    `limit_bytes` cuts the output (even mid-line); `timestamps` prefixes each record with its RFC3339Nano
    time.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return b""
    with f:
        size = os.fstat(f.fileno()).st_size
        offset = _tail_offset(f, size, tail_lines) if tail_lines is not None else 0
        f.seek(offset)
        data = f.read(size - offset)
    since = _fixed_ts(since_time) if since_time is not None else None
    out: list[bytes] = []
    total = 0
    lines = data.split(b"\n")
    for line in lines[:-1]:  # the last element is an incomplete line (or empty)
        rec = _format_record(line, since, timestamps)
        if rec is None:
            continue
        out.append(rec)
        total += len(rec)
        if limit_bytes is not None and total >= limit_bytes:
            break
    result = b"".join(out)
    return result[:limit_bytes] if limit_bytes is not None else result


class _Notifier:
    """One inotify instance per event loop, shared by the loop's follows. (The kubelet makes an fsnotify
    watcher per follow; one shared instance keeps the emulator within the user's few inotify instances,
    `fs.inotify.max_user_instances`, 128 by default.) It lives while a follow watches something."""

    _by_loop: ClassVar[dict[asyncio.AbstractEventLoop, _Notifier]] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.inotify = INotify(nonblocking=True)
        self.wakes: dict[int, set[_Wake]] = {}
        loop.add_reader(self.inotify.fileno(), self._dispatch)

    @classmethod
    def watch(cls, directory: Path, wake: _Wake) -> int | None:
        """Watch `directory` for `wake`; None if it cannot be watched (no inotify, no such directory)."""
        if INotify is None:
            return None
        loop = asyncio.get_running_loop()
        notifier = cls._by_loop.get(loop)
        try:
            if notifier is None:
                notifier = cls._by_loop[loop] = cls(loop)
            wd = notifier.inotify.add_watch(directory, _DIR_EVENTS)
        except OSError:
            if notifier is not None and not notifier.wakes:
                notifier.close()
            return None
        notifier.wakes.setdefault(wd, set()).add(wake)
        return wd

    @classmethod
    def unwatch(cls, wd: int, wake: _Wake) -> None:
        notifier = cls._by_loop.get(asyncio.get_running_loop())
        if notifier is None or wd not in notifier.wakes:
            return
        wakes = notifier.wakes[wd]
        wakes.discard(wake)
        if not wakes:
            del notifier.wakes[wd]
            with contextlib.suppress(OSError):
                notifier.inotify.rm_watch(wd)
            if not notifier.wakes:
                notifier.close()

    def close(self) -> None:
        if self._by_loop.get(self.loop) is self:
            del self._by_loop[self.loop]
            self.loop.remove_reader(self.inotify.fileno())
            self.inotify.close()

    def _dispatch(self) -> None:
        try:
            events = self.inotify.read(timeout=0)
        except OSError:
            return
        for event in events:
            if event.mask & flags.Q_OVERFLOW:  # events were lost: every follow reads again
                for wakes in self.wakes.values():
                    for wake in wakes:
                        wake.post(flags.MODIFY, "")
                continue
            for wake in self.wakes.get(event.wd, ()):
                wake.post(event.mask, event.name)
            if event.mask & flags.IGNORED:  # the directory went: the kernel dropped the watch
                self.wakes.pop(event.wd, None)
        if not self.wakes:
            self.close()


class _Wake:
    """What one follow waits for: the events of its directory since it last waited (none lost in between)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.found = False
        self.recreated = False
        self.event = asyncio.Event()

    def post(self, mask: int, name: str) -> None:
        # fsnotify's Create (IN_CREATE, IN_MOVED_TO) of the log's own name: the file was recreated
        if mask & (flags.CREATE | flags.MOVED_TO) and name == self.name:
            self.recreated = True
        self.found = True
        self.event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait for an event or `timeout` (logs.go `logForceCheckPeriod`); True if the log was recreated."""
        if not self.found:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
        recreated = self.recreated
        self.found = self.recreated = False
        self.event.clear()
        return recreated


def _read_more(f: BinaryIO) -> bytes:
    """The next bytes of a followed log: one read per wake-up of the follow."""
    return f.read(FOLLOW_READ_BYTES)


async def follow_log(
    path: Path | str,
    *,
    since_time: datetime | None = None,
    timestamps: bool = False,
    tail_lines: int | None = None,
    is_running: Callable[[], bool],
    force_check: float = LOG_FORCE_CHECK_PERIOD,
) -> AsyncIterator[bytes]:
    """Yield the log's matching records, then new ones as they are appended; end once `is_running()` is false
    and the file is drained.

    As the kubelet follows a log (cri-client `logs.go` `ReadLogs` and `waitLogs`): it watches the log's
    directory (inotify, as fsnotify; from before its first read) and at the end of the file reads again on
    any event there, or after `force_check` (`logForceCheckPeriod`, 1 s) without one; before each wait it
    checks that the container still runs (`isContainerRunning`), so the stream ends once a stopped
    container's log is drained. A Create of the log's name (a rotation: `0.log` renamed away and created
    anew) reopens the log from its start. A log file not there yet is waited for the same way (the kubelet
    would fail: its runtime creates the file before the container starts)."""
    since = _fixed_ts(since_time) if since_time is not None else None
    path = Path(path)
    wake = _Wake(path.name)
    wd = _Notifier.watch(path.parent, wake)  # before the first read: no write after it goes unseen
    f: BinaryIO | None = None
    try:
        while f is None:
            running = is_running()
            try:
                f = open(path, "rb")
            except FileNotFoundError:
                if not running:
                    return
                await wake.wait(force_check)
        if tail_lines is not None:
            f.seek(_tail_offset(f, os.fstat(f.fileno()).st_size, tail_lines))
        buf = b""
        while True:
            running = is_running()
            chunk = _read_more(f)
            if chunk:
                buf += chunk
                nl = buf.rfind(b"\n")
                if nl == -1:
                    continue
                complete, buf = buf[:nl], buf[nl + 1 :]
                out = [r for line in complete.split(b"\n") if (r := _format_record(line, since, timestamps))]
                if out:
                    yield b"".join(out)
                continue
            if not running:
                return
            if await wake.wait(force_check):
                try:
                    new = open(path, "rb")
                except FileNotFoundError:
                    continue
                f.close()
                f, buf = new, b""
    finally:
        if f is not None:
            f.close()
        if wd is not None:
            _Notifier.unwatch(wd, wake)
