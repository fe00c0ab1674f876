"""A go into a container whose runner is still starting (a slot prepared ahead is said go to as soon as the
pod's status shows its new container running, before its startup probe passed: core/status.py
`_prepared_state`). The kubelet's exec reaches the container as soon as it runs; the runner, at its start,
removes whatever fast go the slot's state holds (an earlier container's) and only then serves the slot. So
`runner --go` waits until THIS container's runner serves: the serving record names the runner (its pid and
start time), so neither no record nor one an earlier container left (the state outlives it) lets it write.
The startup probe (`runner --up`) waits the same way. Before: the go wrote its spec at once, the runner's
start removed it, and the generation waited for the annotation (here: never)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core.manifest import STARTUP_COMMAND
from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, Slot, script_argv, sh_stage
from tests.unit.test_core_runner_go import go_command, starts

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(
    BUSYBOX is None or base.BWRAP is None,
    reason="needs a static busybox, bwrap and nsenter (a pid namespace)",
)

SLOW_START = """#!{busybox} sh
# the slot's busybox, but for a runner that takes 1.5 s to make its wait FIFO (at its start only)
[ "$1" = mkfifo ] && : > {starting} && {busybox} sleep 1.5
exec {busybox} "$@"
"""


def slow_start(slot: Slot) -> Path:
    """The slot's runner will start slowly; the path it touches then (the container runs: an exec reaches
    it)."""
    wrapper = slot.bin / "busybox"
    starting = slot.state.parent / "starting"
    wrapper.unlink()
    wrapper.write_text(SLOW_START.format(busybox=BUSYBOX, starting=starting))
    wrapper.chmod(0o755)
    return starting


def earlier_record(slot: Slot, runners, kind: str) -> None:
    """What the slot's state holds of an earlier container: nothing, its runner's own serving record (its
    container killed: a pid gone), or one naming a pid 1 that started before this container's."""
    slot.state.mkdir(parents=True, exist_ok=True)  # an emptyDir: there before the container
    if kind == "earlier runner":
        earlier = runners(slot, None, 0)
        assert slot.serving()
        earlier.kill_container()
    elif kind == "earlier pid 1":
        (slot.state / f"{slot.name}.serving").write_text("1 1\n")


@pytest.mark.parametrize("kind", ["none", "earlier runner", "earlier pid 1"])
def test_a_go_before_the_runner_serves_waits_for_it_and_is_taken(slot, runners, kind: str) -> None:
    earlier_record(slot, runners, kind)
    assert (slot.state / f"{slot.name}.serving").exists() == (kind != "none")
    starting = slow_start(slot)
    runner = runners(slot, None, 0)  # a prepared slot's new container: no generation in its env or volume
    base.wait_file(starting)  # the container runs (the kubelet's exec reaches it), its runner is starting
    stage = sh_stage('echo "ran by the early go"')
    data = slot.spec(stage, 1).encode()
    env = {"KC_SLOT": slot.name, "KC_STATE": str(slot.state)}
    probe = subprocess.Popen(base.in_container(runner, script_argv(STARTUP_COMMAND, slot.bin)), env=env)
    spec = slot.state.parent / "spec"  # the exec's stdin, all of it sent at once
    spec.write_bytes(data)
    with spec.open("rb") as stdin:
        early = subprocess.Popen(
            base.in_container(runner, go_command(slot, len(data))),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=runner.env,
        )
    try:
        time.sleep(0.5)  # the runner is still starting (its FIFO comes 1.5 s after it started)
        assert early.poll() is None, early.communicate()
        assert probe.poll() is None  # both wait: no record of this runner yet
        out, err = early.communicate(timeout=base.TIMEOUT)
        assert early.returncode == 0, err
        assert probe.wait(timeout=base.TIMEOUT) == 0
    finally:
        for process in (early, probe):
            process.kill()
            process.wait()
    assert b"not taken" not in out
    result = runner.result(1)  # the go alone delivered it: the annotation never came
    assert result.exit_code == 0
    time.sleep(0.3)
    assert starts(runner, 1) == 1 and runner.seen.count("ran by the early go") == 1


def test_the_serving_record_names_the_runner(slot, runners) -> None:
    """The record is the runner's pid (1: its container's pid namespace) and its start time."""
    runners(slot, None, 0)
    assert slot.serving()
    start = base.start_time(base.pid_1(slot.runner.process))
    assert (slot.state / f"{slot.name}.serving").read_text() == f"1 {start}\n"
