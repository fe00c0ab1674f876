"""One generation's output, picked out of its slot's log as a task log shows it, with a count that lets a
reader that takes over (a trigger, then the resumed task; a stream opened again) log each line once."""

from __future__ import annotations

from collections import deque

from .lines import clip
from .status import ResultMarker, StartMarker, StreamMarker, matches, parse_marker

TAIL_LINES = 20
"""output lines kept (clipped) for a result's `log_tail`"""


class GenerationOutput:
    """Feed a slot's log lines in order; `feed` says which to log.

    Lines before the generation's start marker (earlier generations, the parked runner) are dropped. From the
    start marker on, every line shown is counted (`counted`), the start marker included; the first `skip` of
    them are returned apart: a reader before this one logged them. An empty line is held back until another
    line follows: the runner ends a line the stage left open before its result, so one empty line just before
    the result is not the stage's (only one is held: a flood of empty lines is not buffered). `tail` keeps
    the last output lines, clipped; `result` is the generation's result marker once read (only a marker
    with the generation's token counts: a stage cannot forge one). Memory: the tail, whatever the log's size.

    The runner marks each stream's begin and end (`core.wire`: the start and result lines on stdout,
    ``stderr-start`` and ``stderr-end`` on stderr; older runners printed the start and result lines on both):
    output is shown from the first begin line (shown itself; the other stream's is not), and goes on after the
    result line until the other stream's end is read too (`complete`; a lone result line without
    ``streams=2`` completes at once). `started` is the start line, once read.
    """

    def __init__(self, generation: int, token: str, *, skip: int = 0, tail: int = TAIL_LINES) -> None:
        self.generation = generation
        self.token = token
        self.skip = skip
        self.counted = 0
        self.tail: deque[str] = deque(maxlen=tail)
        self.started: StartMarker | None = None
        self.result: ResultMarker | None = None
        self.result_line = ""
        self.complete = False
        """the result is in and so is all of the stage's output (both copies of the result line read)"""
        self._copies = 0
        self._showing = False
        self._blank = False

    def reopen(self) -> None:
        """The log is read again from the same start (a stream opened again, or another reader of the same
        container): lines counted so far are skipped when they come again."""
        self.skip = max(self.skip, self.counted)
        self.counted = 0
        self.started = None  # read again with the log
        self._copies = 0
        self._showing = False
        self._blank = False

    def feed(self, line: str) -> tuple[list[str], list[str]]:
        """The lines `line` releases (none, itself, or itself after a held empty line): (already logged by an
        earlier reader, to log)."""
        if self.complete:
            return [], []
        marker = parse_marker(line)
        ours = matches(marker, self.generation, self.token)
        begin = isinstance(marker, StartMarker) or (isinstance(marker, StreamMarker) and not marker.end)
        if ours and begin:
            if isinstance(marker, StartMarker) and self.started is None:
                self.started = marker
            if self._showing:  # the other stream's begin
                return [], []
            self._showing = True
            self._blank = False
            self.tail.clear()
            return self._count([line])
        if ours and isinstance(marker, (ResultMarker, StreamMarker)):
            if isinstance(marker, ResultMarker) and self.result is None:
                self.result = marker
                self.result_line = line
            self._copies += 1
            self.complete = self.result is not None and self._copies >= self.result.streams
            self._blank = False  # the runner's own line end before its result line or stream end
            return [], []
        if not self._showing:
            return [], []
        if line == "" and not self._blank:
            self._blank = True
            return [], []
        # a held empty line is released by any line after it; an empty line keeps one held
        shown = ["", line] if self._blank and line else [line]
        self._blank = self._blank and not line
        self.tail.extend(clip(one) for one in shown)
        return self._count(shown)

    def take_whole(self, lines: list[str]) -> list[str] | None:
        """All of the generation's lines at once, from its start line to its result line (a fast go's
        capture, `core.fastgo.Capture`: both streams whole, so no stream end is awaited): the lines to log,
        or None, nothing taken, when they are not that (not its start line first and its result line last,
        with the token), or this output has read lines already (the log is read instead)."""
        if self.counted or self.skip or self.started is not None or len(lines) < 2:
            return None
        start, result = parse_marker(lines[0]), parse_marker(lines[-1])
        if not (
            isinstance(start, StartMarker)
            and matches(start, self.generation, self.token)
            and isinstance(result, ResultMarker)
            and matches(result, self.generation, self.token)
        ):
            return None
        shown: list[str] = []
        for line in lines:
            shown += self.feed(line)[1]
        self.complete = self.result is not None
        return shown if self.complete else None

    def _count(self, lines: list[str]) -> tuple[list[str], list[str]]:
        logged = max(0, min(len(lines), self.skip - self.counted))
        self.counted += len(lines)
        return lines[:logged], lines[logged:]
