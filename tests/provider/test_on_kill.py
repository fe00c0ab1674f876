"""`on_kill` under the task supervisor: it stops the stage and returns before the supervisor's SIGKILL."""

from __future__ import annotations

import inspect
from datetime import UTC, datetime
from typing import Any

import structlog

from airflow_kruise_chain.core.podsession import PodSession
from airflow_kruise_chain.core.status import StageResult
from airflow_kruise_chain.operators.chain import ON_KILL_WAIT, KruiseChainOperator


class RecordingDriver:
    def __init__(self) -> None:
        self.stops: list[tuple[str, Any]] = []

    def stop(self, stage: str, timeout: float | None = None) -> None:
        self.stops.append((stage, timeout))


class GoneDriver:
    def stop(self, stage: str, timeout: float | None = None) -> None:
        raise RuntimeError('get pods/log "c-0" in namespace \'default\' failed (404): pods "c-0" not found')


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


def test_on_kill_logs_rather_than_raises_when_the_pod_goes_while_it_follows_the_stop() -> None:
    """on_kill runs in Airflow's SIGTERM handler: an error there would surface in whatever the task was doing
    (seen under the real scheduler: the teardown deleted the pod while on_kill read the stage's log)."""
    op = KruiseChainOperator(
        task_id="c.work",
        chain_name="c",
        namespace="default",
        stage_name="work",
        image="busybox:1.36",
        cmds=["true"],
    )
    op._running = (GoneDriver(), "work")  # type: ignore[assignment]
    with structlog.testing.capture_logs() as logs:
        op.on_kill()
    (said,) = [entry["event"] for entry in logs if "could not follow" in entry["event"]]
    assert "stop of stage 'work'" in said and "(404)" in said


def test_the_end_of_a_stopped_stage_is_logged_once() -> None:
    """on_kill's stop logs the end it read; the follow loop it interrupted then reads the same end."""
    lines: list[str] = []
    session = PodSession(None, "c-0", "default", log=lines.append)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    stopped = StageResult("work", 1, "slot-a", "busybox:1.36", 143, "stopped", now, now, 0.5)
    session.log_end(stopped)
    session.log_end(stopped)
    session.log_end(StageResult("work", 2, "slot-b", "busybox:1.36", 0, "completed", now, now, 0.1))
    assert [line.split(" exit=")[0] for line in lines] == [
        "::kruise-chain:: end stage=work generation=1",
        "::kruise-chain:: end stage=work generation=2",
    ]
