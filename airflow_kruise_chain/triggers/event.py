"""A deferred stage's end as its trigger hands it to the resumed task, read back with checks.

`StageOutputFollower.finished` (triggers/output.py) puts in the event what the resumed task needs to report
the stage with no Kubernetes client and no API call: the runner's result line, the stage's record, the last
lines, how far it logged and whether it parked the slot. The event comes back to the task through Airflow's
metadata database (the task instance's `next_kwargs`), so the task checks it against what it swapped in
itself (its own deferral kwargs: stage, slot, generation) before it trusts it, and reads the pod when it does
not check. This module imports no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_kruise_chain.core.lines import LINE_HEAD, LINE_TAIL
from airflow_kruise_chain.core.output import TAIL_LINES
from airflow_kruise_chain.core.podview import StageRecord
from airflow_kruise_chain.core.status import ResultMarker, StageResult, matches, parse_marker

MAX_RESULT_LINE = LINE_HEAD + LINE_TAIL + 256
"""the longest result line a trigger can read (the log stream keeps a long line's head and tail)"""


class MalformedEvent(ValueError):
    """An event that holds a result which does not check against the task's own stage, slot and generation."""


@dataclass(frozen=True)
class StageEnd:
    """A deferred stage's end as its trigger read it."""

    result: StageResult
    record: StageRecord
    parked: bool
    """whether the trigger parked the slot (or found nothing to park): else the resumed task parks it"""


def stage_end(event: Mapping[str, Any], *, stage: str, slot: str, generation: int) -> StageEnd | None:
    """The end of generation `generation` of `stage` in `slot` (the task's own deferral) that `event` reports.

    None when the event holds no result of a stage that ended by itself (it was stopped or killed, moved on,
    or the trigger read no result line): the task reads the pod then. `MalformedEvent` when it holds one
    that does not check (wrong types, another stage, slot, generation or token, too many or too long lines).
    """
    line = event.get("result")
    if line is None:
        return None
    if not isinstance(line, str) or len(line) > MAX_RESULT_LINE:
        raise MalformedEvent("its result is not a line the trigger could have read")
    marker = parse_marker(line)
    if not isinstance(marker, ResultMarker):
        raise MalformedEvent("its result is not the runner's result line")
    text = event.get("record")
    record = StageRecord.from_annotation(text) if isinstance(text, str) else None
    if record is None:
        raise MalformedEvent("it holds no stage record")
    if record.generation != generation or record.slot != slot:
        raise MalformedEvent(
            f"its record is of generation {record.generation} in {record.slot}, not {generation} in {slot}"
        )
    if not matches(marker, generation, record.token) or (marker.stage, marker.slot) != (stage, slot):
        raise MalformedEvent("its result line is not the runner's for this stage's generation and token")
    tail = event.get("tail", [])
    if (
        not isinstance(tail, list)
        or len(tail) > TAIL_LINES
        or not all(isinstance(one, str) and len(one) <= MAX_RESULT_LINE for one in tail)
    ):
        raise MalformedEvent(f"its tail is not a list of at most {TAIL_LINES} lines")
    if marker.reason != "completed":
        return None  # stopped or killed: the pod tells what happened (it may be gone with it)
    result = StageResult.from_marker(marker, image=record.image, log_tail=tail)
    return StageEnd(result, record, parked=event.get("parked") is True)


def logged(event: Mapping[str, Any]) -> int:
    """The stage's lines the trigger logged (the resumed task logs only those after them); 0 if unknown."""
    count = event.get("logged")
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0
