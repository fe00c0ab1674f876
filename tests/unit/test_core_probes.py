"""The slots' startup probe waits for the runner's serving record instead of failing (a failed probe is an
`Unhealthy` warning event): it blocks while the record is missing or names no live runner (an earlier
container's: the state outlives it), and passes once the runner made it (its pid and start time)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core.manifest import STARTUP_COMMAND
from airflow_kruise_chain.core.runnerinstall import runner_script
from tests.unit.test_core_runner import script_argv, start_time

BUSYBOX = shutil.which("busybox")
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="no busybox on PATH")


def record(pid: int) -> str:
    """What a runner of pid `pid` writes: its pid and start time (/proc/PID/stat's field 22)."""
    return f"{pid} {start_time(pid)}\n"


def test_startup_probe_waits_for_the_serving_record(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "busybox").symlink_to(str(BUSYBOX))
    (tmp_path / "bin" / "runner").write_text(runner_script())
    state = tmp_path / "state"
    state.mkdir()
    serving = state / "slot-a.serving"
    command = script_argv(STARTUP_COMMAND, tmp_path / "bin")
    probe = subprocess.Popen(command, env={"KC_SLOT": "slot-a", "KC_STATE": str(state)})
    try:
        time.sleep(0.3)
        assert probe.poll() is None  # still waiting: no failure
        pid, start = record(os.getpid()).split()
        for stale in (
            "",
            f"{pid} {int(start) + 1}\n",
            "999999999 1\n",
        ):  # no runner's, a pid 1 since restarted
            serving.write_text(stale)
            time.sleep(0.3)
            assert probe.poll() is None, stale
        serving.write_text(record(os.getpid()))
        assert probe.wait(timeout=10) == 0
    finally:
        probe.kill()
        probe.wait()
