"""The fast go at the runner (`runner --go`, `core/fastgo.py`): both deliveries of a generation, the exec's
and the annotation's, start it exactly once, in any order, lost, duplicated or late, across a runner
restart; a stale one never starts; a spec a stage plants in the slot's state is never read."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core.fastgo import GO_COMMAND
from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, Runner, Slot, script_argv, sh_stage

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")


def go_command(slot: Slot, length: int) -> list[str]:
    """What the task's exec runs in the slot: `runner --go LENGTH` (the spec goes on stdin), as the kernel
    runs it: `busybox sh runner --go LENGTH`."""
    return script_argv([*GO_COMMAND, str(length)], slot.bin)


def go(
    slot: Slot, runner: Runner, spec: str, length: int | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The task's exec: the spec on stdin, with the container's env (as `pods/exec` gives it)."""
    data = spec.encode()
    command = base.in_container(runner, go_command(slot, len(data) if length is None else length))
    return subprocess.run(command, input=data, env=runner.env, capture_output=True, timeout=10)


def reading_stdin(process: subprocess.Popen) -> None:
    """Wait until the `--go` process reads its spec from stdin (its `head` child runs: the place the spec goes
    is open); under nsenter (`in_container`) a grandchild."""
    deadline = time.monotonic() + base.TIMEOUT
    while True:
        todo, children = [str(process.pid)], []
        while todo:
            pid = todo.pop()
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
                children += kids
                todo += kids
        for child in children:
            with contextlib.suppress(OSError), open(f"/proc/{child}/cmdline", "rb") as f:
                if b"head" in f.read().split(b"\0"):
                    return
        assert time.monotonic() < deadline, "the exec never read its stdin"
        time.sleep(0.01)


def starts(runner: Runner, generation: int) -> int:
    """How many times the runner started `generation` (its start marker on stdout, once per start)."""
    return sum(line.startswith(f"::kruise-chain:: start gen={generation} ") for line in runner.drain())


def wait_gone(path: Path) -> None:
    deadline = time.monotonic() + base.TIMEOUT
    while path.exists():
        assert time.monotonic() < deadline, f"{path} is still there"
        time.sleep(0.02)


def test_the_exec_alone_starts_a_generation_once(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage('echo "ran by exec"')
    done = go(slot, runner, slot.spec(stage, 1))
    assert done.returncode == 0, done.stderr
    assert runner.result(1).exit_code == 0  # the annotation never came (lost, or the kubelet is slow)
    time.sleep(0.3)
    assert starts(runner, 1) == 1 and runner.seen.count("ran by exec") == 1
    assert not (slot.state / f"{slot.name}.go").exists()  # consumed with the generation's records


def test_exec_duplicated_and_annotation_late_start_it_once(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage("echo once; sleep 0.3")
    spec = slot.spec(stage, 1)
    assert go(slot, runner, spec).returncode == 0
    assert go(slot, runner, spec).returncode == 0  # a retried exec
    runner.wait_line(lambda line: line == "once")
    slot.assign(stage, 1)  # the kubelet's volume refresh, late
    assert runner.result(1).exit_code == 0
    assert go(slot, runner, spec).returncode == 0  # and once more after it ended
    time.sleep(0.5)
    assert starts(runner, 1) == 1 and runner.seen.count("once") == 1


def test_a_duplicated_exec_still_writing_when_the_runner_starts_it(slot, runners) -> None:
    """The runner empties its state when it starts a generation; a duplicate exec of that generation still
    writing its spec then is taken all the same (it failed under load before: its temporary file was
    removed mid-way, exit 65 'not a run spec' or 74)."""
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage("echo once; sleep 0.3")
    spec = slot.spec(stage, 1)
    data = spec.encode()
    late = subprocess.Popen(
        base.in_container(runner, go_command(slot, len(data))),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=runner.env,
    )
    try:
        reading_stdin(late)
        assert go(slot, runner, spec).returncode == 0  # the first exec: the runner starts generation 1
        runner.wait_line(lambda line: line == "once")  # its state emptied at the start
        _, err = late.communicate(data, timeout=10)  # then the duplicate's spec arrives
    finally:
        late.kill()
    assert late.returncode == 0, err
    assert runner.result(1).exit_code == 0
    slot.assign(stage, 1)  # and the annotation, late
    time.sleep(0.5)
    assert starts(runner, 1) == 1 and runner.seen.count("once") == 1
    assert not list(slot.state.glob(f"{slot.name}.go.*"))  # no temporary file left behind


def test_annotation_first_then_a_late_exec(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage("echo once")
    slot.assign(stage, 1)
    assert runner.result(1).exit_code == 0
    assert go(slot, runner, slot.spec(stage, 1)).returncode == 0
    time.sleep(0.5)
    assert starts(runner, 1) == 1 and runner.seen.count("once") == 1


def test_a_stale_exec_never_starts(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    slot.assign(sh_stage("echo three"), 3)
    assert runner.result(3).exit_code == 0
    assert go(slot, runner, slot.spec(sh_stage("echo two"), 2)).returncode == 0  # delayed from long ago
    time.sleep(0.5)
    assert "two" not in runner.drain()
    slot.assign(sh_stage("echo four"), 4)  # the next generation still starts, from either path
    assert runner.result(4).exit_code == 0


def test_the_newer_generation_of_the_two_places_wins(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    slot.assign(sh_stage("echo five"), 5)
    assert runner.result(5).exit_code == 0
    assert go(slot, runner, slot.spec(sh_stage("echo six"), 6)).returncode == 0
    assert runner.result(6).exit_code == 0
    slot.assign(sh_stage("echo five again"), 5)
    time.sleep(0.5)
    assert "five again" not in runner.drain()


def test_runner_restarted_between_the_two_deliveries(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage("echo started; sleep 30")
    assert go(slot, runner, slot.spec(stage, 1)).returncode == 0
    runner.wait_line(lambda line: line == "started")
    runner.kill_container()  # the container dies mid-stage; the annotation reaches the new container's env
    again = runners(slot, stage, 1)
    result = again.result(1)
    assert (result.exit_code, result.reason) == (137, "interrupted")  # recorded, never run again
    time.sleep(0.3)
    assert "started" not in again.drain()


def test_stale_execs_into_a_restarted_runner_never_start_a_generation_again(slot, runners) -> None:
    """A restarted runner whose run spec was emptied (the next swap retires it) holds no generation in
    memory: gos of generations its slot already started, delayed from long ago, start nothing and leave the
    records alone (before: the older one was recorded lost, which emptied the newer one's records and took
    the slot's newest started generation back, so the newer one then ran a second time)."""
    first = runners(slot, None, 0)
    time.sleep(0.3)
    for generation in (1, 2):
        slot.assign(sh_stage(f'echo "gen {generation} ran"'), generation)
        assert first.result(generation).exit_code == 0
    first.kill_container()  # the slot restarts (say, prepared for another image)
    (slot.meta / slot.name).write_text("")  # with its run spec emptied
    target = slot.state / f"{slot.name}.go"
    target.write_text(slot.spec(sh_stage('echo "gen 1 ran"'), 1))  # an exec while no runner holds the slot
    again = runners(slot, None, 0)
    for generation in (1, 2):  # each lands once the runner is up; its poll takes the file (condition: gone)
        wait_gone(target)
        stage = sh_stage(f'echo "gen {generation} ran"')
        assert go(slot, again, slot.spec(stage, generation)).returncode == 0
    wait_gone(target)
    slot.assign(sh_stage('echo "gen 3 ran"'), 3)  # the next generation still starts
    assert again.result(3).exit_code == 0
    assert not [line for line in again.seen if line.startswith("::kruise-chain:: result gen=2 ")]
    assert starts(again, 1) == starts(again, 2) == 0 and "gen 2 ran" not in again.seen


def test_an_exec_while_no_runner_holds_the_slot_is_dropped(slot, runners) -> None:
    """A go waits for the slot's runner to serve (its record names a live runner), a few seconds at most:
    into a slot whose runner is down (its record left behind), it gives up, writes nothing, and says so."""
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    runner.kill_container()
    stage = sh_stage("echo ran")
    data = slot.spec(stage, 1).encode()
    done = subprocess.run(
        go_command(slot, len(data)), input=data, env=runner.env, capture_output=True, timeout=60
    )
    assert done.returncode == 75 and b"does not serve it yet" in done.stderr
    assert not list(slot.state.glob(f"{slot.name}.go*"))
    again = runners(slot, None, 0)  # restarted before the annotation: the annotation decides
    time.sleep(0.5)
    assert "ran" not in again.drain()
    slot.assign(stage, 1)
    assert again.result(1).exit_code == 0
    assert again.seen.count("ran") == 1


def test_a_spec_planted_by_a_stage_is_never_run(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    forged = slot.spec(sh_stage("echo forged"), 2).replace("\n", "\\n")
    target = slot.state / f"{slot.name}.go"
    plant = f'printf "{forged}" > "{target}" && echo planted; sleep 0.5'  # the spec is whole before it ends
    slot.assign(sh_stage(plant), 1)
    assert runner.result(1).exit_code == 0
    time.sleep(0.5)
    assert "planted" in runner.seen and "forged" not in runner.drain()
    assert not target.exists()


def test_go_refuses_what_is_not_a_run_spec(slot, runners) -> None:
    runner = runners(slot, None, 0)
    for spec, length in (("echo hi\n", None), ("kc_g=1\n", 3), ("kc_g=1\nkc_t=x\n", "12x")):
        done = go(slot, runner, spec, length)
        assert done.returncode != 0 and b"::kruise-chain:: error" in done.stderr
    assert not list(slot.state.glob(f"{slot.name}.go*"))


@pytest.mark.skipif(base.BWRAP is None, reason="needs bwrap and nsenter (a pid namespace)")
def test_a_late_exec_in_the_container_when_the_stage_ends_is_not_killed_but_not_taken(slot, runners) -> None:
    """The task's exec of a generation the annotation already started runs in the slot's pid namespace (as
    runc exec joins the container's), and may still run when the stage ends and the runner ends the stage's
    processes: it is not one of them. It ends on its own, saying the generation was not taken, exit 0."""
    stage = sh_stage('echo running; until [ -e "$CHAIN_SCRATCH/end" ]; do sleep 0.02; done')
    runner = runners(slot, stage, 1)  # the annotation's delivery started generation 1
    runner.wait_line(lambda line: line == "running")
    data = slot.spec(stage, 1).encode()
    command = base.in_container(runner, go_command(slot, len(data)))
    late = subprocess.Popen(
        command, env=runner.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        assert late.stdin is not None
        late.stdin.write(data[:4])  # a slow exec: still reading its spec when the stage ends
        late.stdin.flush()
        deadline = time.monotonic() + base.TIMEOUT
        while not any(" head -c " in " ".join(stat.split()) for stat in head_commands(runner)):
            assert time.monotonic() < deadline, "the exec never read its stdin"
            time.sleep(0.01)
        (slot.scratch / "end").touch()
        time.sleep(0.3)  # the stage has ended and the runner is ending its processes
        out, _ = late.communicate(data[4:], timeout=base.TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            late.kill()
    assert (late.returncode, out.decode().strip()) == (
        0,
        "::kruise-chain:: generation 1 already started in slot-a: not taken",
    )
    assert runner.result(1).exit_code == 0
    assert starts(runner, 1) == 1
    assert not (slot.state / f"{slot.name}.go").exists()


def head_commands(runner: Runner) -> list[str]:
    """The command lines of the processes in the runner's pid namespace."""
    commands = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{path.parent.name}/ns/pid") == os.readlink(
                f"/proc/{base.pid_1(runner.process)}/ns/pid"
            ):
                commands.append(path.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return commands
