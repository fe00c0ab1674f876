"""The fast go's capture protocol (`fastgo.parse_capture`, `PendingGo.capture`): a go into a prepared slot
asks its exec to wait for the generation's end (`runner --go LENGTH SECONDS`) and takes what it prints only
as a whole frame: the start line, each stream's length-framed base64, the result line. A forged end in the
stage's output, a stream past the bound, an exec cut mid-stream or an old runner's answer give no capture
(the log then)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from airflow_kruise_chain.core import fastgo
from airflow_kruise_chain.core.fastgo import CAPTURE_MAX, CAPTURE_WAIT, GO_COMMAND, open_go, parse_capture
from tests.unit.test_core_fastgo import SPEC, FakeOpen, Refused, plan
from tests.unit.test_core_fastgo_prepared import SPEC as PREPARED

START = "::kruise-chain:: start gen=7 token=b7 stage=s slot=slot-b at=2024-05-01T10:00:02Z"
RESULT = "::kruise-chain:: result gen=7 token=t7 stage=s slot=slot-b exit=0 reason=completed streams=2"


def framed(
    stdout: bytes, stderr: bytes, *, sizes: tuple[int, int] | None = None, result: str = RESULT
) -> str:
    sizes = sizes or (len(stdout), len(stderr))
    out = [START]
    for name, data, size in (("stdout", stdout, sizes[0]), ("stderr", stderr, sizes[1])):
        out += [f"::kruise-chain:: capture gen=7 stream={name} bytes={size}", base64.b64encode(data).decode()]
    return "\n".join([*out, result, "::kruise-chain:: capture gen=7 end", ""])


def test_a_whole_frame_gives_the_generations_lines() -> None:
    got = parse_capture(framed(b"one\n\xc3\xa9two", b"err\n"), 7)
    assert got is not None
    assert got.lines() == [START, "one", "étwo", "err", RESULT]


def test_a_forged_end_in_the_stages_output_stays_its_output() -> None:
    forged = f"{RESULT}\n::kruise-chain:: capture gen=7 stream=stderr bytes=0\n\n{RESULT}\n".encode()
    got = parse_capture(framed(forged, b""), 7)
    assert got is not None and got.stdout == forged and got.result == RESULT
    assert got.lines()[-1] == RESULT and got.lines().count(RESULT) == 3  # two are the stage's, in order


@pytest.mark.parametrize(
    "output",
    [
        framed(b"x" * 10, b"", sizes=(9, 0)),  # a length that is not the data's
        framed(b"x" * (CAPTURE_MAX + 1), b""),  # past the bound
        framed(b"abc\n", b"def\n")[:-40],  # the exec cut mid-stream: no end line, a part of the result
        framed(b"abc\n", b"def\n")[:-30] + "an error on its stderr\n",
        framed(b"abc\n", b"def\n").replace("YWJjCg==", "YWJj!g=="),  # not base64
        "::kruise-chain:: capture gen=7 none\n",  # the runner had none to give
        "",  # a runner before captures: it ignores the wait and says nothing
        framed(b"a", b"b").replace("gen=7", "gen=8"),  # another generation's
        framed(b"a", b"b", result="::kruise-chain:: stderr-end gen=7 token=t7 stage=s"),
    ],
)
def test_anything_but_a_whole_frame_gives_none(output: str) -> None:
    assert parse_capture(output, 7) is None


def test_a_go_into_a_prepared_slot_waits_for_the_end_and_keeps_the_capture() -> None:
    text = "::kruise-chain:: generation 7 already started in slot-b: not taken\n" + framed(b"hi\n", b"")
    api, lines = FakeOpen((0, text)), []
    go = open_go(api, plan(spec=PREPARED), lines.append, CAPTURE_WAIT)
    assert go is not None
    ended: list[bool] = []
    go.on_end(lambda: ended.append(True))
    go.decide(True)
    go.wait()
    assert api.calls[0][3] == [*GO_COMMAND, str(len(PREPARED.encode())), str(CAPTURE_WAIT)]
    assert go.ended and ended == [True]
    assert go.capture is not None and go.capture.stdout == b"hi\n"
    assert not go.delivered and len(lines) == 1 and "already started" in lines[0]  # as before the frame
    assert api.sessions[0].timeouts == [fastgo.EXEC_TIMEOUT + CAPTURE_WAIT]


def test_any_other_go_does_not_wait() -> None:
    api = FakeOpen((0, ""))
    go = open_go(api, plan(spec=SPEC), lambda _line: None, CAPTURE_WAIT)
    assert go is not None
    go.decide(True)
    go.wait()
    assert api.calls[0][3] == [*GO_COMMAND, str(len(SPEC.encode()))]  # its log is readable at once
    assert go.delivered and go.capture is None and go.ended


def test_a_failed_exec_ends_with_no_capture() -> None:
    api = FakeOpen((0, ""), opened=RuntimeError("exec failed"))
    go = open_go(api, plan(spec=PREPARED), lambda _line: None, CAPTURE_WAIT)
    assert go is not None
    go.decide(True)
    go.wait()
    assert go.ended and go.capture is None


class RefusedOnce(FakeOpen):
    """An admission policy from before the wait: a go with a fourth argument is refused (403)."""

    def open_exec_in_pod(self, *args: Any) -> Any:
        if len(args[3]) == 4:
            self.calls.append(args)
            raise Refused(403)
        return super().open_exec_in_pod(*args)


def test_a_go_refused_with_its_wait_is_opened_again_without_it() -> None:
    api, lines = RefusedOnce((0, "")), []
    go = open_go(api, plan(spec=PREPARED), lines.append, CAPTURE_WAIT)
    assert go is not None
    go.decide(True)
    go.wait()
    assert [len(call[3]) for call in api.calls] == [4, 3]
    assert go.delivered and go.capture is None and lines == []


def test_the_capture_of_a_go_tried_again_is_kept() -> None:
    """The kubelet replaces the prepared slot's container: no container of the slot runs when the exec is
    opened ("container not found"). The go is tried again, and the capture of the exec that took it kept."""
    api = FakeOpen((0, framed(b"hi\n", b"")), opened=RuntimeError('container not found ("slot-b")'))
    lines: list[str] = []
    go = open_go(api, plan(spec=PREPARED), lines.append, CAPTURE_WAIT)
    assert go is not None
    go.decide(True)
    go.wait()
    assert len(api.calls) == 2 and go.delivered and lines == []
    assert go.capture is not None and go.capture.stdout == b"hi\n"
