"""`on_kill` under the task supervisor: it stops the stage and returns before the supervisor's SIGKILL."""

from __future__ import annotations

import inspect
from typing import Any

from airflow_kruise_chain.operators.chain import ON_KILL_WAIT, KruiseChainOperator


class RecordingDriver:
    def __init__(self) -> None:
        self.stops: list[tuple[str, Any]] = []

    def stop(self, stage: str, timeout: float | None = None) -> None:
        self.stops.append((stage, timeout))


def test_on_kill_waits_for_the_stage_end_less_than_the_supervisor_waits_before_its_sigkill() -> None:
    from airflow.sdk.execution_time.supervisor import WatchedSubprocess

    escalation = inspect.signature(WatchedSubprocess.kill).parameters["escalation_delay"].default
    op = KruiseChainOperator(
        task_id="c.work",
        chain_name="c",
        namespace="default",
        stage_name="work",
        image="busybox:1.36",
        cmds=["true"],
    )
    driver = RecordingDriver()
    op.on_kill()  # nothing running yet: nothing to stop
    op._running = (driver, "work")  # type: ignore[assignment]
    op.on_kill()
    assert driver.stops == [("work", ON_KILL_WAIT)]
    assert 0 < ON_KILL_WAIT < escalation
