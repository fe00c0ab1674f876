"""A deferred stage's success ended from the triggerer: no second task start, and no hold.

A deferred task that resumes on a worker pays Airflow's task start a second time (under CeleryExecutor a
worker's pick-up again), and its trigger must hold its event until the executor's late report of the
deferral's exit has reached the scheduler (apache/airflow#72716, `config.defer_exit_hold`). A stage that
succeeded needs neither: its trigger has read the result, logged the stage's output and parked the slot, so
it ends the task itself with a `TaskSuccessEvent` (Airflow's end-from-trigger, as the standard provider's
`DateTimeTrigger(end_from_trigger=True)` does), after pushing the XComs the resumed task would have pushed
(`return_value` and `chain_state`) through the Task SDK's XCom backend, as a trigger may since Airflow 3.1
(apache/airflow#53514): the event's own `xcoms` are stored JSON-encoded once more by the triggerer
(`XComModel.set` serializes what the SDK reads back as a string in 3.3), so a downstream task would read a
string. The triggerer sets the task instance to success; the executor's late report then finds it finished,
not queued, so there is no race to hold for. Anything else (a failure, a timeout, a result that does not
check, a park that did not happen, a trigger run outside a triggerer, e.g. by `dag.test()`) resumes the
task on a worker as before.

Clearing a stage task that succeeded must run its stage again: the task marks its delivered generation in
`task_state_store`, which a trigger cannot reach, so the trigger marks the generation's record in the pod
as delivered (`podview.StageRecord.delivered`) before it ends the task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import TaskSuccessEvent

from airflow_kruise_chain.core.chainstate import XCOM_KEY as XCOM_CHAIN_STATE
from airflow_kruise_chain.core.chainstate import StageMonitor, StageTrack
from airflow_kruise_chain.core.conflicts import arun
from airflow_kruise_chain.core.podidentity import mark_delivered
from airflow_kruise_chain.triggers.event import MalformedEvent, StageEnd, stage_end

if TYPE_CHECKING:
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook


@dataclass(frozen=True)
class TaskEnd:
    """What a deferred stage task gives its trigger so that the trigger can end it on success: the chain's
    id and the task's try (its `chain_state` XCom), and whether the task pushes its return value."""

    chain: str
    try_number: int
    push_return: bool

    def to_dict(self) -> dict[str, Any]:
        return {"chain": self.chain, "try_number": self.try_number, "push_return": self.push_return}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TaskEnd | None:
        """The end a trigger was given (as `to_dict` wrote it); None: none, or not one (the task resumes)."""
        if not isinstance(data, Mapping):
            return None
        chain, try_number, push = data.get("chain"), data.get("try_number"), data.get("push_return")
        if not isinstance(chain, str) or not isinstance(try_number, int) or not isinstance(push, bool):
            return None
        return cls(chain, try_number, push)


def success_xcoms(
    end: StageEnd, task: TaskEnd, *, namespace: str, pod: str, log: Callable[[str], None]
) -> dict[str, Any]:
    """The XComs the resumed task would push for the stage's success (`KruiseChainOperator.report_end`,
    then `finish`), logging the same end line."""
    record = end.record
    published: dict[str, Any] = {}
    monitor = StageMonitor(
        StageTrack(
            chain=task.chain,
            namespace=namespace,
            pod=pod,
            stage=end.result.stage,
            slot=record.slot,
            generation=record.generation,
            image=record.image,
            try_number=task.try_number,
            action=record.action,
            swapped_at=record.swapped_at,
        ),
        publish=published.update,
        read_metrics=lambda: None,
        log=log,
        interval=0,
    )
    log(end.result.end_line())
    monitor.ended(end.result)
    xcoms: dict[str, Any] = {XCOM_CHAIN_STATE: dict(published)}
    if task.push_return:
        xcoms["return_value"] = end.result.to_xcom()
    return xcoms


async def end_from_trigger(
    hook: AsyncKruiseHook,
    payload: Mapping[str, Any],
    task: TaskEnd | None,
    ti: Any,
    *,
    pod_name: str,
    namespace: str,
    stage: str,
    slot: str,
    generation: int,
    emit: Callable[[list[str]], Awaitable[None]],
) -> TaskSuccessEvent | None:
    """The event that ends the deferred task with the stage's success, or None to resume it on a worker:
    the trigger was given the task's end (`task`) and runs in a triggerer (`ti`: its task instance, which the
    triggerer sets), the follower's `payload` holds a completed exit-0 result of this very generation
    (`stage_end`) and the slot was parked, the generation's record is marked delivered and the XComs are
    pushed. The end line and the exit line go to the task log (`emit`), as the resumed task would log
    them."""
    if task is None or ti is None or payload.get("status") != "finished":
        return None
    try:
        end = stage_end(payload, stage=stage, slot=slot, generation=generation)
    except MalformedEvent:
        return None
    if end is None or not end.parked or not end.result.succeeded:
        return None
    lines: list[str] = []
    xcoms = success_xcoms(end, task, namespace=namespace, pod=pod_name, log=lines.append)
    # at once (the pod and the triggerer's supervisor): a task resumed after either failed delivers again
    marked, pushed = await asyncio.gather(
        arun(mark_delivered(stage, generation), hook, pod_name, namespace),
        push_xcoms(ti, xcoms),
        return_exceptions=True,
    )
    if isinstance(pushed, BaseException):  # the resumed task pushes them
        await emit(
            [f"::kruise-chain:: could not push the stage's XComs from the triggerer ({pushed}): resuming"]
        )
        return None
    if marked is not True:  # an error, or the record moved on: the resumed task reads the pod
        return None
    lines.append(end.result.exit_line() + " (ended from the triggerer: no second task start)")
    await emit(lines)
    return TaskSuccessEvent()


async def open_xcom_channel(ti: Any) -> None:
    """Read the task's own `chain_state` XCom through the Task SDK once, as the trigger starts: the
    triggerer's supervisor builds its in-process Execution API on its first such request (seconds: 12 s on
    a loaded 2-core machine, during which it serves no trigger), so that happens while the stage runs, not
    between its end and the task's success (`push_xcoms`). Anything it raises is ignored: the push tries
    again."""
    from airflow.sdk.execution_time.xcom import XCom

    with contextlib.suppress(Exception):
        await XCom.aget_one(
            key=XCOM_CHAIN_STATE,
            dag_id=ti.dag_id,
            task_id=ti.task_id,
            run_id=ti.run_id,
            map_index=ti.map_index,
        )


async def push_xcoms(ti: Any, xcoms: Mapping[str, Any]) -> None:
    """Push `xcoms` as task instance `ti`'s, through the Task SDK's XCom backend (the triggerer's supervisor
    stores them as a task's own pushes are stored)."""
    from airflow.sdk.execution_time.xcom import XCom

    for key, value in xcoms.items():
        await XCom.aset(
            key, value, dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index
        )
