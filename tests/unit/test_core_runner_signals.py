"""A stop signal that reaches the runner while it records a generation's result (`kc_phase=recording`) is
counted, not acted on at once (the result must be safe first), and the runner leaves as soon as the result
is recorded, on every path that records one: a generation its stage ran, one that was interrupted (its
`started` record without an exit code, found by a restarted runner) and one whose records are gone
(`lost-record`). Before bbfefb4 the last two recorded the result and then parked until the kubelet's SIGKILL.

Deterministic: the runner's busybox is a wrapper that holds the runner's `mkdir` of a generation's records
folder (the one program `kc_finish` always runs after `kc_phase=recording`, before it writes the records;
its `kc_now` starts none where busybox ash has EPOCHREALTIME) until the test lets it go. The test waits
until the runner is held there, signals it, then lets it go: the signal always arrives while the runner
records."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, Runner, Slot, sh_stage, wait_file

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")

WRAPPER = """#!{busybox} sh
# the runner's busybox: `mkdir` of a records folder (no option: not the state's `mkdir -p`, not HOME's
# `mkdir -m`) waits while {hold} exists (once), until {release} exists
if [ "$1" = mkdir ] && [ "$2" = "${{2#-}}" ] && [ -e {hold} ]; then
	{busybox} rm -f {hold}
	: >{reached}
	until [ -e {release} ]; do {busybox} sleep 0.01; done
fi
exec {busybox} "$@"
"""


class Hold:
    """Holds the runner's next `mkdir` of a records folder (armed) until `release`."""

    def __init__(self, slot: Slot, tmp: Path) -> None:
        self.hold, self.reached, self.release_file = tmp / "hold", tmp / "reached", tmp / "release"
        wrapper = slot.bin / "busybox"
        wrapper.unlink()
        wrapper.write_text(
            WRAPPER.format(busybox=BUSYBOX, hold=self.hold, reached=self.reached, release=self.release_file)
        )
        wrapper.chmod(0o755)

    def arm(self) -> None:
        self.hold.touch()

    def wait_reached(self) -> None:
        wait_file(self.reached)

    def release(self) -> None:
        self.release_file.touch()


def stop_while_recording(runner: Runner, hold: Hold) -> None:
    """The kubelet's SIGTERM while the runner is held in `kc_finish`, then the runner let go."""
    hold.wait_reached()
    os.kill(base.pid_1(runner.process), signal.SIGTERM)
    time.sleep(0.2)  # not needed for the order (the signal is pending before the release), only to be fair
    hold.release()


def exits_0(runner: Runner) -> bool:
    """Whether the runner left (exit 0) after recording, rather than park until a SIGKILL."""
    try:
        return runner.process.wait(timeout=base.TIMEOUT) == 0
    except subprocess.TimeoutExpired:
        return False


def test_a_sigterm_while_an_interrupted_generation_is_recorded_ends_the_runner_after_the_record(
    slot, runners, tmp_path: Path
) -> None:
    hold = Hold(slot, tmp_path)
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"; touch "$CHAIN_SCRATCH/running"; sleep 30')
    first = runners(slot, stage, 2)
    wait_file(slot.scratch / "running")
    first.kill_container()  # generation 2 started, never ended
    hold.arm()
    restarted = runners(slot, stage, 2)
    stop_while_recording(restarted, hold)
    result = restarted.result(2)
    assert (result.exit_code, result.reason) == (137, "interrupted")
    assert (slot.gen_dir(2) / "exit_code").read_text() == "137\n"
    assert exits_0(restarted), "the runner parked after recording instead of leaving (it was stopped)"
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_a_sigterm_while_a_lost_generation_is_recorded_ends_the_runner_after_the_record(
    slot, runners, tmp_path: Path
) -> None:
    hold = Hold(slot, tmp_path)
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"')
    first = runners(slot, stage, 3)
    assert first.result(3).exit_code == 0
    first.kill_container()
    shutil.rmtree(slot.gen_dir(3))  # its records are gone
    hold.arm()
    restarted = runners(slot, stage, 3)
    stop_while_recording(restarted, hold)
    result = restarted.result(3)
    assert (result.exit_code, result.reason) == (70, "lost-record")
    assert exits_0(restarted), "the runner parked after recording instead of leaving (it was stopped)"
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_a_sigterm_while_a_finished_stage_is_recorded_ends_the_runner_after_the_record(
    slot, runners, tmp_path: Path
) -> None:
    hold = Hold(slot, tmp_path)
    stage = sh_stage('echo running; until [ -e "$CHAIN_SCRATCH/end" ]; do sleep 0.02; done; exit 4')
    runner = runners(slot, stage, 1)
    runner.wait_line(lambda line: line == "running")  # its start's `mkdir` has run
    hold.arm()
    (slot.scratch / "end").touch()
    stop_while_recording(runner, hold)
    result = runner.result(1)
    # the stage had ended by itself: its own exit code; the signal only ends the runner once it is recorded
    assert (result.exit_code, result.reason) == (4, "completed")
    assert exits_0(runner), "the runner parked after recording instead of leaving (it was stopped)"
