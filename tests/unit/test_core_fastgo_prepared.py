"""A fast go into a slot prepared ahead (its spec names the prepare) that reaches the slot's old container,
which the kubelet has not killed yet, is refused there (`runner --go` exits `REFUSED`) and tried again
until the container created for the prepare takes it, an exec that fails meanwhile included (the old
container gone, the new one not started); one still refused after `EXEC_TIMEOUT` leaves the go to the
annotation, said once."""

from __future__ import annotations

from typing import Any

from airflow_kruise_chain.core import fastgo
from airflow_kruise_chain.core.fastgo import REFUSED, open_go
from airflow_kruise_chain.core.wire import run_spec
from tests.unit.test_core_fastgo import FakeOpen, plan

SPEC = run_spec(
    generation=7, token="t7", stage="s", argv=["echo", "hi"], env={}, outputs_max=100, prepare="ab12"
)


class Answers(FakeOpen):
    """The opened exec answers `first`; each exec after it the next of `then` (the last one for ever)."""

    def __init__(self, first: Any, then: list[Any]) -> None:
        super().__init__(first)
        self.then = then

    def exec_in_pod(self, *args: Any) -> tuple[int, str]:
        self.calls.append(args)
        answer = self.then.pop(0) if len(self.then) > 1 else self.then[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_a_refused_go_is_tried_again_until_the_prepared_container_takes_it() -> None:
    refused = (
        REFUSED,
        "::kruise-chain:: error: generation 7 is for the container prepared as ab, not this one",
    )
    api = Answers(refused, [(137, ""), RuntimeError('container not found ("slot-b")'), (0, "")])
    lines: list[str] = []
    go = open_go(api, plan(spec=SPEC), lines.append)
    assert go is not None
    go.decide(True)
    go.wait()
    assert go.delivered and lines == []
    assert len(api.calls) == 4  # the opened exec, then three: ended with the old container, failed, taken
    assert all(call[4] == SPEC.encode() for call in api.calls[1:])  # the same spec each time


def test_a_go_refused_until_the_deadline_goes_by_its_annotation(monkeypatch) -> None:
    monkeypatch.setattr(fastgo, "EXEC_TIMEOUT", 0.3)
    refused = (REFUSED, "refused")
    api = Answers(refused, [refused])
    lines: list[str] = []
    go = open_go(api, plan(spec=SPEC), lines.append)
    assert go is not None
    go.decide(True)
    go.wait()
    assert not go.delivered and 2 < len(api.calls) < 20
    assert len(lines) == 1 and "goes by its annotation" in lines[0]


def test_a_go_that_names_no_prepare_is_not_tried_again() -> None:
    api = Answers((1, "failed"), [(0, "")])
    lines: list[str] = []
    go = open_go(api, plan(), lines.append)
    assert go is not None
    go.decide(True)
    go.wait()
    assert not go.delivered and len(api.calls) == 1 and len(lines) == 1


def test_failed_tries_are_spaced_out(monkeypatch) -> None:
    # no running container of the slot for a moment: not an exec every 0.05 s meanwhile
    monkeypatch.setattr(fastgo, "EXEC_TIMEOUT", 1.0)
    api = Answers((REFUSED, "refused"), [RuntimeError('container not found ("slot-b")')])
    go = open_go(api, plan(spec=SPEC), lambda _line: None)
    assert go is not None
    go.decide(True)
    go.wait()
    assert not go.delivered and len(api.calls) <= 6  # 0.05 + 0.1 + 0.2 + 0.4 + 0.4 s: 1 + 5 execs


def test_a_first_exec_that_fails_is_tried_again_when_the_go_names_a_prepare() -> None:
    """The old container stopping under the first exec (runc: `cannot exec in a stopped container`; the
    kubelet: `container not found`): the next try reaches the container created for the prepare. Before,
    only an exec after a refusal was tried again, and this go went by its annotation."""
    stopped = RuntimeError(
        "exec in pod ns/pod failed: Internal error occurred: OCI runtime exec failed: exec failed: cannot "
        "exec in a stopped container: unknown"
    )
    for opened in (None, stopped):  # the failure on the opened exec's answer, or on its opening
        api = Answers(stopped, [(0, "")])
        api.opened = opened
        lines: list[str] = []
        go = open_go(api, plan(spec=SPEC), lines.append)
        assert go is not None
        go.decide(True)
        go.wait()
        assert go.delivered and lines == [] and len(api.calls) == 2


def test_a_first_exec_rbac_refused_is_not_tried_again() -> None:
    from tests.unit.test_core_fastgo import Refused

    api = Answers(Refused(403), [(0, "")])
    lines: list[str] = []
    go = open_go(api, plan(spec=SPEC), lines.append)
    assert go is not None
    go.decide(True)
    go.wait()
    assert not go.delivered and len(api.calls) == 1 and "refused by RBAC" in lines[0]
