"""`runner --go` wakes the slot's runner (SIGUSR1 to pid 1) when, and only when, pid 1 of its container is
that runner (`busybox sh RUNNER`, as the kernel runs the script's `#!` line): pid 1's argv is read with the
shell's builtin `read`, which in busybox drops the NULs between the arguments (no `tr` forked since issue 40).
The runner tests' other gos run outside the runner's pid namespace, where pid 1 is never the runner; here pid
1 of a namespace of its own (bwrap `--as-pid-1`) is a stand-in that records the signal and runs the go from
inside the namespace, as the kubelet's exec into the container does. With the check the runner had before
(`*" sh $0 "` on `tr`'s output) applied to the builtin read's, the first test fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from airflow_kruise_chain.core import runner_script
from tests.unit.test_core_runner import BUSYBOX, BWRAP, TIMEOUT, wait_file

pytestmark = pytest.mark.skipif(
    BUSYBOX is None or BWRAP is None, reason="needs a static busybox and bwrap (a pid namespace)"
)

SPEC = "kc_g=7\nkc_t=tok\n"
STAND_IN = """
trap 'echo woken >> {log}' USR1
read -r st < /proc/1/stat
set -- ${{st##*) }}
echo "1 ${{20}}" > {state}/slot-a.serving  # it serves the slot, as a runner says it (its pid and start)
: > {started}
until [ -e {proceed} ]; do {busybox} sleep 0.02; done
{busybox} sh {runner} --go {length} < {spec} > {out} 2>&1
echo "exit $?" >> {out}
{busybox} sleep 0.3
:
"""


def pid_1_runs_a_go(tmp_path: Path, pid_1_script: str) -> tuple[str, str]:
    """pid 1 runs `busybox sh PID_1_SCRIPT` (a stand-in, at that path under the slot's bin folder), which
    runs the go of the runner at bin/runner; (what the go printed, what pid 1 recorded)."""
    assert BUSYBOX is not None and BWRAP is not None
    folder = tmp_path / "bin"
    state = tmp_path / "state"
    folder.mkdir()
    state.mkdir()
    (folder / "busybox").symlink_to(BUSYBOX)
    runner = folder / "runner"
    log, out, spec = tmp_path / "pid-1.log", tmp_path / "go.out", tmp_path / "spec"
    spec.write_text(SPEC)
    started, proceed = tmp_path / "started", tmp_path / "proceed"
    stand_in = STAND_IN.format(
        busybox=folder / "busybox",
        runner=runner,
        length=len(SPEC),
        spec=spec,
        out=out,
        log=log,
        state=state,
        started=started,
        proceed=proceed,
    )
    pid_1 = folder / pid_1_script
    pid_1.write_text(stand_in)
    if pid_1 != runner:
        runner.write_text(runner_script())
    command = [BWRAP, "--bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid", "--as-pid-1"]
    command += ["--die-with-parent", "--", str(folder / "busybox"), "sh", str(pid_1)]
    env = {"KC_SLOT": "slot-a", "KC_STATE": str(state), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen(command, env=env)
    try:
        wait_file(started)  # pid 1's shell has the stand-in open
        if pid_1 == runner:  # the real runner in its place; pid 1 keeps the stand-in it opened
            replaced = folder / ".runner"
            replaced.write_text(runner_script())
            replaced.rename(runner)
        proceed.touch()
        assert process.wait(timeout=TIMEOUT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return out.read_text(), log.read_text() if log.exists() else ""


def test_the_go_wakes_pid_1_when_it_is_the_runner(tmp_path: Path) -> None:
    out, recorded = pid_1_runs_a_go(tmp_path, "runner")
    assert out.splitlines()[-1:] == ["exit 0"], out
    assert (tmp_path / "state" / "slot-a.go").read_text() == SPEC  # put in place for the runner to take
    assert recorded == "woken\n"


def test_the_go_leaves_any_other_pid_1_alone(tmp_path: Path) -> None:
    out, recorded = pid_1_runs_a_go(tmp_path, "other")
    assert out.splitlines()[-1:] == ["exit 0"], out
    assert recorded == ""
