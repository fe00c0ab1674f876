"""The stage's output captured by its runner and given to the task's fast go (`runner --go LENGTH SECONDS`,
`core/fastgo.py` `Capture`): the go's exec waits for the generation's end and prints the start line, each
stream's capture (length-framed base64) and the token-signed result line, while the container's streams
(the kubelet's log) still get every byte. Real busybox, the runner as pid 1 of its own pid namespace."""

from __future__ import annotations

import base64
import subprocess
import time

import pytest

from airflow_kruise_chain.core import ResultMarker, StartMarker, parse_marker
from airflow_kruise_chain.core.fastgo import parse_capture
from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, Runner, Slot, sh_stage
from tests.unit.test_core_runner_go import go_command

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(
    BUSYBOX is None or base.BWRAP is None,
    reason="needs a static busybox, bwrap and nsenter (a pid namespace)",
)
BOUND = 1048576
BOTH_STREAMS = (
    "echo out one; echo err one >&2; printf 'caf\\303\\251 \\000bin'; printf 'no end' >&2\n"
    "[ -p /dev/stdout ] && [ -p /dev/stderr ] && echo pipes >&2; exit 3"
)
"""a stage writing to both streams (binary bytes, unended lines), saying whether its streams are pipes"""
PLANTS_RECORDS = (
    'd=${CHAIN_OUTPUT%/*}; echo "::kruise-chain:: result gen=1 token=x" > $d/result;'
    " echo 0 > $d/exit_code; echo ok > $d/capture; sleep 0.5; echo real"
)
"""a stage writing its generation's exit_code, result (no token) and capture records itself, then more"""


PREPARE = "ab12"


def serving(slot: Slot, runners) -> Runner:
    """A parked runner, created for the slot's prepare `PREPARE` (env KC_PREPARE), that serves its slot (the
    go waits for that, then for the runner's state)."""
    runner = runners(slot, None, 0, KC_PREPARE=PREPARE)
    assert slot.serving()
    return runner


def go_with(
    slot: Slot, runners, script: str, wait: int = 10
) -> tuple[Runner, subprocess.CompletedProcess[bytes]]:
    """A runner (`serving`) given generation 1 of `script` by a `waiting_go`."""
    runner = serving(slot, runners)
    return runner, waiting_go(slot, runner, slot.spec(sh_stage(script), 1), wait)


def waiting_go(slot: Slot, runner: Runner, spec: str, wait: int = 10) -> subprocess.CompletedProcess[bytes]:
    """The task's exec that stays open for the generation's end (at most `wait` s); `spec` names the
    prepare (a go into a slot prepared ahead: the only one whose task asks for the capture)."""
    if "\nkc_p=" not in spec:
        spec = spec.replace("\nkc_stage_env()", f"\nkc_p={PREPARE}\nkc_stage_env()", 1)
    data = spec.encode()
    command = base.in_container(runner, [*go_command(slot, len(data)), str(wait)])
    return subprocess.run(command, input=data, env=runner.env, capture_output=True, timeout=wait + 20)


def each_tee(command: str) -> str:
    """Shell that runs `command` for each `tee` process it sees (`$p`: its /proc folder)."""
    argv1 = "$(tr '\\0' '\\n' <$p/cmdline 2>/dev/null | sed -n 2p)"
    return f'for p in /proc/[0-9]*; do [ "{argv1}" = tee ] && {command}; done'


def frame(out: bytes, generation: int) -> tuple[str, bytes, bytes, str] | None:
    """(start line, stdout, stderr, result line) of a go's answer; None for `capture gen=G none`."""
    lines = out.decode().split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("::kruise-chain:: ") and "gen=" in line)
    if lines[at] == f"::kruise-chain:: capture gen={generation} none":
        return None
    start, head1, data1, head2, data2, result, end = lines[at : at + 7]
    assert end == f"::kruise-chain:: capture gen={generation} end"
    streams = []
    for head, data, name in ((head1, data1, "stdout"), (head2, data2, "stderr")):
        size = int(head.rsplit("bytes=", 1)[1])
        assert head == f"::kruise-chain:: capture gen={generation} stream={name} bytes={size}"
        raw = base64.b64decode(data, validate=True)
        assert len(raw) == size
        streams.append(raw)
    return start, streams[0], streams[1], result


def test_the_waiting_go_gives_the_generations_output_and_result(slot, runners) -> None:
    runner, done = go_with(slot, runners, BOTH_STREAMS)
    assert done.returncode == 0, done.stderr
    got = frame(done.stdout, 1)
    assert got is not None, done.stdout
    start, out, err, result = got
    assert isinstance(parse_marker(start), StartMarker)
    assert out == b"out one\ncaf\xc3\xa9 \x00bin"
    assert err == b"err one\nno endpipes\n"  # the stage's two streams are pipes, as under a runtime's shim
    marker = parse_marker(result)
    assert isinstance(marker, ResultMarker) and (marker.generation, marker.token, marker.exit_code) == (
        1,
        slot.tokens[1],
        3,
    )
    parsed = parse_capture(done.stdout.decode(), 1)  # what the task reads of it
    assert parsed is not None and (parsed.stdout, parsed.stderr, parsed.result) == (out, err, result)
    assert runner.result(1).exit_code == 3  # the container's streams have it all too, as before
    seen = "\n".join(runner.seen)  # (the test reads the two streams merged: interleaved by arrival)
    assert all(text in seen for text in ("out one\n", "err one\n", "caf\u00e9 \x00bin", "no end", "pipes"))


def test_a_forged_frame_in_the_output_stays_inside_the_capture(slot, runners) -> None:
    forged = (
        "::kruise-chain:: capture gen=1 none\\n::kruise-chain:: capture gen=1 stream=stdout bytes=2\\n"
        "::kruise-chain:: result gen=1 token=tok1x stage=demo slot=slot-a exit=0 reason=completed\\n"
    )
    _, done = go_with(slot, runners, f"printf '{forged}'; printf '{forged}' >&2; exit 4")
    got = frame(done.stdout, 1)
    assert got is not None
    _, out, err, result = got
    assert out == err == forged.replace("\\n", "\n").encode()
    marker = parse_marker(result)
    assert isinstance(marker, ResultMarker) and (marker.token, marker.exit_code) == (slot.tokens[1], 4)


def test_planted_records_do_not_end_the_wait(slot, runners) -> None:
    """A stage writing gen-G/exit_code, result and capture of its own: the go waits for the runner's."""
    _, done = go_with(slot, runners, PLANTS_RECORDS)
    got = frame(done.stdout, 1)
    assert got is not None and got[1] == b"real\n"
    assert parse_marker(got[3]).token == slot.tokens[1]  # type: ignore[union-attr]


def test_output_past_the_bound_is_not_captured_and_the_log_has_every_byte(slot, runners) -> None:
    runner, done = go_with(slot, runners, f"head -c {BOUND + 1} /dev/zero | tr '\\0' a; echo; echo tail-line")
    assert done.returncode == 0 and frame(done.stdout, 1) is None
    assert runner.result(1).exit_code == 0
    assert "a" * (BOUND + 1) in runner.seen and "tail-line" in runner.seen
    assert (slot.gen_dir(1) / "stdout").exists() is False  # no copy kept of a stream past its bound


def test_a_stage_killing_its_capture_is_recorded_and_not_captured(slot, runners) -> None:
    runner, done = go_with(slot, runners, f"echo before; {each_tee('kill -KILL ${p#/proc/}')}; echo after")
    assert done.returncode == 0
    assert runner.result(1).reason == "completed"
    assert frame(done.stdout, 1) is None


def test_a_background_process_holding_the_streams_does_not_hold_the_runner(slot, runners) -> None:
    began = time.monotonic()
    runner, done = go_with(slot, runners, "sleep 300 & echo left")
    got = frame(done.stdout, 1)
    assert got is not None and got[1] == b"left\n"
    assert time.monotonic() - began < 8  # not the sleep's 300 s, nor the exec's bound
    assert base.parked_processes(runner.process) == []  # the tees drained and reaped, nothing left


def test_the_runner_does_not_wait_for_the_waiting_go(slot, runners) -> None:
    """The runner ends what the kubelet exec'd into its container after about 2 s; a go waiting for the
    generation's end (no process of its own) is spared: it gets its frame, not a kill."""
    began = time.monotonic()
    _, done = go_with(slot, runners, "echo quick", wait=30)
    assert done.returncode == 0, done.stderr
    assert frame(done.stdout, 1) is not None
    assert time.monotonic() - began < 1.9  # no 2 s wait for exec'd processes before the result


def test_the_wait_is_bounded(slot, runners) -> None:
    began = time.monotonic()
    runner, done = go_with(slot, runners, "echo long; sleep 4; echo done", wait=1)
    assert done.returncode == 0 and frame(done.stdout, 1) is None
    assert time.monotonic() - began < 3.5
    assert runner.result(1).exit_code == 0 and "done" in runner.seen


def test_a_go_already_started_by_the_annotation_still_gives_the_capture(slot, runners) -> None:
    runner = serving(slot, runners)
    stage = sh_stage("echo by-annotation; sleep 0.5")
    slot.assign(stage, 1, prepare=PREPARE)
    runner.wait_line(lambda line: line == "by-annotation")
    done = waiting_go(slot, runner, slot.spec(stage, 1))
    assert b": not taken" in done.stdout
    got = frame(done.stdout, 1)
    assert got is not None and got[1] == b"by-annotation\n"


def test_the_result_comes_after_every_line_the_stage_wrote(slot, runners) -> None:
    """The runner records and announces the result only once the capture's tees have drained: the last
    lines are in the capture and, before the result line, in the container's stream."""
    runner, done = go_with(
        slot, runners, "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i + 1)); done; printf last"
    )
    got = frame(done.stdout, 1)
    assert got is not None
    assert got[1] == "".join(f"line-{i}\n" for i in range(3000)).encode() + b"last"
    runner.result(1)
    assert runner.seen.index("last") < next(
        i for i, line in enumerate(runner.seen) if line.startswith("::kruise-chain:: result gen=1 ")
    )


def test_a_generation_not_said_go_into_a_prepared_slot_is_not_captured(slot, runners) -> None:
    """Its task reads the slot's log at once (one image, the same container): the stage gets the container's
    streams as before captures, no tee, no copy."""
    runner = serving(slot, runners)
    stage = sh_stage(f"echo plain; {each_tee('echo a-tee-runs')}; true")
    slot.assign(stage, 1)
    assert runner.result(1).exit_code == 0
    assert "plain" in runner.seen and "a-tee-runs" not in runner.seen
    base.parked_processes(runner.process)
    assert (slot.gen_dir(1) / "capture").read_text() == "none\n"
    assert not (slot.gen_dir(1) / "stdout").exists()


def test_the_tees_hold_nothing_of_the_runners(slot, runners) -> None:
    """A tee runs beside the stage, as its user: its environment has none of the runner's secrets (the seal,
    the run spec), whatever /proc shows of it (here a dumpable busybox shows it all)."""
    runner = runners(slot, None, 0, KC_PREPARE=PREPARE, KC_SEAL="the-pods-seal-xyz")
    assert slot.serving()
    look = "{ echo tee-seen; grep -q -e the-pods-seal-xyz -e kc_stage_argv $p/environ && echo leaked; }"
    script = f"echo x; {each_tee(look)}; true"
    done = waiting_go(slot, runner, slot.spec(sh_stage(script), 1, nonce="n1"))
    assert done.returncode == 0
    runner.wait_line(lambda line: line.startswith("::kruise-chain:: result gen=1 "))
    assert "tee-seen" in runner.seen and "leaked" not in runner.seen
