"""The fast go's delivery (`core/fastgo.py`): which plans it execs for, what it sends, and how a refused or
failed exec leaves the go to the annotation with one line in the task log; a go opened before its patch
(`open_go`) sends its spec only once the patch succeeded."""

from __future__ import annotations

import time
from typing import Any

from airflow_kruise_chain.core.fastgo import GO_COMMAND, deliver_go, go_spec, open_go
from airflow_kruise_chain.core.podview import StageRecord
from airflow_kruise_chain.core.swap import SwapPlan
from airflow_kruise_chain.core.wire import run_spec, slot_annotation

SPEC = run_spec(generation=7, token="t7", stage="s", argv=["echo", "hi"], env={}, outputs_max=100)


def plan(action: str = "go", spec: str = SPEC) -> SwapPlan:
    record = StageRecord(7, "slot-b", "busybox:1.36", 1, "", "2026-01-01T00:00:00Z", action, token="t7")
    patch = {"metadata": {"annotations": {slot_annotation("slot-b", "run"): spec}}}
    return SwapPlan(action, "s", "slot-b", 7, record, "pod", "ns", {}, patch)  # type: ignore[arg-type]


class FakeExec:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def exec_in_pod(self, *args: Any) -> tuple[int, str]:
        self.calls.append(args)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


class Refused(RuntimeError):
    def __init__(self, status: int) -> None:
        super().__init__(f"exec failed ({status})")
        self.status = status


def test_a_go_sends_its_run_spec_to_the_slots_runner():
    api, lines = FakeExec((0, "")), []
    assert deliver_go(api, plan(), lines.append) is True
    ((name, namespace, container, command, stdin, _timeout),) = api.calls
    assert (name, namespace, container) == ("pod", "ns", "slot-b")
    assert command == [*GO_COMMAND, str(len(SPEC.encode()))] and stdin == SPEC.encode()
    assert lines == []


def test_only_a_go_is_delivered():
    api = FakeExec((0, ""))
    for action in ("patch", "reattach", "adopt"):
        assert go_spec(plan(action)) is None
        assert deliver_go(api, plan(action), print) is False
    assert api.calls == []


def test_a_refusal_or_failure_leaves_the_go_to_the_annotation_and_says_so_once():
    for answer, said in (
        (Refused(403), "refused by RBAC"),
        (Refused(500), "failed"),
        (TimeoutError("no answer"), "failed"),
        ((1, "::kruise-chain:: error: stale\n"), "not taken in slot-b (::kruise-chain:: error: stale)"),
    ):
        lines: list[str] = []
        assert deliver_go(FakeExec(answer), plan(), lines.append) is False
        assert len(lines) == 1 and said in lines[0] and "generation 7 goes by its annotation" in lines[0]


def test_a_late_go_says_the_annotation_was_first_not_an_error():
    answer = (0, "::kruise-chain:: generation 7 already started in slot-b: not taken\n")
    lines: list[str] = []
    assert deliver_go(FakeExec(answer), plan(), lines.append) is False
    assert lines == [
        "::kruise-chain:: go via pods/exec not needed in slot-b: generation 7 already started by its "
        "annotation"
    ]


class Session:
    """An exec opened with its stdin open: what it was given, and whether it was closed."""

    def __init__(self, answer: Any) -> None:
        self.answer, self.sent, self.closed = answer, [], False
        self.timeouts: list[float] = []

    def send(self, stdin: bytes, timeout: float) -> tuple[int, str]:
        self.sent.append(stdin)
        self.timeouts.append(timeout)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer

    def close(self) -> None:
        self.closed = True


class FakeOpen(FakeExec):
    def __init__(self, answer: Any, opened: Any = None) -> None:
        super().__init__(answer)
        self.opened, self.sessions = opened, []

    def open_exec_in_pod(self, *args: Any) -> Session:
        self.calls.append(args)
        if isinstance(self.opened, BaseException):
            raise self.opened
        self.sessions.append(Session(self.answer))
        return self.sessions[-1]


def test_open_go_opens_the_exec_at_once_and_sends_the_spec_once_the_patch_succeeded():
    api, lines = FakeOpen((0, "")), []
    go = open_go(api, plan(), lines.append)
    assert go is not None
    for _ in range(500):  # the exec is opened on the go's thread, before the swap's patch is decided
        if api.sessions:
            break
        time.sleep(0.01)
    ((name, namespace, container, command),) = api.calls
    assert (name, namespace, container) == ("pod", "ns", "slot-b")
    assert command == [*GO_COMMAND, str(len(SPEC.encode()))]
    assert api.sessions[0].sent == []  # nothing on stdin before the patch succeeded
    go.decide(True)
    go.wait()
    assert api.sessions[0].sent == [SPEC.encode()] and api.sessions[0].closed
    assert go.delivered and lines == []


def test_a_go_whose_patch_failed_closes_its_exec_with_nothing_sent_and_says_nothing():
    for opened in (None, Refused(403)):
        api, lines = FakeOpen((0, ""), opened), []
        go = open_go(api, plan(), lines.append)
        assert go is not None
        go.decide(False)
        go.wait()
        assert all(session.sent == [] and session.closed for session in api.sessions)
        assert not go.delivered and lines == []


def test_an_opened_go_refused_or_failed_after_its_patch_leaves_the_go_to_the_annotation():
    for answer, opened, said in (
        ((0, ""), Refused(403), "refused by RBAC"),
        (TimeoutError("no answer"), None, "failed"),
        ((65, "::kruise-chain:: error: not a run spec\n"), None, "not taken in slot-b"),
    ):
        lines: list[str] = []
        go = open_go(FakeOpen(answer, opened), plan(), lines.append)
        assert go is not None
        go.decide(True)
        go.wait()
        assert not go.delivered
        assert len(lines) == 1 and said in lines[0] and "generation 7 goes by its annotation" in lines[0]


def test_only_a_go_is_opened():
    api = FakeOpen((0, ""))
    assert all(open_go(api, plan(action), print) is None for action in ("patch", "reattach", "adopt"))
    assert api.calls == []
