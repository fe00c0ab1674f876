"""A stage task that fails (its stage cannot start: the prepared slot's image does not pull) stops its fast
go's tries (`fastgo.PendingGo._until_taken`) before it waits for them: before, a go into a prepared slot went
on trying the exec for `EXEC_TIMEOUT` (10 s) after the task's failure was known, holding the task's end that
long, and a container that started meanwhile could take the go of a generation whose run spec the follow
had retired (`swap.retire_unstarted`). A deferral keeps the tries (the stage goes on)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_kruise_chain.core.errors import StageStartError
from airflow_kruise_chain.core.fastgo import REFUSED
from airflow_kruise_chain.core.status import StageState, StageStatus
from airflow_kruise_chain.core.swap import SwapPlan
from airflow_kruise_chain.operators.chain import KruiseChainOperator
from tests.unit.test_core_fastgo import plan
from tests.unit.test_core_fastgo_prepared import SPEC, Answers

NOT_RUNNING = RuntimeError('container not found ("slot-b")')


class Driver:
    """The driver calls of a go into a prepared slot: the real fast go, opened before the patch."""

    pod_name = "c-pod"

    def swap(self, *args: Any, on_go: Any = None, **kwargs: Any) -> SwapPlan:
        go = plan(spec=SPEC)
        on_go(go)(True)
        return go


def task_failing_to_start(monkeypatch: pytest.MonkeyPatch, api: Answers) -> KruiseChainOperator:
    names = {"task_id": "s", "chain_name": "c", "stage_name": "s", "namespace": "data"}
    task = KruiseChainOperator(**names, image="busybox:1.36", cmds=["true"], prepare_next=False)
    task.__dict__["hook"] = api  # the cached hook: the fast go's execs
    monkeypatch.setattr(task, "index_stage", lambda context: None)
    monkeypatch.setattr(task, "driver", lambda context: Driver())
    monkeypatch.setattr(task, "prepare_try", lambda context, driver: SimpleNamespace(uid="u"))
    monkeypatch.setattr(task, "pod_url", lambda context: None)

    def follow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)  # the follow sees the prepared image's pull fail
        status = StageStatus(StageState.FAILED_TO_START, "slot-b", 7, "s", "", "ErrImagePull", "not found")
        raise StageStartError(status, "busybox:nope")

    monkeypatch.setattr(task, "follow", follow)
    return task


def test_a_task_whose_stage_cannot_start_stops_its_fast_go_tries(monkeypatch) -> None:
    # the old container refused the go, then no container of the slot runs (the new one cannot pull)
    api = Answers((REFUSED, "refused"), [NOT_RUNNING])
    task = task_failing_to_start(monkeypatch, api)
    with pytest.raises(StageStartError):
        task.execute({"ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]
    tries = len(api.calls)
    time.sleep(0.5)  # none after the task's end either
    assert len(api.calls) == tries < 8  # the open, then a few tries in 0.2 s (not 10 s of them)


@pytest.mark.parametrize("raised", [TaskDeferred(trigger=None, method_name="execute_complete"), None])
def test_a_deferral_or_a_success_keeps_the_tries(monkeypatch, raised: BaseException | None) -> None:
    told: list[bool] = []
    names = {"task_id": "s", "chain_name": "c", "stage_name": "s", "namespace": "data"}
    task = KruiseChainOperator(**names, image="busybox:1.36", cmds=["true"], prepare_next=False)
    monkeypatch.setattr(task, "index_stage", lambda context: None)
    monkeypatch.setattr(task, "driver", lambda context: Driver())

    def run_stage(context: Any, stage: Any, driver: Any, settle: list[Any]) -> dict[str, Any]:
        settle.append(told.append)
        if raised is not None:
            raise raised
        return {}

    monkeypatch.setattr(task, "run_stage", run_stage)
    if raised is None:
        task.execute({"ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]
    else:
        with pytest.raises(TaskDeferred):
            task.execute({"ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]
    assert told == [False]
