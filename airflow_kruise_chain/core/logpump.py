"""A log stream read on a thread, for the blocking follow loop (`StageDriver.follow`, core/followloop.py): its
reader waits for the next line with a time limit, which a blocking HTTP stream cannot give."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable

PUMP_LINES = 1024
"""log lines the thread may read ahead of the reader"""
END = object()
"""`LogPump.next`: the stream ended (after the exception that broke it, if any)"""
TIMEOUT = object()
"""`LogPump.next`: nothing came before its time"""


class LogPump:
    """Reads the lines of `open_stream()` on a daemon thread into a queue: lines, then an exception if the
    stream broke, then `END`. At most `PUMP_LINES` lines wait (the stream is read no faster than they are
    taken); once `close`d, the thread stops at its next line."""

    def __init__(self, open_stream: Callable[[], Iterable[str]], name: str) -> None:
        self._lines: queue.Queue[object] = queue.Queue(maxsize=PUMP_LINES)
        self._stop = threading.Event()
        self._open = open_stream
        threading.Thread(target=self._pump, name=name, daemon=True).start()

    def next(self, until: float | None) -> object:
        """The next line (str), the exception that broke the stream, `END`, or `TIMEOUT` at `until`
        (monotonic; None: no limit)."""
        try:
            if until is None:
                return self._lines.get()
            return self._lines.get(timeout=max(0.0, until - time.monotonic()))
        except queue.Empty:
            return TIMEOUT

    def close(self) -> None:
        self._stop.set()

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._lines.put(item, timeout=0.5)
                return True
            except queue.Full:
                continue
        return False

    def _pump(self) -> None:
        try:
            for line in self._open():
                if not self._put(line):
                    return
        except Exception as e:  # handed to the reader, which decides
            self._put(e)
        finally:
            self._put(END)
