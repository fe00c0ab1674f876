"""A stage printing one 32 MB line (issue 12, item 3): the log is streamed in linear time with bounded memory,
and what is kept of a line (task log, XCom `log_tail`, the failure's message) is bounded and says how much
was cut."""

from __future__ import annotations

import json
import re
import tracemalloc

import pendulum
import pytest

from airflow_kruise_chain.core.lines import LINE_HEAD, LINE_TAIL, TAIL_LINE_CHARS, LineSplitter, clip
from airflow_kruise_chain.core.status import ResultMarker, parse_marker
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

START = pendulum.datetime(2026, 1, 1, tz="UTC")
LINE = 32 * 1024 * 1024
RESULT = (
    "::kruise-chain:: result gen=1 stage=s slot=slot-a exit=0 reason=completed "
    "started=2026-01-01T00:00:00Z finished=2026-01-01T00:00:01Z outputs=- outputs_status=absent"
)


def test_a_32mb_line_is_split_in_bounded_memory_and_the_result_line_after_it_survives() -> None:
    splitter = LineSplitter()
    chunk = b"x" * 4096
    lines: list[str] = []
    tracemalloc.start()
    try:
        for _ in range(LINE // len(chunk)):
            lines += splitter.feed(chunk)
        # the stage left its line open; the runner starts its result on a line of its own
        lines += splitter.feed(b"\n" + RESULT.encode() + b"\nnext\n")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * (LINE_HEAD + LINE_TAIL), peak  # not the 32 MB line (nor copies of it)
    assert len(lines) == 3 and lines[2] == "next"
    kept = lines[0]
    assert len(kept) < LINE_HEAD + LINE_TAIL + 64
    cut = LINE - LINE_HEAD - LINE_TAIL
    assert f"…[{cut} bytes cut]…" in kept  # says how much was cut
    assert isinstance(parse_marker(lines[1]), ResultMarker)
    assert splitter.finish() is None
    # a marker at the end of a stage's own line is not the runner's (markers start their line)
    tail = LineSplitter()
    (line,) = tail.feed(b"x" * 100_000 + RESULT.encode() + b"\n")
    assert parse_marker(line) is None


def test_lines_are_split_exactly_whatever_the_chunking() -> None:
    data = "é".encode() * 20 + b"\n\nab\n" + "ü".encode() * 7
    for size in (1, 2, 3, 5, len(data)):
        splitter = LineSplitter(head=8, tail=32)
        lines = [line for i in range(0, len(data), size) for line in splitter.feed(data[i : i + size])]
        assert [*lines, splitter.finish()] == ["é" * 20, "", "ab", "ü" * 7], size
    assert clip("a" * 10_000) == "a" * 512 + " …[7952 characters cut]… " + "a" * 1536
    assert len(clip("a" * 10_000)) < TAIL_LINE_CHARS + 32
    assert clip(clip("a" * 10_000)) == clip("a" * 10_000)
    assert clip("a" * (TAIL_LINE_CHARS + 10)) == "a" * (TAIL_LINE_CHARS + 10)  # not worth a note


@pytest.mark.slow
def test_a_stage_printing_a_32mb_line_fails_with_a_bounded_message_and_xcom(e2e_cluster, capfd) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core import pod_name_for
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    failures = Failures()
    script = f"echo before; head -c {LINE} /dev/zero | tr '\\000' x; echo; echo after; exit 3"
    with DAG("hostile_long_line", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            chain.stage(
                "long", image="busybox:1.36", cmds=["/bin/sh", "-c", script], on_failure_callback=failures
            )
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert task_states(run)["c.long"][0] == "failed"
    error = str(failures.errors["c.long"])
    assert "exit code 3" in error  # the stage's own failure
    assert len(error) < 4 * TAIL_LINE_CHARS, len(error)  # not 32 MB (nor a 2 MB line) in the exception
    result = xcoms(run)["c.long"]
    assert len(json.dumps(result)) < 4 * TAIL_LINE_CHARS
    before, *long_lines, after = result["log_tail"]
    assert (before, after) == ("before", "after")
    # The runtime copies stdout and stderr apart, a record at a time (a long line as 16 KiB partial records):
    # the runner's stderr-start line (or its stderr-end) can land between two records of the x line, and the
    # kubelet serves it inside that line (kuberuntime logs.go writes a partial record without a newline).
    # The line then reaches log_tail in two pieces; every x is still accounted for, in a kept or cut part.
    assert 1 <= len(long_lines) <= 2, [piece[-120:] for piece in long_lines]
    xs = 0
    for piece in long_lines:
        piece = re.sub(r"::kruise-chain:: stderr-(?:start|end) gen=1 token=\S+ stage=long$", "", piece)
        assert piece.startswith("x" * 256) and piece.endswith("x" * 256), piece[-120:]
        assert len(piece) < TAIL_LINE_CHARS + 64
        # cut in the stream and then in log_tail (the note adds both up), or a short piece in log_tail only
        cut = re.search(r" …\[(?:(\d+) bytes and )?(\d+) characters cut\]… ", piece)
        assert cut, piece[400:700]
        xs += int(cut.group(1) or 0) + int(cut.group(2)) + len(piece) - len(cut.group(0))
    assert xs == LINE
    assert len(out) < LINE // 64  # the task log got the bounded line, not the 32 MB

    # the hook's reader alone, on the same log (served by the local cluster in this process): bounded memory
    hook = KruiseHook(conn_id="kubernetes_default")
    pod = pod_name_for("c", dag.dag_id, run.run_id)
    lengths = []
    tracemalloc.start()
    try:
        for line in hook.follow_log(pod, "default", result["slot"]):
            lengths.append(len(line))
            if line == "after":
                break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(lengths) <= LINE_HEAD + LINE_TAIL + 64
    assert peak < 4 * 1024 * 1024, peak  # the old reader held the 32 MB line, and copies of it
