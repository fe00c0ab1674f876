"""The programs the runner starts on the two paths a stage switch waits for (issue 40): from the fast go's
exec to the stage's start, and from the stage's end to its result line. Each is a busybox applet the runner
forks and execs (`"$kc_bb" APPLET`); the rest is its shell's builtins. Counted exactly, through a slot whose
busybox is a wrapper that logs each program it is asked to run before it runs it. Before this test the go's
exec and the runner started 19 programs up to the stage's start (`rm` thrice, `cat`, `tr`, `chown`, `chmod`
and the clock's `date`, `adjtimex`, `date` among them), the end 14 up to its result line; now 9 and 6."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from airflow_kruise_chain.core.wire import sealed_token
from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, Slot, sh_stage, wait_file
from tests.unit.test_core_runner_go import go

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")

SEAL = "the-pods-seal"
WRAPPER = """#!{busybox} sh
# the slot's busybox: each program the runner asks for, logged before it runs
printf '%s\\n' "$1" >>{log}
exec {busybox} "$@"
"""


def has_epochrealtime() -> bool:
    """Whether this busybox's ash has EPOCHREALTIME (else the runner's clock is `date`, and `adjtimex` where
    that `date` has no %N: programs that depend on the build)."""
    assert BUSYBOX is not None
    out = subprocess.run([BUSYBOX, "sh", "-c", 'echo "${EPOCHREALTIME-}"'], capture_output=True, text=True)
    return "." in out.stdout


def logged(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def wait_logged(path: Path, program: str) -> list[str]:
    """The programs logged up to `program` (excluded), once it is logged."""
    deadline = time.monotonic() + base.TIMEOUT
    while program not in (programs := logged(path)):
        assert time.monotonic() < deadline, f"{program} never ran; ran {programs}"
        time.sleep(0.02)
    return programs[: programs.index(program)]


def test_the_go_and_the_end_start_only_the_programs_they_need(slot: Slot, runners, tmp_path: Path) -> None:
    if not has_epochrealtime():
        pytest.skip("this busybox's ash has no EPOCHREALTIME: the clock's programs depend on its build")
    log = tmp_path / "programs"
    wrapper = slot.bin / "busybox"
    wrapper.unlink()
    wrapper.write_text(WRAPPER.format(busybox=BUSYBOX, log=log))
    wrapper.chmod(0o755)
    runner = runners(slot, None, 0, KC_SEAL=SEAL)
    assert slot.serving()
    time.sleep(0.3)  # parked: the start-up's programs are done
    log.unlink()

    stage = sh_stage(
        'echo running; until [ -e "$CHAIN_SCRATCH/end" ]; do sleep 0.02; done\n'
        'printf \'{"rows": 3}\' > "$CHAIN_OUTPUT"'
    )
    slot.tokens[1] = sealed_token(SEAL, "nonce-1")
    done = go(slot, runner, slot.spec(stage, 1, nonce="nonce-1"))
    assert done.returncode == 0, done.stderr
    runner.wait_line(lambda line: line == "running")
    # the go's exec (`runner --go`: the spec written, checked and renamed into place), then the runner: the
    # spec taken, the seal's two tokens, the state emptied, the generation's records folder
    assert logged(log) == [
        "sh",
        "head",
        "wc",
        "mv",
        "mv",
        "sha256sum",
        "sha256sum",
        "rm",
        "mkdir",
    ]

    log.unlink()
    (slot.scratch / "end").touch()
    result = runner.result(1)
    assert (result.exit_code, result.outputs, result.outputs_status) == (0, {"rows": 3}, "ok")
    # to the result line: the state reclaimed from the stage, its outputs read and encoded (a pipeline: in
    # any order), the state emptied, the records folder; then, after the line (`stat` of /dev first), the
    # slot's clean-up
    ended = wait_logged(log, "stat")
    assert ended[:2] == ["chown", "chmod"] and sorted(ended[2:4]) == ["base64", "head"]
    assert ended[4:] == ["rm", "mkdir"]


@pytest.mark.parametrize("size", [998, 999, 1000, 1001, 1002])
def test_outputs_at_the_bound_by_their_encoding(slot: Slot, runners, size: int) -> None:
    """The size of the outputs is read from their encoding of one byte over the bound, whatever its padding:
    at most `max_outputs_bytes` (1000) is ok, one more too big."""
    stage = sh_stage(
        f'printf \'{{"a":"%s"}}\' "$(head -c {size - 8} /dev/zero | tr "\\0" a)" > "$CHAIN_OUTPUT"',
        max_outputs_bytes=1000,
    )
    result = runners(slot, stage, 1).result(1)
    if size <= 1000:
        assert (result.outputs, result.outputs_status) == ({"a": "a" * (size - 8)}, "ok")
    else:
        assert (result.outputs, result.outputs_status) == (None, "too-big")
    wait_file(slot.gen_dir(1) / "exit_code")
