"""What `kruise_local.pytest_plugin` does to the test process besides its fixtures."""

from __future__ import annotations

import ast
import sys
import threading
import time

SOURCE = "\n".join(f"def f{i}(a, b):\n    return [x * {i} for x in (a, b) if x]" for i in range(40))


class _Finalized:
    """Garbage whose finalizer runs Python code: collected mid-parse, it lets the other thread in."""

    def __del__(self) -> None:
        sum(range(50))


def _parse_at_depth(depth: int, errors: list[str], until: float) -> None:
    if depth:
        _parse_at_depth(depth - 1, errors, until)
        return
    while time.monotonic() < until and not errors:
        junk = [_Finalized() for _ in range(20)]
        for j in junk:
            j.me = j  # type: ignore[attr-defined]  # a cycle: the cyclic collector frees it mid-parse
        del junk
        try:
            ast.parse(SOURCE)
        except SystemError as e:
            errors.append(str(e))


def test_two_threads_can_parse_source_at_once() -> None:
    """A cluster thread that formats a traceback (CPython 3.11's traceback.py parses the line to place its
    carets) while the test thread parses too (hypothesis describing a strategy, pytest rewriting asserts):
    unserialized, CPython before 3.13 fails one of them with "SystemError: AST constructor recursion depth
    mismatch" (its depth count is interpreter-wide); this race failed CI runs three times. Two threads parse
    at different stack depths with switches forced: without the plugin's lock 3.11.7 fails within 0.1 s."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors: list[str] = []
    until = time.monotonic() + 1.5
    try:
        threads = [threading.Thread(target=_parse_at_depth, args=(d, errors, until)) for d in (5, 60)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
