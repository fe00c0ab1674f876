"""In Airflow's forked task process the work a stage's end leaves for the next stages (park its slot, size the
next stage's ahead, prepare two ahead) starts at the process's exit, after the task's records of the end and
its success: its requests ran beside those records before (issue 40, the stage task's tail under the real
supervisor: bench/trips.py). Anywhere else (`dag.test()`) it still starts as soon as the result is read."""

from __future__ import annotations

import atexit
from collections.abc import Callable
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kruise_chain.core.podview import StageRecord
from airflow_kruise_chain.core.status import StageResult
from airflow_kruise_chain.operators import stage_result
from airflow_kruise_chain.operators.chain import KruiseChainOperator

AT = datetime(2026, 12, 7, tzinfo=UTC)
RECORD = StageRecord(3, "slot-b", "busybox:1.36", 1, "", AT.isoformat(), "go")
RESULT = StageResult("s", 3, "slot-b", "busybox:1.36", 0, "completed", AT, AT, 0.2)


class Park:
    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def settle(self) -> None:
        self.steps.append("park settled")


class Driver:
    """A driver whose stage ends at once; its park records when it starts."""

    pod_name = "c-pod"

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps

    def follow(self, plan: Any, timeouts: Any, *, events: Any, **kwargs: Any) -> StageResult:
        events.ended(RESULT)
        return RESULT

    def start_park(self, stage: str, slot: str, generation: int, **kwargs: Any) -> Park:
        self.steps.append(f"park started {slot} {generation} ahead={kwargs['ahead']}")
        return Park(self.steps)


def run_stage_end(monkeypatch, forked: bool) -> tuple[list[str], list[Callable[[], None]]]:
    """Follow a stage to its end and report it; the steps in order, and the atexit handlers registered."""
    steps: list[str] = []
    at_exit: list[Callable[[], None]] = []
    monkeypatch.setattr(stage_result, "_forked_task_process", lambda: forked)
    monkeypatch.setattr(atexit, "register", at_exit.append)
    monkeypatch.setattr(stage_result.threading, "Thread", ThreadNow)
    task = KruiseChainOperator(
        task_id="s", chain_name="c", stage_name="s", namespace="data", image="busybox:1.36", cmds=["true"]
    )
    ti = SimpleNamespace(
        try_number=1, xcom_push=lambda key, value: steps.append(f"xcom {key} {value['state']}")
    )
    store = SimpleNamespace(set=lambda key, value: steps.append(f"task_state_store {key}"))
    context = {"ti": ti, "task_state_store": store}
    plan = SimpleNamespace(record=RECORD, action="go", stage="s", slot="slot-b", generation=3)
    result = task.follow(context, Driver(steps), plan, sample_memory=False, ahead=("t", "busybox:1.36"))  # type: ignore[arg-type]
    task.finish(context, result, "uid")  # type: ignore[arg-type]
    steps.append("returned")
    return steps, at_exit


class ThreadNow:
    """threading.Thread that runs its target when started (the settle thread of a non-forked process)."""

    def __init__(self, target: Callable[[], None], **kwargs: Any) -> None:
        self.target = target

    def start(self) -> None:
        self.target()


def test_a_forked_task_process_parks_at_its_exit_after_its_records(monkeypatch) -> None:
    steps, at_exit = run_stage_end(monkeypatch, forked=True)
    assert steps == ["xcom chain_state succeeded", "task_state_store delivered_generation", "returned"]
    for handler in at_exit:  # the task process exits, its success reported
        handler()
    assert steps[3:] == ["park started slot-b 3 ahead=('t', 'busybox:1.36')", "park settled"]


def test_elsewhere_the_park_starts_as_soon_as_the_result_is_read(monkeypatch) -> None:
    steps, at_exit = run_stage_end(monkeypatch, forked=False)
    assert at_exit == []
    assert steps == [
        "park started slot-b 3 ahead=('t', 'busybox:1.36')",
        "xcom chain_state succeeded",
        "park settled",
        "task_state_store delivered_generation",
        "returned",
    ]


def test_a_follow_that_raises_after_the_end_still_parks_before_it_raises(monkeypatch) -> None:
    steps: list[str] = []
    monkeypatch.setattr(stage_result, "_forked_task_process", lambda: True)
    task = KruiseChainOperator(
        task_id="s", chain_name="c", stage_name="s", namespace="data", image="busybox:1.36", cmds=["true"]
    )

    def push(key: str, value: Any) -> None:
        raise RuntimeError("the API server is gone")

    context = {"ti": SimpleNamespace(try_number=1, xcom_push=push)}
    plan = SimpleNamespace(record=RECORD, action="go", stage="s", slot="slot-b", generation=3)
    with pytest.raises(RuntimeError, match="gone"):
        task.follow(context, Driver(steps), plan, sample_memory=False)  # type: ignore[arg-type]
    assert steps == ["park started slot-b 3 ahead=None", "park settled"]
