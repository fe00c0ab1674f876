"""A stage task waits for its fast go's exec (`core/fastgo.py` `open_go`) however it ends: before, only a
stage that ended with a result waited; a follow that raised (a stage timeout, a lost pod) left the exec's
thread running past the task."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from airflow_kruise_chain.core.errors import StageTimeoutError
from airflow_kruise_chain.core.swap import SwapPlan
from airflow_kruise_chain.operators.chain import KruiseChainOperator


class Driver:
    """The driver calls of a go whose follow raises."""

    pod_name = "c-pod"

    def swap(self, *args: Any, on_go: Any = None, **kwargs: Any) -> SwapPlan:
        plan = SwapPlan("go", "s", "slot-b", 3, None, "c-pod", "data", {}, {})  # type: ignore[arg-type]
        on_go(plan)(True)  # opened before the patch, told it succeeded
        return plan


@pytest.mark.parametrize("deferrable", [False, True])
def test_a_task_whose_follow_raises_still_waits_for_its_fast_go(monkeypatch, deferrable: bool) -> None:
    waited: list[str] = []
    started: list[SwapPlan] = []

    def open_go(api: Any, plan: SwapPlan, log: Any, wait: Any = None) -> Any:
        started.append(plan)
        return SimpleNamespace(decide=lambda patched: None, settle=lambda failed: waited.append(plan.stage))

    monkeypatch.setattr("airflow_kruise_chain.core.fastgo.open_go", open_go)
    names = {"task_id": "s", "chain_name": "c", "stage_name": "s", "namespace": "data"}
    stage = {"image": "busybox:1.36", "cmds": ["true"]}
    task = KruiseChainOperator(**names, **stage, deferrable=deferrable, prepare_next=False)
    task.__dict__["hook"] = object()  # the cached hook: the fake open_go never uses it
    monkeypatch.setattr(task, "index_stage", lambda context: None)
    monkeypatch.setattr(task, "driver", lambda context: Driver())
    monkeypatch.setattr(task, "prepare_try", lambda context, driver: SimpleNamespace(uid="u"))
    monkeypatch.setattr(task, "pod_url", lambda context: None)

    def follow(*args: Any, **kwargs: Any) -> Any:
        assert waited == []  # the exec goes on while the task follows the stage
        raise StageTimeoutError("stage 's' ran out of its execution time")

    monkeypatch.setattr(task, "follow", follow)
    with pytest.raises(StageTimeoutError):
        task.execute({"ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]
    assert len(started) == 1 and waited == ["s"]
