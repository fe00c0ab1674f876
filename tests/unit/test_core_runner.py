"""The stage runner script, run for real by a static busybox (as the slot runs it: `busybox sh runner`)
against temporary state, downwardAPI and scratch folders, as pid 1 of its own pid namespace (bwrap
`--as-pid-1`), as a container runtime starts a container's command."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from inotify_simple import INotify, flags

from airflow_kruise_chain.core import ResultMarker, StageSpec, StartMarker, parse_marker, runner_script
from airflow_kruise_chain.core.manifest import STARTUP_COMMAND
from airflow_kruise_chain.core.wire import RUNNER_BIN, RUNNER_COMMAND, StreamMarker, run_spec

TIMEOUT = 10.0
BUSYBOX = shutil.which("busybox")
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")
PYTHON = os.path.realpath(sys.executable)
ENV = shutil.which("env") or "/usr/bin/env"
NSENTER = shutil.which("nsenter")
BWRAP = shutil.which("bwrap") if NSENTER else None  # a pid namespace, and the kubelet's way in (in_container)


def script_argv(command: list[str] | tuple[str, ...], folder: Path) -> list[str]:
    """`command` (the runner's, a path under RUNNER_BIN, and its arguments) as the kernel's binfmt_script
    execs it, with RUNNER_BIN at `folder`: the interpreter and argument of the script's `#!` line, then the
    script's path (its $0), then the arguments (`tests/unit/test_core_runner_nonroot.py` runs the real
    paths, in a container)."""
    script = Path(command[0].replace(RUNNER_BIN, str(folder)))
    line = script.read_text().split("\n", 1)[0]
    assert line.startswith("#!"), line
    interpreter, *argument = line[2:].split(None, 1)
    return [interpreter.replace(RUNNER_BIN, str(folder)), *argument, str(script), *command[1:]]


def container_command(slot: Slot) -> list[str]:
    """The slot's command as a runtime starts it: pid 1 of a new pid namespace (bwrap, where it is installed),
    every signal at its default action."""
    runner = [ENV, "--default-signal", "--", *script_argv(RUNNER_COMMAND, slot.bin)]
    if BWRAP is None:
        return runner
    sandbox = [BWRAP, "--bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid", "--as-pid-1"]
    return [*sandbox, "--die-with-parent", "--", *runner]


def pid_1(process: subprocess.Popen) -> int:
    """The host pid of the runner (pid 1 of its namespace under bwrap, else the process itself)."""
    if BWRAP is None:
        return process.pid
    deadline = time.monotonic() + TIMEOUT
    while True:
        for tid in os.listdir(f"/proc/{process.pid}/task"):
            with open(f"/proc/{process.pid}/task/{tid}/children") as f:
                children = f.read().split()
            if children:
                return int(children[0])
        assert time.monotonic() < deadline, "the sandbox never started the runner"
        time.sleep(0.01)


def start_time(pid: int) -> str:
    """Process `pid`'s start time as a runner's serving record names it (/proc/PID/stat's field 22)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]


def in_container(runner: Runner | None, command: list[str]) -> list[str]:
    """`command` as the kubelet's exec (a probe, `kubectl exec`, the fast go) runs it in `runner`'s container:
    in its pid and mount namespaces, where pid 1 is the runner (outside them when it has none or is gone)."""
    if BWRAP is None or NSENTER is None or runner is None or runner.process.poll() is not None:
        return command
    pid, deadline = pid_1(runner.process), time.monotonic() + TIMEOUT
    runs = [b"sh", str(runner.slot.bin / "runner").encode()]  # `BUSYBOX sh RUNNER`: the sandbox's mounts made
    while Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3] != runs:
        assert time.monotonic() < deadline, "the sandbox never ran the runner"
        time.sleep(0.01)
    return [NSENTER, "-t", str(pid), "-p", "-m", "--", *command]


def namespace_processes(process: subprocess.Popen) -> list[str]:
    """The processes under the runner (its container's other processes): their /proc/<pid>/stat lines."""
    out: list[int] = []
    todo = [pid_1(process)]
    while todo:
        pid = todo.pop()
        for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
                out += kids
                todo += kids
    stats = []
    for pid in out:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
            stats.append(f.read().strip())
    return stats


def stage_processes(process: subprocess.Popen) -> list[str]:
    """namespace_processes but the runner's own: the forks of its shell and the applets it runs through the
    slot's busybox (all named `busybox`; the stages these tests check run none), such as the `stat` with which
    it looks at /dev just after it announced a result. What a stage left behind."""
    return [stat for stat in namespace_processes(process) if stat.split(" ", 2)[1] != "(busybox)"]


def parked_processes(process: subprocess.Popen) -> list[str]:
    """namespace_processes once the runner's own work after a result (stage_processes) is over: the runner
    parks with no other process (or the deadline passes: what is left)."""
    deadline = time.monotonic() + TIMEOUT
    while (left := namespace_processes(process)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


class Slot:
    """One slot's volumes: the runner's bin and state (an emptyDir), the downwardAPI folder and scratch."""

    def __init__(self, tmp: Path, name: str = "slot-a") -> None:
        self.name = name
        self.runner: Runner | None = None
        self.bin = tmp / "kc" / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        (self.bin / "runner").write_text(runner_script())
        (self.bin / "runner").chmod(0o555)
        if not (self.bin / "busybox").exists():
            (self.bin / "busybox").symlink_to(BUSYBOX)
        self.state = tmp / f"state-{name}"
        self.meta = tmp / f"meta-{name}"
        self.meta.mkdir(exist_ok=True)
        self.scratch = tmp / "scratch"
        self.scratch.mkdir(exist_ok=True)
        self.tokens: dict[int, str] = {}

    def spec(self, stage: StageSpec | None, generation: int, **overrides) -> str:
        if stage is None:
            return ""
        token = self.tokens.setdefault(generation, f"tok{generation}x")
        return run_spec(
            **{
                "generation": generation,
                "token": token,
                "stage": stage.name,
                "argv": [*stage.cmds, *stage.arguments],
                "env": stage.env,
                "outputs_max": stage.max_outputs_bytes,
                **overrides,
            }
        )

    def assign(self, stage: StageSpec, generation: int, **overrides) -> None:
        """The annotation changed and the kubelet rewrote the volume file (atomically)."""
        tmp = self.meta / f".{self.name}.tmp"
        tmp.write_text(self.spec(stage, generation, **overrides))
        tmp.rename(self.meta / self.name)

    def gen_dir(self, generation: int) -> Path:
        return self.state / f"gen-{generation}"

    def serving(self, wait: float = 5.0) -> bool:
        """Whether the slot's startup probe (its paths pointed at the test's) passes within `wait` seconds:
        the runner serves the slot, parked or running a stage (the kubelet counts the slot Ready from then
        on)."""
        command = in_container(self.runner, script_argv(STARTUP_COMMAND, self.bin))
        env = {"KC_SLOT": self.name, "KC_STATE": str(self.state)}
        try:
            return subprocess.run(command, env=env, timeout=wait).returncode == 0
        except subprocess.TimeoutExpired:
            return False


class Runner:
    """One runner process (one container start) with its output collected line by line."""

    def __init__(
        self, slot: Slot, stage: StageSpec | None, generation: int, restart: bool = False, **env: str
    ) -> None:
        self.slot = slot
        slot.runner = self  # the slot's container now
        self.termination_log = slot.state.parent / f"termination-log-{time.monotonic_ns()}"
        self.env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/root",
            "HOSTNAME": "chain-pod",
            "KC_SLOT": slot.name,
            "KC_RUN": slot.spec(stage, generation, restart=restart),
            "KC_SCRATCH": str(slot.scratch),
            "KC_STATE": str(slot.state),
            "KC_META": str(slot.meta),
            "KC_TERMINATION_LOG": str(self.termination_log),
            **env,
        }
        self.process = subprocess.Popen(
            container_command(slot),
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a test can kill the whole "container"
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.decode(errors="replace").rstrip("\n"))

    def wait_line(self, predicate, timeout: float = TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            self.seen.append(line)
            if predicate(line):
                return line
        raise AssertionError(f"no matching line within {timeout}s; saw {self.seen}")

    def result(self, generation: int) -> ResultMarker:
        token = self.slot.tokens[generation]

        def ours(line: str) -> bool:
            marker = parse_marker(line)
            return isinstance(marker, ResultMarker) and (marker.generation, marker.token) == (
                generation,
                token,
            )

        marker = parse_marker(self.wait_line(ours))
        assert isinstance(marker, ResultMarker)
        return marker

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the runner (the kubelet signals the container's main process); return its exit code."""
        os.kill(pid_1(self.process), sig)
        return self.process.wait(timeout=TIMEOUT)

    def kill_container(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=TIMEOUT)

    def drain(self) -> list[str]:
        while True:
            try:
                self.seen.append(self.lines.get(timeout=0.2))
            except queue.Empty:
                return self.seen


@pytest.fixture
def slot(tmp_path: Path) -> Slot:
    return Slot(tmp_path)


@pytest.fixture
def runners():
    started: list[Runner] = []

    def start(slot: Slot, stage: StageSpec | None, generation: int, **env: str) -> Runner:
        runner = Runner(slot, stage, generation, **env)
        started.append(runner)
        return runner

    yield start
    for runner in started:  # the runner and anything its stage left behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.process.pid, signal.SIGKILL)
        runner.process.wait()


def sh_stage(script: str, name: str = "demo", **kwargs) -> StageSpec:
    return StageSpec(name, "busybox:1.36", cmds=["/bin/sh", "-c", script], **kwargs)


def wait_file(path: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


COUNTING = sh_stage(
    'n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0); echo $((n + 1)) > "$CHAIN_SCRATCH/count"\n'
    'echo "stage says hi"; printf \'{"rows": 3, "quote": "it\\u0027s"}\' > "$CHAIN_OUTPUT"; exit 3'
)


def test_runs_once_records_outside_scratch_and_parks(slot, runners) -> None:
    first = runners(slot, COUNTING, 4)
    start_line = first.wait_line(lambda line: line.startswith("::kruise-chain:: start"))
    assert re.search(r" at=\S+T\S+\.\d{6,9}Z$", start_line)  # sub-second, whatever busybox's date can do
    start = parse_marker(start_line)
    assert isinstance(start, StartMarker)
    assert (start.generation, start.stage, start.slot, start.token) == (4, "demo", "slot-a", "tok4x")
    first.wait_line(lambda line: line == "stage says hi")
    result = first.result(4)
    assert (result.exit_code, result.reason, result.stage, result.slot) == (3, "completed", "demo", "slot-a")
    assert result.outputs == {"rows": 3, "quote": "it's"} and result.outputs_status == "ok"
    assert result.started_at <= result.finished_at
    line = first.seen[-1]
    assert first.termination_log.read_text() == line
    assert (slot.gen_dir(4) / "exit_code").read_text().strip() == "3"
    assert sorted(p.name for p in slot.scratch.iterdir()) == ["count"]  # no records in the stage's scratch
    assert slot.serving()
    time.sleep(0.3)
    assert first.process.poll() is None, "a finished runner must park, not exit"
    assert first.stop() == 0

    again = runners(slot, COUNTING, 4)  # the container restarts with the same generation
    assert again.wait_line(lambda line: "::kruise-chain::" in line) == line
    assert again.termination_log.read_text() == line
    assert again.stop() == 0
    assert "stage says hi" not in again.drain()
    assert (slot.scratch / "count").read_text().strip() == "1"


def test_a_replay_request_announces_the_parked_generations_result_again_once(slot, runners) -> None:
    replay = slot.meta / f"{slot.name}.replay"
    replay.write_text("2 made-while-it-ran")  # answered by the result the stage's end prints
    runner = runners(slot, sh_stage('echo "stage output"; exit 4'), 2)
    first = runner.result(2)
    for asked in ("1 a", "3 b"):  # another generation: nothing
        replay.write_text(asked)
        time.sleep(0.3)
    replay.write_text("2 c")  # its result line was rotated out of the log: from the records again
    assert runner.result(2) == first
    time.sleep(0.5)
    lines = runner.drain()
    assert sum(line.startswith("::kruise-chain:: result gen=2 ") for line in lines) == 2  # once per request
    assert lines.count("stage output") == 1  # announced, not run again
    assert (slot.gen_dir(2) / "exit_code").read_text() == "4\n"


def test_a_long_lived_runner_takes_new_generations_from_the_volume(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    assert slot.serving()
    for generation in (1, 2, 3):
        slot.assign(sh_stage(f'echo "gen {generation} ran"'), generation)
        assert runner.result(generation).exit_code == 0
        assert slot.serving()
    assert runner.process.poll() is None  # one process for all three: no restart
    lines = runner.drain()
    assert [line for line in lines if line.endswith(" ran")] == ["gen 1 ran", "gen 2 ran", "gen 3 ran"]
    slot.assign(sh_stage('echo "gen 2 again"'), 2)  # an older generation is never taken
    time.sleep(0.5)
    assert "gen 2 again" not in runner.drain()


def test_env_at_start_and_a_newer_volume_file(slot, runners) -> None:
    slot.assign(sh_stage('echo "from the volume"'), 6)
    runner = runners(slot, sh_stage('echo "from env"'), 5)  # started with 5 in env, the file has 6 already
    assert runner.result(6).exit_code == 0
    assert "from the volume" in runner.seen and "from env" not in runner.seen


def test_output_streams_and_the_slot_serves_while_its_stage_runs(slot, runners) -> None:
    """The startup probe passes while a stage runs (no probe fails on a healthy slot: each failure is an
    `Unhealthy` event); only the result line says that a generation ended."""
    stage = sh_stage('echo "first"; while [ ! -f "$CHAIN_SCRATCH/go" ]; do sleep 0.05; done; echo "second"')
    runner = runners(slot, stage, 1)
    runner.wait_line(lambda line: line == "first")
    assert not (slot.gen_dir(1) / "exit_code").exists()
    assert slot.serving()
    (slot.scratch / "go").touch()
    runner.wait_line(lambda line: line == "second")
    assert runner.result(1).exit_code == 0
    assert slot.serving()


def test_interrupted_generation_is_recorded_not_rerun(slot, runners) -> None:
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"; touch "$CHAIN_SCRATCH/running"; sleep 30')
    first = runners(slot, stage, 2)
    wait_file(slot.scratch / "running")
    first.kill_container()  # SIGKILL to every process, as when the container is killed
    assert not (slot.gen_dir(2) / "exit_code").exists()
    restarted = runners(slot, stage, 2)
    result = restarted.result(2)
    assert (result.exit_code, result.reason) == (137, "interrupted")
    assert slot.serving()
    assert restarted.stop() == 0
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_a_lost_record_fails_the_generation_and_never_reruns_it(slot, runners) -> None:
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"')
    first = runners(slot, stage, 3)
    assert first.result(3).exit_code == 0
    first.kill_container()
    shutil.rmtree(slot.gen_dir(3))  # its records are gone
    restarted = runners(slot, stage, 3)
    result = restarted.result(3)
    assert (result.exit_code, result.reason) == (70, "lost-record")
    assert any("records of generation 3 are gone" in line for line in restarted.seen)
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_a_stage_wiping_its_scratch_breaks_nothing(slot, runners) -> None:
    wipe = sh_stage(
        'touch "$CHAIN_SCRATCH/.hidden" "$CHAIN_SCRATCH/data"; rm -rf "$CHAIN_SCRATCH"/* '
        '"$CHAIN_SCRATCH"/.[!.]* "$CHAIN_SCRATCH"/..?*; ls -A "$CHAIN_SCRATCH"'
    )
    runner = runners(slot, wipe, 1)
    assert runner.result(1).exit_code == 0
    slot.assign(sh_stage('echo next > "$CHAIN_SCRATCH/next"'), 2)
    assert runner.result(2).exit_code == 0
    assert (slot.scratch / "next").read_text() == "next\n"
    starts = [line for line in runner.drain() if line.startswith("::kruise-chain:: start")]
    assert [parse_marker(line).generation for line in starts] == [1, 2]  # once each (stderr has stderr-start)


def test_sigterm_is_forwarded_to_the_stage(slot, runners) -> None:
    stage = sh_stage(
        "trap 'echo bye > \"$CHAIN_SCRATCH/got-term\"; exit 143' TERM\n"
        'touch "$CHAIN_SCRATCH/running"; while :; do sleep 0.05; done'
    )
    runner = runners(slot, stage, 5)
    wait_file(slot.scratch / "running")
    assert runner.stop() == 0
    assert (slot.scratch / "got-term").read_text() == "bye\n"
    result = runner.result(5)
    assert (result.exit_code, result.reason) == (143, "terminated")
    assert (slot.gen_dir(5) / "exit_code").read_text().strip() == "143"


def test_sigint_stops_the_stage_too(slot, runners) -> None:
    runner = runners(slot, sh_stage('touch "$CHAIN_SCRATCH/running"; sleep 30'), 5)
    wait_file(slot.scratch / "running")
    started = time.monotonic()
    assert runner.stop(signal.SIGINT) == 0
    assert time.monotonic() - started < 5
    assert runner.result(5).reason == "terminated"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT])
def test_idle_runner_parks_and_exits_0_when_stopped(slot, runners, sig: int) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    assert runner.process.poll() is None
    assert runner.stop(sig) == 0
    assert runner.drain() == []


class Polls:
    """Counts the runner's reads of its volume file: its opens, seen by inotify on the downwardAPI folder
    (opens and closes alternate, so the kernel merges no two of them)."""

    def __init__(self, slot: Slot) -> None:
        self.name = slot.name
        (slot.meta / slot.name).write_text("")  # the annotation as the pod is created: empty
        self.inotify = INotify()
        self.inotify.add_watch(slot.meta, flags.OPEN | flags.CLOSE_NOWRITE)
        self.count = 0

    def update(self, timeout: float = 0.0) -> int:
        for event in self.inotify.read(timeout=int(timeout * 1000)):
            if event.mask & flags.OPEN and event.name == self.name:
                self.count += 1
        return self.count

    def during(self, seconds: float) -> int:
        """The polls made in the next `seconds`."""
        start = self.update()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.update(timeout=min(left, 0.2))
        return self.update() - start

    def wait_for(self, count: int, timeout: float) -> float:
        """Wait until `count` more polls were made (at most `timeout` seconds); the seconds it took."""
        target = self.update() + count
        start = time.monotonic()
        while self.update(timeout=0.2) < target:
            assert time.monotonic() - start < timeout, f"{self.count - target + count} of {count} polls"
        return time.monotonic() - start


def test_an_idle_runner_polls_at_most_every_0_1_s_once_its_fast_polls_are_spent(slot, runners) -> None:
    polls = Polls(slot)
    runner = runners(slot, None, 0, KC_HOT_POLLS="5")
    polls.wait_for(6, timeout=TIMEOUT)  # its fast polls after the start, and one more
    # an upper bound only (a loaded machine makes fewer): no more than one poll per 0.1 s
    assert 0 < polls.during(2.0) <= 2.0 / 0.1 + 2
    # no nudge came: the slow poll is the backstop that still takes a new run spec
    slot.assign(sh_stage('echo "found by the slow poll"'), 1)
    assert runner.result(1).exit_code == 0
    assert "found by the slow poll" in runner.seen


HOSTILE = [
    "two words",
    "it's",
    'say "hi"',
    "$HOME `id` $(id) ${X:-y}",
    "back\\slash\\",
    "new\nline",
    "trailing newlines\n\n",
    "\n",
    "",
    "*",
    "ü ☃ \u00a0",
    "A=1",
    "-n",
    "--",
    "\t tab",
]
PROBE = "import json, sys; sys.stdout.write(json.dumps([open('/proc/self/cmdline', 'rb').read().decode(), open('/proc/self/environ', 'rb').read().decode()]))"  # noqa: E501


def test_the_stage_gets_exactly_its_argv_and_env(slot, runners, tmp_path: Path) -> None:
    (tmp_path / "pybin").mkdir()
    (tmp_path / "pybin" / "python3").symlink_to(PYTHON)
    env = {"MODE": "strict", "TRICKY": "".join(HOSTILE), "EMPTY": "", "PATH": f"{tmp_path / 'pybin'}"}
    # names a shell sets or uses itself, delivered as given (no shell runs between the runner and the stage)
    shell = ("IFS", "PWD", "OLDPWD", "PPID", "OPTIND", "OPTARG", "UID", "EUID", "LINENO", "SHELLOPTS")
    env |= {name: f"{name} {HOSTILE[k % len(HOSTILE)]}\n" for k, name in enumerate((*shell, "BASHOPTS"))}
    env |= {"SHLVL": "7", "RANDOM": "4", "SECONDS": "x", "_": "y", "kc_t": "not the token"}
    stage = StageSpec("exact", "gcr.io/distroless/python3-debian12", cmds=["python3", "-c", PROBE])
    slot.assign(stage, 1, argv=["python3", "-c", PROBE, *HOSTILE], env=env)
    runner = runners(slot, None, 0, FROM_IMAGE="image value\n", LANG="C.UTF-8")
    assert runner.result(1).exit_code == 0
    out = next(line for line in runner.seen if line.startswith("["))
    cmdline, environ = json.loads(out)
    assert cmdline.split("\0")[:-1] == ["python3", "-c", PROBE, *HOSTILE]
    got = dict(item.split("=", 1) for item in environ.split("\0")[:-1])
    expected = {k: v for k, v in runner.env.items() if not k.startswith("KC_")} | env
    expected |= {
        "CHAIN_SCRATCH": str(slot.scratch),
        "CHAIN_OUTPUT": f"{slot.gen_dir(1)}/outputs.json",
        "CHAIN_GENERATION": "1",
    }
    assert got == expected
    assert "tok1x" not in environ  # the token never reaches the stage


def test_the_runner_needs_nothing_from_the_image(slot, runners, tmp_path: Path) -> None:
    # an image with no shell and no tools: nothing on PATH, the stage named by its absolute path
    empty = tmp_path / "empty"
    empty.mkdir()
    stage = StageSpec("abs", "gcr.io/distroless/static-debian12", cmds=[PYTHON, "-c", "print('ok')"])
    runner = runners(slot, stage, 1, PATH=str(empty))
    assert runner.result(1).exit_code == 0
    assert "ok" in runner.seen
    missing = StageSpec("missing", "x:1", cmds=["no-such-program"])
    slot.assign(missing, 2)
    assert runner.result(2).exit_code == 127
    assert any('exec: "no-such-program": executable file not found in $PATH' in line for line in runner.seen)


def test_stage_sees_its_chain_variables(slot, runners) -> None:
    stage = sh_stage(
        'printf "%s|%s|%s" "$CHAIN_SCRATCH" "$CHAIN_OUTPUT" "$CHAIN_GENERATION" > "$CHAIN_SCRATCH/vars"'
    )
    runners(slot, stage, 9).result(9)
    assert (slot.scratch / "vars").read_text() == f"{slot.scratch}|{slot.gen_dir(9)}/outputs.json|9"


def test_a_result_line_starts_its_own_line(slot, runners) -> None:
    runner = runners(slot, sh_stage("printf 'no newline at the end'"), 1)
    assert runner.result(1).exit_code == 0
    assert "no newline at the end" in runner.seen


def test_each_stream_marks_the_stages_output_once(slot, tmp_path: Path) -> None:
    """A runtime logs stdout and stderr apart: each stream marks where the stage's output begins and ends,
    each line once (the start and result lines on stdout, stderr-start and stderr-end on stderr), so the
    stage's output on either stream is known to be complete once both ends are read."""
    stage = sh_stage("echo out; echo err >&2; printf open; exit 4")
    env = {
        "PATH": "/usr/bin:/bin",
        "KC_SLOT": slot.name,
        "KC_RUN": slot.spec(stage, 1),
        "KC_SCRATCH": str(slot.scratch),
        "KC_STATE": str(slot.state),
        "KC_META": str(slot.meta),
        "KC_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            container_command(slot),
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    try:
        wait_file(slot.gen_dir(1) / "exit_code")
        deadline = time.monotonic() + TIMEOUT
        while not (" result gen=1 " in out.read_text() and " stderr-end gen=1 " in err.read_text()):
            assert time.monotonic() < deadline, (out.read_text(), err.read_text())
            time.sleep(0.02)
        os.kill(pid_1(process), signal.SIGTERM)
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    start, _, _, result = stdout_lines = out.read_text().splitlines()
    assert stdout_lines == [start, "out", "open", result]  # the runner ended the stage's open line
    begin, _, _, end = stderr_lines = err.read_text().splitlines()
    assert stderr_lines == [begin, "err", "", end]
    assert isinstance(parse_marker(start), StartMarker)
    marker = parse_marker(result)
    assert isinstance(marker, ResultMarker)
    assert (marker.exit_code, marker.streams) == (4, 2)
    assert parse_marker(begin) == StreamMarker(1, "demo", end=False, token="tok1x")
    assert parse_marker(end) == StreamMarker(1, "demo", end=True, token="tok1x")


def test_outputs_bounds(slot, runners) -> None:
    big = sh_stage(
        'head -c 2000 /dev/zero | tr "\\0" a | sed "s/.*/{\\"a\\": \\"&\\"}/" > "$CHAIN_OUTPUT"',
        max_outputs_bytes=1000,
    )
    runner = runners(slot, big, 1)
    result = runner.result(1)
    assert (result.outputs, result.outputs_status) == (None, "too-big")
    slot.assign(sh_stage("true"), 2)
    absent = runner.result(2)
    assert (absent.outputs, absent.outputs_status) == (None, "absent")


def test_large_outputs_stay_in_the_log_line_only(slot, runners) -> None:
    payload = {"blob": "x" * 6000}
    stage = sh_stage(f"printf '%s' '{json.dumps(payload)}' > \"$CHAIN_OUTPUT\"")
    runner = runners(slot, stage, 1)
    assert runner.result(1).outputs == payload
    message = parse_marker(runner.termination_log.read_text())
    assert len(runner.termination_log.read_text()) < 4096
    assert (message.exit_code, message.outputs, message.outputs_status) == (0, None, "truncated")


def test_a_generation_that_comes_with_an_image_patch_is_left_to_the_restarted_container(
    slot, runners
) -> None:
    old = runners(slot, None, 0)
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"')
    slot.assign(stage, 1, restart=True)  # the old container sees it before the kubelet stops it
    time.sleep(0.5)
    assert not (slot.scratch / "runs").exists() and not slot.gen_dir(1).exists()
    assert old.stop() == 0
    new = runners(slot, stage, 1)  # the restarted container gets it in env
    assert new.result(1).exit_code == 0
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_the_stage_inherits_only_the_containers_streams_not_the_runners_descriptors(slot, runners) -> None:
    # the runner's tick FIFO (fd 3) stays the runner's: a stage could otherwise block or fake its nudges
    listing = "import json, os; print('fds', json.dumps(sorted(os.listdir('/proc/self/fd'))))"
    runner = runners(slot, StageSpec("fds", "x:1", cmds=[PYTHON, "-c", listing]), 1)
    assert runner.result(1).exit_code == 0
    line = next(line for line in runner.seen if line.startswith("fds "))
    extra = set(json.loads(line[4:])) - {"0", "1", "2"}
    assert len(extra) == 1, f"the stage holds the runner's descriptors: {line}"  # only listdir's own


def test_nothing_a_stage_started_outlives_it(slot, runners) -> None:
    """Before its result is recorded, every other process of the slot is ended: a background loop cannot
    write the next generation's outputs, a `sleep 300 &` keeps nothing charged."""
    stage = sh_stage(
        "sleep 300 & (sleep 301 &); (setsid sleep 302 &)\n"
        '(while :; do printf \'{"overwritten": true}\' > "$CHAIN_SCRATCH/../next-outputs" 2>/dev/null; '
        'for f in "$CHAIN_SCRATCH"/out-*; do printf \'{"overwritten": true}\' > "$f"; done; '
        "sleep 0.01; done) &\n"
        'printf \'{"first": true}\' > "$CHAIN_OUTPUT"'
    )
    runner = runners(slot, stage, 1)
    assert runner.result(1).outputs == {"first": True}
    assert slot.serving()  # parked
    assert stage_processes(runner.process) == []  # ended before the result was announced
    assert parked_processes(runner.process) == []
    second = sh_stage(
        'ln -s "$CHAIN_OUTPUT" "$CHAIN_SCRATCH/out-2"; '
        'printf \'{"second": true}\' > "$CHAIN_OUTPUT"; sleep 0.3'
    )
    slot.assign(second, 2)
    assert runner.result(2).outputs == {"second": True}
    assert runner.process.poll() is None


def test_what_a_stage_leaves_in_the_state_is_never_obeyed(slot, runners) -> None:
    """A FIFO where the next generation's record goes, a bumped counter, a FIFO for the startup probe's file,
    a planted result: gone before the slot's next generation, which runs normally."""
    plant = sh_stage(
        f'cd "{slot.state}"; mkdir -p gen-3 gen-2; mkfifo gen-3/started gen-3/exit_code; echo 999999 > '
        f"{slot.name}.started; rm -f {slot.name}.serving; mkfifo {slot.name}.serving; "
        "echo 0 > gen-2/exit_code; "
        "mkdir -p locked/deep; chmod 000 locked; ln -s /dev/zero gen-3/result"
    )
    runner = runners(slot, plant, 1)
    assert runner.result(1).exit_code == 0
    assert slot.serving()
    slot.assign(sh_stage('echo "gen 3 ran"; exit 4'), 3)
    result = runner.result(3)
    assert (result.exit_code, result.reason) == (4, "completed")
    assert "gen 3 ran" in runner.seen
    assert slot.serving()
    assert parked_processes(runner.process) == []  # its work after the result line done (the next pipes made)
    assert sorted(p.name for p in slot.state.iterdir()) == [
        "gen-3",
        f"{slot.name}.serving",
        f"{slot.name}.started",
    ]


def test_a_stage_deleting_its_records_and_signalling_the_runner_runs_once(slot, runners) -> None:
    stage = sh_stage(
        'echo x >> "$CHAIN_SCRATCH/runs"; rm -rf "$(dirname "$CHAIN_OUTPUT")"/../*; kill -TERM 1; sleep 0.5'
    )
    first = runners(slot, stage, 1)
    result = first.result(1)
    assert result.reason == "terminated"
    assert first.process.wait(timeout=TIMEOUT) == 0  # the runner leaves once the result is recorded
    again = runners(slot, stage, 1)  # the container restarts with the same run spec
    assert again.result(1).reason == "terminated"  # its record, announced again
    assert again.stop() == 0
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_a_stop_request_stops_the_stage_and_the_runner_parks(slot, runners) -> None:
    stage = sh_stage('trap "" TERM; sleep 300 & touch "$CHAIN_SCRATCH/running"; while :; do sleep 0.05; done')
    runner = runners(slot, stage, 5)
    wait_file(slot.scratch / "running")
    data = slot.meta / "..data"  # as the kubelet writes a downwardAPI volume: a link into ..data
    data.mkdir()
    (data / f"{slot.name}.stop").write_text("4 1")  # another generation: ignored
    (slot.meta / f"{slot.name}.stop").symlink_to(f"..data/{slot.name}.stop")
    time.sleep(0.3)
    assert not (slot.gen_dir(5) / "exit_code").exists()
    (data / f"{slot.name}.stop").write_text("5 1")
    result = runner.result(5)
    assert (result.exit_code, result.reason) == (137, "stopped")  # it ignored SIGTERM: SIGKILL after 1 s
    assert slot.serving()  # parked
    assert stage_processes(runner.process) == []  # ended before the result was announced
    assert parked_processes(runner.process) == []
    assert runner.process.poll() is None
    slot.assign(sh_stage("echo next"), 6)
    assert runner.result(6).exit_code == 0


def test_outputs_that_are_not_a_regular_file_are_absent(slot, runners) -> None:
    runner = runners(slot, sh_stage('mkfifo "$CHAIN_OUTPUT"'), 1)
    assert runner.result(1).outputs_status == "absent"
    slot.assign(sh_stage('ln -s /dev/zero "$CHAIN_OUTPUT"'), 2)
    assert runner.result(2).outputs_status == "absent"


def test_a_stage_gets_the_keys_it_declared_from_mounted_files_byte_for_byte(slot, runners, tmp_path) -> None:
    secret, config = tmp_path / "secret", tmp_path / "config"
    (secret / "..data").mkdir(parents=True)  # the kubelet's layout: each key a symlink into ..data
    value = "pa$$ 'q' \"x\" `id`\n\nend\n\n"
    (secret / "..data" / "password").write_text(value)
    (secret / "password").symlink_to("..data/password")
    config.mkdir()
    for key, text in {
        "mode": "strict",
        "bad-key": "x",
        "KC_SLOT": "evil",
        "DB_PASSWORD": "from env_from",
    }.items():
        (config / key).write_text(text)
    stage = sh_stage(
        'printf "%s" "$DB_PASSWORD" > "$CHAIN_SCRATCH/pw"; '
        'printf "%s|%s|%s" "$mode" "${bad_key-unset}" "${KC_SLOT-unset}" > "$CHAIN_SCRATCH/cfg"'
    )
    slot.assign(stage, 1, files={"DB_PASSWORD": str(secret / "password")}, dirs=[str(config)])
    runner = runners(slot, None, 0)
    assert runner.result(1).exit_code == 0
    assert (slot.scratch / "pw").read_text() == value  # a declared key wins over env_from's, exactly
    assert (slot.scratch / "cfg").read_text() == "strict|unset|unset"  # no invalid name, none of the runner's
    assert not any("pa$$" in line for line in runner.seen)  # never printed


def test_a_declared_key_that_is_missing_fails_the_stage_naming_it(slot, runners, tmp_path) -> None:
    slot.assign(sh_stage("echo ran"), 1, files={"TOKEN": str(tmp_path / "absent" / "token")})
    runner = runners(slot, None, 0)
    assert runner.result(1).exit_code == 78
    assert any("env TOKEN:" in line and "is not mounted" in line for line in runner.seen)
    assert "ran" not in runner.seen
