"""`StageTrigger`: waits in the triggerer, by watching the chain pod, until a stage reaches a state."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TaskSuccessEvent, TriggerEvent

from airflow_kruise_chain.connection import KubeConnection
from airflow_kruise_chain.core.podview import lost_reason
from airflow_kruise_chain.core.status import (
    StageState,
    StageStatus,
    confirm_from_log,
    current_status,
    needs_log,
)
from airflow_kruise_chain.core.watch import awatch_versions

if TYPE_CHECKING:
    from airflow_kruise_chain.core.podview import ChainPod
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook

TARGETS = {
    "running": (StageState.RUNNING, StageState.FINISHED, StageState.SUPERSEDED),
    "finished": (StageState.FINISHED, StageState.SUPERSEDED),
}
FAILED = (StageState.FAILED_TO_START, StageState.POD_LOST)
LOG_TAIL = 50
"""log lines read to confirm a Ready slot's result (the runner prints nothing after it)"""


def reached(state: StageState, target: str) -> bool:
    """Whether `state` satisfies the wait target ("running" or "finished")."""
    return state in TARGETS[target]


class StageTrigger(BaseTrigger):
    """Fires when `stage` in the chain pod reaches `target` ("running" or "finished"), or cannot.

    Events: `{"status": target}` on success; `{"status": "failed"|"timeout", "message": ...}` otherwise.
    With `generation` (a deferred stage task's own generation), it also logs that generation's output as it
    comes (after the first `logged` lines, which the task logged before deferring) and the event carries how
    far it logged (`logged`), the last lines (`tail`) and the runner's result line (`result`), see
    `StageOutputFollower`, which also parks the stage's slot at its end and, when the stage succeeded, sizes
    the slot of `ahead` (the (name, image) of the stage predicted to run next) and prepares its own slot for
    `then` (the stage predicted after that one: `prepare_two_ahead`). With `end` (a `triggers.end.TaskEnd`
    as a dict) and the generation's `slot`, a stage that succeeded ends its task from the triggerer
    (`triggers.end.end_from_trigger`: a `TaskSuccessEvent`, no second task start, no hold); any other event
    fires no sooner than `fire_after` (a Unix time; see `airflow_kruise_chain.config.defer_exit_hold`).
    """

    def __init__(
        self,
        *,
        pod_name: str,
        namespace: str,
        stage: str,
        target: str = "finished",
        timeout: float = 3600,
        connection: KubeConnection | Mapping[str, Any] | None = None,
        generation: int = 0,
        logged: int = 0,
        fire_after: float = 0.0,
        ahead: Sequence[str] | None = None,
        then: Sequence[str] | None = None,
        slot: str = "",
        end: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if target not in TARGETS:
            raise ValueError(f"target: must be one of {sorted(TARGETS)}, not {target!r}")
        self.pod_name = pod_name
        self.namespace = namespace
        self.stage = stage
        self.target = target
        self.timeout = timeout
        if not isinstance(connection, KubeConnection):  # as `serialize` gave it
            connection = KubeConnection.from_dict(connection or {})
        self.connection = connection
        self.generation = generation
        self.logged = logged
        self.fire_after = fire_after
        self.ahead = (str(ahead[0]), str(ahead[1])) if ahead else None
        self.then = (str(then[0]), str(then[1])) if then else None
        self.slot = slot
        self.end = dict(end) if end else None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "airflow_kruise_chain.triggers.chain.StageTrigger",
            {
                "pod_name": self.pod_name,
                "namespace": self.namespace,
                "stage": self.stage,
                "target": self.target,
                "timeout": self.timeout,
                "connection": self.connection.to_dict(),
                "generation": self.generation,
                "logged": self.logged,
                "fire_after": self.fire_after,
                "ahead": list(self.ahead) if self.ahead else None,
                "then": list(self.then) if self.then else None,
                "slot": self.slot,
                "end": self.end,
            },
        )

    def hook(self) -> AsyncKruiseHook:
        return self.connection.async_hook()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # The event is made, and the client with its watches and streams closed, before it is yielded: nothing
        # is held open across the yield. A triggerer that drops or cancels the trigger after its event (which
        # leaves the generator suspended there) has nothing left to close; a generator suspended inside the
        # client's `async with` was closed only by the loop's async generator hooks, at garbage collection
        # or loop shutdown, concurrently with the generators inside it ("aclose(): asynchronous generator is
        # already running"), its connections open until then.
        event = await self._event()
        if event is None:
            return
        if not isinstance(event, TaskSuccessEvent) and (hold := self.fire_after - time.time()) > 0:
            await asyncio.sleep(hold)
        yield event

    async def _event(self) -> TriggerEvent | None:
        """The trigger's one event, over one client (closed before this returns, as `_run` is)."""
        async with self.hook().one_client() as hook, contextlib.aclosing(self._run(hook)) as events:
            return await anext(events, None)

    async def _run(self, hook: AsyncKruiseHook) -> AsyncIterator[TriggerEvent]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        if self.generation and self.target == "finished":
            from airflow_kruise_chain.triggers.end import TaskEnd, end_from_trigger, open_xcom_channel
            from airflow_kruise_chain.triggers.output import StageOutputFollower

            follower = StageOutputFollower(
                hook,
                pod_name=self.pod_name,
                namespace=self.namespace,
                stage=self.stage,
                generation=self.generation,
                skip=self.logged,
                deadline=deadline,
                emit=self.emit,
                ahead=self.ahead,
                then=self.then,
            )
            task_end = TaskEnd.from_dict(self.end) if self.slot and self.task_instance is not None else None
            # while the stage runs, not after its end
            opening = asyncio.create_task(open_xcom_channel(self.task_instance)) if task_end else None
            try:
                payload = await follower.run()
            except BaseException:
                if opening is not None:
                    opening.cancel()
                raise
            if opening is not None:
                await opening
            if payload["status"] == "timeout":
                payload["message"] = f"stage {self.stage!r} did not reach finished within {self.timeout:.0f}s"
            ended = await end_from_trigger(
                hook,
                payload,
                task_end,
                self.task_instance,
                pod_name=self.pod_name,
                namespace=self.namespace,
                stage=self.stage,
                slot=self.slot,
                generation=self.generation,
                emit=self.emit,
            )
            yield ended or TriggerEvent(payload)
            return
        # read first: a watch of a pod that is already gone would wait out its window without an event
        pod = await hook.read_pod(self.pod_name, self.namespace)
        event, pending = await self.check(hook, pod)
        if event is not None:
            yield event
            return
        assert pod is not None
        awaiting = [pending]  # whether a result line is awaited in the log (read by the window, late)

        def watch(seconds: int, version: str | None) -> AsyncIterator[ChainPod | None]:
            return hook.watch_pod(self.pod_name, self.namespace, seconds, resource_version=version)

        seen_pods = awatch_versions(
            watch,
            deadline,
            version=pod.resource_version,
            relist=lambda: hook.read_pod(self.pod_name, self.namespace),
            # a result line changes nothing in the pod: while one is awaited, look at the log again soon
            window=lambda: 2 if awaiting[0] else 60,
        )
        async with contextlib.aclosing(seen_pods):  # the watch closed once the event is found
            async for seen in seen_pods:
                event, awaiting[0] = await self.check(hook, seen)
                if event is not None:
                    break
        if event is not None:
            yield event
            return
        yield TriggerEvent(
            {
                "status": "timeout",
                "message": f"stage {self.stage!r} did not reach {self.target} within {self.timeout:.0f}s",
            }
        )

    async def check(self, hook: AsyncKruiseHook, view: ChainPod | None) -> tuple[TriggerEvent | None, bool]:
        """The event for the pod `view` (None: keep waiting), and whether a result line is awaited in the
        log."""
        status = current_status(view, self.stage)
        if needs_log(status) and status.slot:
            text = await hook.read_log(self.pod_name, self.namespace, status.slot, tail_lines=LOG_TAIL)
            status = confirm_from_log(view, status, text.splitlines())
            if status.state is StageState.FINISHED:
                # the result may be the stage stopped with the pod (deleted meanwhile): look once more
                now = await hook.read_pod(self.pod_name, self.namespace)
                if lost_reason(now) is not None:
                    return self.event_for(now), False
            return self.event_for(view, status), status.state is StageState.RUNNING
        return self.event_for(view, status), False

    async def emit(self, lines: list[str]) -> None:
        """Log the stage's output lines into the task's log; in a thread, as cncf.kubernetes' pod trigger
        does, so that writing them (which waits while the triggerer's log pipe is full) never stalls the
        triggerer's event loop. The thread keeps the trigger's logging context."""
        await asyncio.to_thread(self._log_lines, lines)

    def _log_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.log.info("%s", line)

    def event_for(self, pod: ChainPod | None, status: StageStatus | None = None) -> TriggerEvent | None:
        """The event to fire for the pod as it is now (`status`: already read), or None to keep waiting."""
        status = status or current_status(pod, self.stage)
        if reached(status.state, self.target):
            return TriggerEvent(
                {
                    "status": self.target,
                    "state": str(status.state),
                    "generation": status.generation,
                    "slot": status.slot,
                }
            )
        if status.state in FAILED:
            return TriggerEvent(
                {
                    "status": "failed",
                    "state": str(status.state),
                    "message": f"stage {self.stage!r} {status.state}: {status.reason} "
                    f"{status.message}".strip(),
                }
            )
        return None
