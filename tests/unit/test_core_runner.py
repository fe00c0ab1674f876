"""The stage runner script, run for real by the host's /bin/sh in a temporary scratch folder."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core import ResultMarker, StageSpec, StartMarker, parse_marker, runner_script
from airflow_kruise_chain.core.manifest import READINESS_COMMAND

TIMEOUT = 10.0
# Stage images bring their own /bin/sh: the host's, and bash in POSIX mode (as /bin/sh on RHEL-like images).
SHELLS = [["/bin/sh"]] + ([["bash", "--posix"]] if shutil.which("bash") else [])


class Runner:
    """One runner process (one container start) with its output collected line by line."""

    def __init__(self, tmp: Path, shell: list[str], stage: StageSpec, generation: int, **extra: str) -> None:
        script = tmp / "runner.sh"
        script.write_text(runner_script())
        self.scratch = tmp / "scratch"
        self.scratch.mkdir(exist_ok=True)
        self.termination_log = tmp / f"termination-log-{time.monotonic_ns()}"
        env = {
            "PATH": os.environ["PATH"],
            "KC_SLOT": "slot-a",
            "KC_GENERATION": str(generation),
            "KC_STAGE": stage.name,
            "KC_COMMAND": stage.shell_command(),
            "KC_ENV": stage.shell_env(),
            "KC_OUTPUTS_MAX": str(stage.max_outputs_bytes),
            "KC_SCRATCH": str(self.scratch),
            "KC_TERMINATION_LOG": str(self.termination_log),
            **extra,
        }
        self.generation = generation
        self.process = subprocess.Popen(
            # as a container runtime starts it: every signal at its default action, even if this test
            # process ignores some (started in the background, it ignores SIGINT and SIGQUIT)
            ["env", "--default-signal", "--", *shell, str(script)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, so a test can kill the whole "container"
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

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

    def result(self) -> ResultMarker:
        line = self.wait_line(lambda line: isinstance(parse_marker(line), ResultMarker))
        marker = parse_marker(line)
        assert isinstance(marker, ResultMarker) and marker.generation == self.generation
        return marker

    @property
    def state_dir(self) -> Path:
        return self.scratch / ".chain" / f"gen-{self.generation}"

    def ready(self) -> bool:
        """Run the slot's readiness probe (its /scratch pointed at the test's scratch folder)."""
        command = [*READINESS_COMMAND[:2], READINESS_COMMAND[2].replace("/scratch", str(self.scratch))]
        env = {"PATH": os.environ["PATH"], "KC_GENERATION": str(self.generation)}
        return subprocess.run(command, env=env).returncode == 0

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the runner (the kubelet signals the container's main process); return its exit code."""
        self.process.send_signal(sig)
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


@pytest.fixture(params=SHELLS, ids=lambda shell: " ".join(shell))
def runners(request: pytest.FixtureRequest, tmp_path: Path):
    started: list[Runner] = []

    def start(stage: StageSpec, generation: int, **extra: str) -> Runner:
        runner = Runner(tmp_path, request.param, stage, generation, **extra)
        started.append(runner)
        return runner

    yield start
    for runner in started:  # the runner and anything its stage left behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.process.pid, signal.SIGKILL)
        runner.process.wait()


def sh_stage(script: str, name: str = "demo", **kwargs) -> StageSpec:
    return StageSpec(name, "busybox:1.36", cmds=["/bin/sh", "-c", script], **kwargs)


COUNTING = sh_stage(
    'n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0); echo $((n + 1)) > "$CHAIN_SCRATCH/count"\n'
    'echo "stage says hi"; printf \'{"rows": 3, "quote": "it\\u0027s"}\' > "$CHAIN_OUTPUT"; exit 3'
)


def test_runs_once_records_and_parks(runners) -> None:
    first = runners(COUNTING, 4)
    start = parse_marker(first.wait_line(lambda line: line.startswith("::kruise-chain:: start")))
    assert isinstance(start, StartMarker) and (start.generation, start.stage, start.slot) == (
        4,
        "demo",
        "slot-a",
    )
    first.wait_line(lambda line: line == "stage says hi")
    result = first.result()
    assert (result.exit_code, result.reason, result.stage, result.slot) == (3, "completed", "demo", "slot-a")
    assert result.outputs == {"rows": 3, "quote": "it's"} and result.outputs_status == "ok"
    assert result.started_at <= result.finished_at
    line = first.seen[-1]
    assert first.termination_log.read_text() == line
    assert (first.state_dir / "exit_code").read_text().strip() == "3"
    assert first.ready()
    time.sleep(0.3)
    assert first.process.poll() is None, "a finished runner must park, not exit"
    assert first.stop() == 0

    again = runners(COUNTING, 4)  # the container restarts with the same generation
    assert again.wait_line(lambda line: "::kruise-chain::" in line) == line
    assert again.termination_log.read_text() == line
    assert again.stop() == 0
    assert "stage says hi" not in again.drain()
    assert (again.scratch / "count").read_text().strip() == "1"


def test_output_streams_while_the_stage_runs(runners) -> None:
    stage = sh_stage('echo "first"; while [ ! -f "$CHAIN_SCRATCH/go" ]; do sleep 0.05; done; echo "second"')
    runner = runners(stage, 1)
    runner.wait_line(lambda line: line == "first")
    assert not (runner.state_dir / "exit_code").exists()
    assert not runner.ready()
    (runner.scratch / "go").touch()
    runner.wait_line(lambda line: line == "second")
    assert runner.result().exit_code == 0
    assert runner.ready()


def test_interrupted_generation_is_recorded_not_rerun(runners) -> None:
    stage = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"; touch "$CHAIN_SCRATCH/running"; sleep 30')
    first = runners(stage, 2)
    first.wait_line(lambda line: line.startswith("::kruise-chain:: start"))
    deadline = time.monotonic() + TIMEOUT
    while not (first.scratch / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    first.kill_container()  # SIGKILL to every process, as when the container is killed
    assert not (first.state_dir / "exit_code").exists()
    restarted = runners(stage, 2)
    result = restarted.result()
    assert (result.exit_code, result.reason) == (137, "interrupted")
    assert restarted.ready()
    assert restarted.stop() == 0
    assert (restarted.scratch / "runs").read_text() == "x\n"


def test_sigterm_is_forwarded_to_the_stage(runners) -> None:
    stage = sh_stage(
        "trap 'echo bye > \"$CHAIN_SCRATCH/got-term\"; exit 143' TERM\n"
        'touch "$CHAIN_SCRATCH/running"; while :; do sleep 0.05; done'
    )
    runner = runners(stage, 5)
    deadline = time.monotonic() + TIMEOUT
    while not (runner.scratch / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runner.stop() == 0
    assert (runner.scratch / "got-term").read_text() == "bye\n"
    result = runner.result()
    assert (result.exit_code, result.reason) == (143, "terminated")
    assert (runner.state_dir / "exit_code").read_text().strip() == "143"


def test_sigint_stops_the_stage_too(runners) -> None:
    runner = runners(sh_stage('touch "$CHAIN_SCRATCH/running"; sleep 30'), 5)
    deadline = time.monotonic() + TIMEOUT
    while not (runner.scratch / "running").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    assert runner.stop(signal.SIGINT) == 0
    assert time.monotonic() - started < 5
    assert runner.result().reason == "terminated"


@pytest.mark.parametrize(
    ("generation", "sig"), [("0", signal.SIGTERM), ("", signal.SIGINT), ("0", signal.SIGQUIT)]
)
def test_idle_runner_parks_and_exits_0_when_stopped(runners, generation: str, sig: int) -> None:
    runner = runners(COUNTING, 0, KC_GENERATION=generation)
    time.sleep(0.3)
    assert runner.process.poll() is None
    assert runner.stop(sig) == 0
    assert runner.drain() == []
    assert not (runner.scratch / ".chain").exists()


def test_env_and_arguments_survive_quoting(runners) -> None:
    tricky = [
        "two words",
        "it's",
        'say "hi"',
        "$HOME `id` $(id)",
        "back\\slash",
        "new\nline",
        "",
        "*",
        "ü",
        "A=1",
    ]
    stage = StageSpec(
        "quoting",
        "busybox:1.36",
        cmds=[
            "/bin/sh",
            "-c",
            'printf "[%s]" "$@" > "$CHAIN_SCRATCH/args"; printf "%s" "$TRICKY" > "$CHAIN_SCRATCH/env"',
            "sh",
        ],
        arguments=tricky,
        env={"TRICKY": "".join(tricky), "EMPTY": ""},
    )
    runner = runners(stage, 1)
    assert runner.result().exit_code == 0
    assert (runner.scratch / "args").read_text() == "".join(f"[{word}]" for word in tricky)
    assert (runner.scratch / "env").read_text() == "".join(tricky)


def test_stage_sees_its_chain_variables(runners) -> None:
    stage = sh_stage(
        'printf "%s|%s|%s" "$CHAIN_SCRATCH" "$CHAIN_OUTPUT" "$CHAIN_GENERATION" > "$CHAIN_SCRATCH/vars"'
    )
    runner = runners(stage, 9)
    runner.result()
    assert (runner.scratch / "vars").read_text() == f"{runner.scratch}|{runner.state_dir}/outputs.json|9"


def test_outputs_bounds(runners) -> None:
    big = sh_stage(
        'head -c 2000 /dev/zero | tr "\\0" a | sed "s/.*/{\\"a\\": \\"&\\"}/" > "$CHAIN_OUTPUT"',
        max_outputs_bytes=1000,
    )
    result = runners(big, 1).result()
    assert (result.outputs, result.outputs_status) == (None, "too-big")
    absent = runners(sh_stage("true"), 2).result()
    assert (absent.outputs, absent.outputs_status) == (None, "absent")


def test_large_outputs_stay_in_the_log_line_only(runners) -> None:
    payload = {"blob": "x" * 6000}
    stage = sh_stage(f"printf '%s' '{json.dumps(payload)}' > \"$CHAIN_OUTPUT\"")
    runner = runners(stage, 1)
    assert runner.result().outputs == payload
    message = parse_marker(runner.termination_log.read_text())
    assert len(runner.termination_log.read_text()) < 4096
    assert (message.exit_code, message.outputs, message.outputs_status) == (0, None, "truncated")


def test_command_not_found_is_a_recorded_failure(runners) -> None:
    stage = StageSpec("missing", "busybox:1.36", cmds=["/no/such/program"])
    result = runners(stage, 1).result()
    assert result.exit_code == 127
