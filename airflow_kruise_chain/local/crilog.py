"""Container logs in the CRI format (`<RFC3339 ns> stdout|stderr F|P <text>`): written as containerd's CRI
plugin writes them (`pkg/cri/io`: lines longer than 16 KiB split into P(artial) records) and read back as the
kubelet serves `pods/log` (`pkg/kubelet/kuberuntime/logs/logs.go` `ReadLogs`: sinceTime, tailLines,
limitBytes, timestamps, follow)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

MAX_LOG_LINE = 16 * 1024  # containerd splits longer lines into P(artial) records


FOLLOW_READ_BYTES = 64 * 1024
"""A followed log is read this much at a time: the kubelet streams a log record by record (logs.go `ReadLogs`,
a bufio reader over the file), never the whole backlog at once."""


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


async def follow_log(
    path: Path | str,
    *,
    since_time: datetime | None = None,
    timestamps: bool = False,
    tail_lines: int | None = None,
    is_running: Callable[[], bool],
    poll: float = 0.05,
) -> AsyncIterator[bytes]:
    """Yield the log's matching records, then new ones as they are appended; end once `is_running()` is false
    and the file is drained."""
    since = _fixed_ts(since_time) if since_time is not None else None
    while True:
        try:
            f = open(path, "rb")
            break
        except FileNotFoundError:
            if not is_running():
                return
            await asyncio.sleep(poll)
    with f:
        if tail_lines is not None:
            f.seek(_tail_offset(f, os.fstat(f.fileno()).st_size, tail_lines))
        buf = b""
        while True:
            running = is_running()
            chunk = f.read(FOLLOW_READ_BYTES)
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
            await asyncio.sleep(poll)
