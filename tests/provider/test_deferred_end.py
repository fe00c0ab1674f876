"""A deferred stage that succeeds ends its task from the triggerer (issue 40, triggers/end.py): a
`TaskSuccessEvent` at once (no hold for apache/airflow#72716, no second task start), with the XComs the
resumed task would push, the end lines in the task log, the slot parked and the generation marked delivered
in the pod, so that clearing the task runs the stage again. Anything else still resumes the task.

The tasks and the trigger are called directly against the local cluster, as in test_deferred_output.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from airflow.sdk import Asset
from airflow.sdk.exceptions import TaskDeferred
from airflow.triggers.base import TaskSuccessEvent, TriggerEvent
from kruise_local import LocalCluster

from airflow_kruise_chain.core.chainstate import XCOM_KEY
from airflow_kruise_chain.operators.chain import (
    KruiseChainOperator,
)
from airflow_kruise_chain.triggers.chain import StageTrigger
from tests.provider.support import ShellChain, make_context

CHAIN = "e"
NS = "default"
STAGES = {
    "work": 'echo work-1; sleep 1; echo "$(date +%s%N)" >> "$CHAIN_SCRATCH/runs"; echo work-2',
    "fails": "echo a; sleep 1; exit 3",
    "again": "echo again; sleep 1",
}


class Run(ShellChain):
    """A chain pod of this module's stages for one (fake) DAG run; stages deferred at once by default."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(CHAIN, "deferred_end", STAGES)
        self.cluster = cluster

    def stage(self, name: str, **kwargs: Any) -> KruiseChainOperator:
        return super().stage(name, **{"defer_after": 0, **kwargs})

    def runs(self) -> int:
        """How many times a `work` stage ran: the lines it appended to the chain's scratch volume."""
        teardown = self.teardown()
        uid = teardown.hook.read_pod(teardown.pod_name(self.context()), NS).uid
        scratch = Path(self.cluster.root) / "pods" / uid / "volumes" / "scratch" / "runs"
        return len(scratch.read_text().splitlines()) if scratch.exists() else 0


@pytest.fixture
def run(kube_env: LocalCluster) -> Iterator[Run]:
    chain = Run(kube_env)
    chain.set_up()
    yield chain
    chain.teardown().execute(chain.context())


TI = SimpleNamespace(dag_id="deferred_end", task_id="work", run_id="r", map_index=-1)
"""the task instance a triggerer gives the trigger it runs (`BaseTrigger.task_instance`)"""


@pytest.fixture(autouse=True)
def pushed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The XComs the trigger pushes (through the Task SDK's backend in a triggerer), by key."""
    from airflow_kruise_chain.triggers import end

    pushes: dict[str, Any] = {}

    async def push(ti: Any, xcoms: dict[str, Any]) -> None:
        assert ti is TI and CALLS[-1:] == ["open"]  # the channel opened while the stage ran
        CALLS.append("push")
        pushes.update(xcoms)

    async def open_channel(ti: Any) -> None:
        assert ti is TI
        CALLS.append("open")

    CALLS.clear()
    monkeypatch.setattr(end, "push_xcoms", push)
    monkeypatch.setattr(end, "open_xcom_channel", open_channel)
    return pushes


CALLS: list[str] = []
"""the trigger's calls of the Task SDK's XCom channel, in order (`pushed`)"""


def first_event(trigger: StageTrigger, ti: Any = TI) -> TriggerEvent:
    """The trigger's first event, run as the triggerer does (after a serialize round trip, with the task
    instance the triggerer sets; None: outside a triggerer, as dag.test() runs it)."""
    _, kwargs = trigger.serialize()
    revived = StageTrigger(**kwargs)
    revived.task_instance = ti

    async def first() -> TriggerEvent:
        return await anext(revived.run())

    return asyncio.run(first())


def defer(op: KruiseChainOperator, context: dict[str, Any]) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    return deferred.value


def test_a_deferred_success_ends_the_task_from_the_trigger_at_once_with_its_xcoms(run, monkeypatch, pushed):
    # a long hold: a success does not wait for it (the task instance goes from deferred to success, so the
    # executor's late report of the deferral's exit cannot find it queued)
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "60")
    op, context = run.stage("work"), run.context()
    deferred = defer(op, context)
    assert deferred.trigger.fire_after > time.time() + 60
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        event = first_event(deferred.trigger)
    assert time.monotonic() - started < 30
    assert isinstance(event, TaskSuccessEvent), event
    lines = [entry["event"] for entry in logs]
    assert "work-2" in lines  # the stage's lines, live, as before
    assert any(line.startswith("::kruise-chain:: end stage=work generation=1 exit=0") for line in lines)
    assert any(
        line.startswith("::kruise-chain:: stage work generation 1 in ") and "exited 0 after" in line
        for line in lines
    )
    assert not event.xcoms  # pushed through the SDK's backend, not in the event (see triggers/end.py)
    assert CALLS == ["open", "push"]  # opened as the trigger started, pushed at the stage's end
    assert set(pushed) == {"return_value", XCOM_KEY}
    result = pushed["return_value"]
    assert result["exit_code"] == 0 and result["log_tail"] == ["work-1", "work-2"]
    assert result["slot"] == deferred.kwargs["slot"] and result["generation"] == deferred.kwargs["generation"]
    state = pushed[XCOM_KEY]
    assert (state["state"], state["stage"], state["try_number"], state["chain"]) == (
        "succeeded",
        "work",
        1,
        CHAIN,
    )
    # the generation is marked delivered in the pod; the slot parked (the trigger's lines say so)
    teardown = run.teardown()
    pod = teardown.hook.read_pod(teardown.pod_name(context), NS)
    assert pod.record("work").delivered


def test_without_its_return_value_pushed_the_trigger_pushes_the_chain_state_alone(run, pushed):
    op = run.stage("work", do_xcom_push=False)
    event = first_event(defer(op, run.context()).trigger)
    assert isinstance(event, TaskSuccessEvent) and set(pushed) == {XCOM_KEY}


def test_outside_a_triggerer_or_when_its_xcoms_cannot_be_pushed_the_task_resumes(run, monkeypatch):
    from airflow_kruise_chain.triggers import end

    op, context = run.stage("work"), run.context()
    deferred = defer(op, context)
    deferred.trigger.fire_after = 0.0  # the hold is not what this test is about
    event = first_event(deferred.trigger, ti=None)  # dag.test() runs a trigger with no task instance
    assert not isinstance(event, TaskSuccessEvent) and event.payload["status"] == "finished"
    result = op.execute_complete(context, event.payload, **deferred.kwargs)
    assert result["exit_code"] == 0 and result["log_tail"] == ["work-1", "work-2"]

    async def refused(ti: Any, xcoms: dict[str, Any]) -> None:
        raise RuntimeError("the API server refused")

    monkeypatch.setattr(end, "push_xcoms", refused)
    deferred = defer(run.stage("again"), run.context())
    deferred.trigger.fire_after = 0.0
    with structlog.testing.capture_logs() as logs:
        event = first_event(deferred.trigger)
    assert not isinstance(event, TaskSuccessEvent) and event.payload["status"] == "finished"
    assert any("could not push the stage's XComs from the triggerer" in e["event"] for e in logs)


def test_a_failed_stage_still_resumes_the_task_after_the_hold(run, monkeypatch):
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "1")
    op, context = run.stage("fails"), run.context()
    deferred = defer(op, context)
    event = first_event(deferred.trigger)
    assert not isinstance(event, TaskSuccessEvent) and time.time() >= deferred.trigger.fire_after
    assert event.payload["status"] == "finished" and " exit=3 " in event.payload["result"]
    teardown = run.teardown()
    assert not teardown.hook.read_pod(teardown.pod_name(context), NS).record("fails").delivered


def test_a_task_with_outlets_resumes_on_a_worker_which_emits_their_asset_events(run):
    op = run.stage("work", outlets=[Asset("s3://bucket/work")])
    deferred = defer(op, run.context())
    assert deferred.trigger.end is None
    deferred.trigger.fire_after = 0.0  # the hold is not what this test is about
    event = first_event(deferred.trigger)
    assert not isinstance(event, TaskSuccessEvent) and event.payload["status"] == "finished"


def test_clearing_a_stage_its_trigger_ended_runs_it_again_and_a_retry_adopts_it(run):
    """What task_state_store says for a task that returned, the pod's record says for one its trigger ended:
    a later try of a delivered generation is a clear (run again); of one not delivered, a retry (adopt)."""
    op, context = run.stage("work"), run.context()
    assert isinstance(first_event(defer(op, context).trigger), TaskSuccessEvent)
    assert run.runs() == 1
    cleared, context2 = run.stage("work", deferrable=False), run.context(try_number=2)
    with structlog.testing.capture_logs() as logs:
        result = cleared.execute(context2)
    assert result["exit_code"] == 0 and result["generation"] == 2  # a new generation
    assert any("already succeeded for an earlier try" in entry["event"] for entry in logs)
    assert run.runs() == 2  # ran again, once
    # a try that finds a success nobody delivered adopts it (its worker died before it returned; here no
    # task_state_store records try 2's return): not run a third time
    result = run.stage("work", deferrable=False).execute(run.context(try_number=3))
    assert result["exit_code"] == 0 and result["generation"] == 2 and run.runs() == 2


def test_a_task_resumed_with_an_end_events_payload_reads_the_result_from_the_pod(run):
    """A `TaskSuccessEvent`'s payload is its state: a runner that resumed a task with it (dag.test() would, if
    it ran a trigger with a task instance) gets the result read from the pod, with no line logged twice."""
    op, context = run.stage("work"), run.context()
    deferred = defer(op, context)
    assert isinstance(first_event(deferred.trigger), TaskSuccessEvent)
    with structlog.testing.capture_logs() as logs:
        result = op.execute_complete(context, "success")
    assert result["exit_code"] == 0 and result["log_tail"] == ["work-1", "work-2"]
    assert not any(e["event"] in ("work-1", "work-2") for e in logs)  # the trigger logged them
    assert run.runs() == 1


def test_a_taskflow_stage_reports_its_result_its_own_way_so_it_resumes_on_a_worker() -> None:
    """A TaskFlow stage's task returns its function's value and checks it (`TaskFlowStageOperator.finish`):
    its trigger is given no end, so the task resumes; a plain stage's is."""
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("tf_end", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", deferrable=True) as chain:

            @chain.task(image="python:3.11-slim")
            def load() -> int:
                return 1

            load() >> chain.stage("plain", image="busybox:1.36", cmds=["true"])
    context = make_context("tf_end", "r")
    assert dag.task_dict["c.load"].trigger_end(context) is None
    assert dag.task_dict["c.plain"].trigger_end(context) == {
        "chain": "c",
        "try_number": 1,
        "push_return": True,
    }
