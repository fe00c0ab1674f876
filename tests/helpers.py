"""Helpers for tests that start a real Airflow (its components as processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path


def start_airflow(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start `python -m airflow ARGS...` (a component: api-server, scheduler, ...) with `env`, its output into
    `log`, in its own process group (`stop_airflow` ends it with the processes it started)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_airflow(procs: Iterable[subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    """SIGTERM each component's process group, SIGKILL the groups still there after `grace` seconds (in all:
    a test's stack need not shut down cleanly, its folders are thrown away)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
