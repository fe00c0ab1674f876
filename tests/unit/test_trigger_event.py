"""The deferred stage's end as the resumed task reads it from the trigger's event (triggers/event.py): what
checks is reported as it is, anything else is refused (the task then reads the pod)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kruise_chain.core.output import TAIL_LINES
from airflow_kruise_chain.core.podview import StageRecord
from airflow_kruise_chain.triggers.event import MAX_RESULT_LINE, MalformedEvent, logged, stage_end

TOKEN = "t0k"
RECORD = StageRecord(
    3, "slot-b", "acme/load:1", 1, "containerd://old", "2024-05-01T10:00:00Z", "go", "", TOKEN
)


def result_line(
    *,
    gen: int = 3,
    token: str = TOKEN,
    stage: str = "load",
    slot: str = "slot-b",
    exit_code: int = 0,
    reason="completed",
) -> str:
    return (
        f"::kruise-chain:: result gen={gen} token={token} stage={stage} slot={slot} exit={exit_code} "
        f"reason={reason} started=2024-05-01T10:00:01Z finished=2024-05-01T10:00:03.5Z outputs=- "
        "outputs_status=absent streams=2"
    )


def event(**changes: Any) -> dict[str, Any]:
    """A finished event as the trigger fires it for generation 3 of `load` in slot-b."""
    base = {
        "status": "finished",
        "generation": 3,
        "logged": 4,
        "tail": ["a", "b"],
        "state": "finished",
        "result": result_line(),
        "record": RECORD.to_annotation(),
        "parked": True,
    }
    return {**base, **changes}


def read(payload: dict[str, Any]):
    return stage_end(payload, stage="load", slot="slot-b", generation=3)


def test_an_event_that_checks_is_the_stages_end() -> None:
    end = read(event())
    assert end is not None and end.parked is True and end.record == RECORD
    result = end.result
    assert (result.stage, result.generation, result.slot, result.image) == (
        "load",
        3,
        "slot-b",
        "acme/load:1",
    )
    assert (result.exit_code, result.duration_seconds, result.log_tail) == (0, 2.5, ["a", "b"])
    failed = read(event(result=result_line(exit_code=3)))
    assert failed is not None and failed.result.exit_code == 3 and not failed.result.succeeded


@pytest.mark.parametrize(
    "changes",
    [
        {"parked": "yes"},
        {"parked": 1},
        {"parked": None},
        {},  # an older trigger: no parked field
    ],
    ids=["string", "int", "none", "absent"],
)
def test_only_a_true_parked_spares_the_task_its_park(changes: dict[str, Any]) -> None:
    payload = event(**changes)
    if not changes:
        del payload["parked"]
    end = read(payload)
    assert end is not None and end.parked is False


@pytest.mark.parametrize(
    "changes",
    [
        {"result": None},  # the trigger read no result line (moved on, lost stream): the pod tells
        {"result": result_line(reason="stopped", exit_code=143)},  # stopped: the pod may have gone with it
    ],
    ids=["no-result", "stopped"],
)
def test_no_completed_result_leaves_it_to_the_pod(changes: dict[str, Any]) -> None:
    assert read(event(**changes)) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"result": 42},
        {"result": "x" * (MAX_RESULT_LINE + 1)},
        {"result": "stage printed this"},
        {"result": result_line(token="forged")},
        {"result": result_line(gen=2)},
        {"result": result_line(stage="other")},
        {"result": result_line(slot="slot-a")},
        {"record": None},
        {"record": "{not json"},
        {"record": ["list"]},
        {"record": StageRecord(2, "slot-b", "i", 1, "", "", "go", "", TOKEN).to_annotation()},
        {"record": StageRecord(3, "slot-a", "i", 1, "", "", "go", "", TOKEN).to_annotation()},
        {"tail": "a string"},
        {"tail": [1, 2]},
        {"tail": ["line"] * (TAIL_LINES + 1)},
        {"tail": ["x" * (MAX_RESULT_LINE + 1)]},
    ],
    ids=[
        "result-not-str",
        "result-too-long",
        "result-not-a-marker",
        "other-token",
        "other-generation",
        "other-stage",
        "other-slot",
        "no-record",
        "record-not-json",
        "record-not-str",
        "record-other-generation",
        "record-other-slot",
        "tail-not-list",
        "tail-not-lines",
        "tail-too-many",
        "tail-line-too-long",
    ],
)
def test_an_event_that_does_not_check_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(MalformedEvent):
        read(event(**changes))


@pytest.mark.parametrize(
    ("value", "count"),
    [(4, 4), (0, 0), (-1, 0), ("4", 0), (True, 0), (None, 0), (4.5, 0)],
)
def test_the_logged_count_is_a_non_negative_int_or_zero(value: Any, count: int) -> None:
    assert logged({"logged": value}) == count
    assert logged({}) == 0
