"""`StageDriver.swap(on_go=...)`: a go's fast go is opened before its patch (`fastgo.open_go`) and told
whether that patch succeeded, however it ended; only a go has one. Before, the exec was started only once
the patch had returned, so its set-up came after the patch on the path to the stage's start (issue 40)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.swap import SwapPlan
from tests.unit.test_core_prepare import Api
from tests.unit.test_core_swap import EXTRACT, LOAD, TRANSFORM, FakePod, recorded


def extract_ran(conflicts: int = 0) -> Api:
    """extract ran in slot-a, its result in the log; slot-b holds transform's image (a go)."""
    pod = FakePod()
    pod.run(EXTRACT)
    api = Api(pod, conflicts=conflicts)
    api.log = (
        f"::kruise-chain:: result gen=1 token={recorded(pod)['extract']['token']} stage=extract slot=slot-a "
        "exit=0 reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z outputs=- "
        "outputs_status=absent"
    )
    return api


def recorder(api: Api, events: list[tuple[Any, ...]]) -> Callable[[SwapPlan], Callable[[bool], None]]:
    def on_go(plan: SwapPlan) -> Callable[[bool], None]:
        events.append(("opened", plan.action, plan.generation, api.calls.count("patch")))
        return lambda patched: events.append(("decided", patched, api.calls.count("patch")))

    return on_go


def test_a_go_is_opened_before_its_patch_and_told_the_patch_succeeded() -> None:
    api, events = extract_ran(), []
    plan = StageDriver(api, "etl-abc", "data").swap(
        TRANSFORM, 1, Timeouts(swap=5), on_go=recorder(api, events)
    )
    assert plan.action == "go"
    assert events == [("opened", "go", 2, 0), ("decided", True, 1)]  # opened with no patch made yet


def test_a_go_whose_patch_conflicts_is_told_so_and_the_replanned_go_opened_again() -> None:
    api, events = extract_ran(conflicts=1), []
    plan = StageDriver(api, "etl-abc", "data").swap(
        TRANSFORM, 1, Timeouts(swap=5), on_go=recorder(api, events)
    )
    assert plan.action == "go"
    assert events == [
        ("opened", "go", 2, 0),
        ("decided", False, 1),  # the 409: nothing may be delivered
        ("opened", "go", 2, 1),
        ("decided", True, 2),
    ]


def test_a_swap_that_restarts_its_slot_opens_no_go() -> None:
    api, events = extract_ran(), []
    plan = StageDriver(api, "etl-abc", "data").swap(LOAD, 1, Timeouts(swap=5), on_go=recorder(api, events))
    assert plan.action == "patch" and events == []
