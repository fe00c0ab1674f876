"""The fast go's delivery (`core/fastgo.py`): which plans it execs for, what it sends, and how a refused or
failed exec leaves the go to the annotation with one line in the task log."""

from __future__ import annotations

from typing import Any

from airflow_kruise_chain.core.fastgo import GO_COMMAND, deliver_go, go_spec
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


def test_start_go_delivers_on_a_thread_and_waits_for_it():
    import threading

    from airflow_kruise_chain.core.fastgo import start_go

    release = threading.Event()

    class Slow(FakeExec):
        def exec_in_pod(self, *args: Any) -> tuple[int, str]:
            release.wait(10)
            return super().exec_in_pod(*args)

    api = Slow((0, ""))
    settle = start_go(api, plan(), print)
    assert api.calls == []  # the task goes on while the exec runs
    release.set()
    settle()
    assert len(api.calls) == 1
    start_go(api, plan("patch"), print)()  # no go: no thread, nothing to wait for
    assert len(api.calls) == 1
