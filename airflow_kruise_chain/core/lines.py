"""Log lines of any length, in linear time and bounded memory: what is kept of a line, and how it is cut."""

from __future__ import annotations

import re

LINE_HEAD = 16 * 1024
"""Bytes kept from the start of a line longer than `LINE_HEAD` + `LINE_TAIL`."""
LINE_TAIL = 48 * 1024
"""Bytes kept from the end of such a line: more than the longest runner result line (16 KiB of outputs in
base64 plus its fields), which may end a stage's unterminated output."""
TAIL_LINE_CHARS = 2048
"""Characters kept of each stage log line in a result's `log_tail` (XCom) and in error messages."""


NOTE_ROOM = 64
"""Longest note `clip` inserts."""
_BYTES_CUT = re.compile(r" …\[(\d+) bytes cut\]… ")


def cut_note(count: int, unit: str) -> str:
    """What replaces the middle of a cut line: says how much was cut."""
    return f" …[{count} {unit} cut]… "


def clip(line: str, limit: int = TAIL_LINE_CHARS) -> str:
    """`line`, or its start and end with a note of how much was cut, at most about `limit` characters.

    A line `LineSplitter` already cut keeps that count in the note: ``N bytes and M characters cut``; a line
    `clip` returned is returned as it is."""
    if len(line) <= limit + NOTE_ROOM:
        return line
    head = limit // 4
    tail = limit - head
    middle = line[head:-tail]
    earlier = _BYTES_CUT.search(middle)
    note = (
        cut_note(len(middle), "characters")
        if earlier is None
        else cut_note(int(earlier.group(1)), f"bytes and {len(middle) - len(earlier.group(0))} characters")
    )
    return line[:head] + note + line[-tail:]


class LineSplitter:
    """Splits a byte stream into lines in linear time, keeping at most `head` + `tail` bytes of each line.

    Each chunk is searched for newlines once; the bytes of a long line beyond its head go to a tail buffer
    trimmed to `tail` whenever it doubles, so memory stays O(head + tail) whatever the line length.
    """

    def __init__(self, head: int = LINE_HEAD, tail: int = LINE_TAIL) -> None:
        self.head = head
        self.tail = tail
        self._head = bytearray()
        self._tail = bytearray()
        self._cut = 0

    def feed(self, chunk: bytes) -> list[str]:
        """The lines `chunk` completes (without their newline)."""
        lines = []
        view = memoryview(chunk)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._add(view[start:end])
            lines.append(self._take())
            start = end + 1
        self._add(view[start:])
        return lines

    def finish(self) -> str | None:
        """The last, unterminated line (None if the stream ended with a newline)."""
        return self._take() if self._head or self._tail else None

    def _add(self, piece: memoryview) -> None:
        room = self.head - len(self._head)
        if room > 0:
            self._head += piece[:room]
            piece = piece[room:]
        if not piece:
            return
        if len(piece) > self.tail:
            self._cut += len(self._tail) + len(piece) - self.tail
            self._tail[:] = piece[-self.tail :]
            return
        self._tail += piece
        if len(self._tail) > 2 * self.tail:
            self._trim()

    def _trim(self) -> None:
        excess = len(self._tail) - self.tail
        if excess > 0:
            del self._tail[:excess]
            self._cut += excess

    def _take(self) -> str:
        self._trim()
        if self._cut:
            line = (
                self._head.decode(errors="replace")
                + cut_note(self._cut, "bytes")
                + self._tail.decode(errors="replace")
            )
        else:
            line = (self._head + self._tail).decode(errors="replace")
        self._head.clear()
        self._tail.clear()
        self._cut = 0
        return line
