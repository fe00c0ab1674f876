"""The slots' startup probe waits for the runner's serving record instead of failing (a failed probe is an
`Unhealthy` warning event): it blocks while the record is missing and passes once the runner made it."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core.manifest import STARTUP_COMMAND
from airflow_kruise_chain.core.runnerinstall import runner_script
from tests.unit.test_core_runner import script_argv

BUSYBOX = shutil.which("busybox")
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="no busybox on PATH")


def test_startup_probe_waits_for_the_serving_record(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "busybox").symlink_to(str(BUSYBOX))
    (tmp_path / "bin" / "runner").write_text(runner_script())
    state = tmp_path / "state"
    state.mkdir()
    command = script_argv(STARTUP_COMMAND, tmp_path / "bin")
    probe = subprocess.Popen(command, env={"KC_SLOT": "slot-a", "KC_STATE": str(state)})
    time.sleep(0.3)
    assert probe.poll() is None  # still waiting: no failure
    (state / "slot-a.serving").touch()
    assert probe.wait(timeout=10) == 0
