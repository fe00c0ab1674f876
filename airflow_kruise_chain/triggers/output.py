"""Following a deferred stage in the triggerer: its output into the task log as it comes, then its result.

The triggerer writes what a trigger logs into the task's log (a file next to the task's own, which the API
server shows while the task is deferred), so a deferred stage's output is live. What is logged is counted
(`GenerationOutput`): the event carries the count, and the resumed task logs only what comes after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from airflow_kruise_chain.core.driver import _since
from airflow_kruise_chain.core.output import GenerationOutput
from airflow_kruise_chain.core.podview import ChainPod, Pod, snapshot
from airflow_kruise_chain.core.resources import ChainSizing
from airflow_kruise_chain.core.status import StageState, current_status
from airflow_kruise_chain.core.watch import awatch_versions, resource_version

if TYPE_CHECKING:
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook

RESULT_GRACE = 5.0
"""seconds a log stream may lag behind a pod that says the stage ended before it is opened again (a
connection that died without closing delivers nothing more)"""
RECONNECT_DELAY = 0.5
"""seconds before a log stream of a container that still runs is opened again after it ended"""
MAX_REOPEN = 5
"""times the stream of one running container is opened again without the result before the trigger hands
over to the resumed task (which reads the result from the slot's history)"""
TAIL_IN_MESSAGE = 10
"""output lines a failure's message ends with"""


class StageOutputFollower:
    """Follows generation `generation` of `stage` in the chain pod: logs its output lines through `emit`
    (awaited per batch, in order; the first `skip` were logged by the worker before it deferred) and returns
    the event payload once the stage has a result, cannot have one, or `deadline` (loop time) passes."""

    def __init__(
        self,
        hook: AsyncKruiseHook,
        *,
        pod_name: str,
        namespace: str,
        stage: str,
        generation: int,
        skip: int,
        deadline: float,
        emit: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        self.hook = hook
        self.pod_name = pod_name
        self.namespace = namespace
        self.stage = stage
        self.generation = generation
        self.deadline = deadline
        self.emit = emit
        self.output = GenerationOutput(generation, "", skip=skip)
        self._changes: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=16)
        self._container = ""

    async def run(self) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        pod = snapshot(await self.hook.read_pod(self.pod_name, self.namespace))
        record = pod.record(self.stage) if pod is not None else None
        if pod is None or record is None or record.generation != self.generation:
            # gone, or swapped in again since: the resumed task reads the pod and decides
            return self.ended(pod, None)
        self.output.token = record.token
        watcher = asyncio.create_task(self._watch(pod.raw))
        follower: asyncio.Task[None] | None = None
        followed = ""  # the container whose log stream ended last without the result
        reopened = 0  # streams of that container opened again after they ended
        ended_at: float | None = None  # when the pod first said the stage ended while its stream was open
        try:
            while True:
                status = current_status(pod, self.stage)
                if status.generation not in (0, self.generation) or status.state in (
                    StageState.POD_LOST,
                    StageState.FAILED_TO_START,
                    StageState.SUPERSEDED,
                ):
                    return self.ended(pod, status)
                if loop.time() >= self.deadline:
                    return self.payload("timeout", message=f"stage {self.stage!r} did not finish in time")
                running = status.state in (StageState.RUNNING, StageState.FINISHED)
                if follower is None and running and status.container_id != followed:
                    if status.container_id != self._container:
                        reopened = 0
                    self._container = status.container_id
                    follow = self._follow(status.slot or "", status.container_id, record)
                    follower = asyncio.create_task(follow)
                    ended_at = None
                wait = self.deadline - loop.time()
                if follower is not None and status.state is StageState.FINISHED and status.confirmed:
                    ended_at = ended_at or loop.time()
                    if loop.time() - ended_at > RESULT_GRACE:  # the stream is stuck: open it again
                        await _cancel(follower)
                        if self.output.result is not None:  # the other stream's copy never came: done
                            return self.finished(pod)
                        follower, followed, ended_at = None, "", None
                        continue
                    wait = min(wait, RESULT_GRACE)
                try:
                    kind, value = await asyncio.wait_for(self._changes.get(), max(0.0, wait))
                except TimeoutError:
                    continue
                if kind == "pod":
                    if value is None:
                        return self.ended(None, None)
                    pod = ChainPod.of(value)
                elif kind == "log":
                    follower = None
                    if self.output.result is not None:
                        return self.finished(pod)
                    followed = value
                    pod = snapshot(await self.hook.read_pod(self.pod_name, self.namespace)) or pod
                    if _runs(pod, status.slot or "", followed):  # cut while the container runs
                        reopened += 1
                        if reopened > MAX_REOPEN:  # its log does not hold the result: the task reads it
                            return self.ended(pod, None)
                        await asyncio.sleep(RECONNECT_DELAY)
                        followed = ""
                elif kind == "error":
                    raise value
        finally:
            await _cancel(watcher)
            if follower is not None:
                await _cancel(follower)

    async def _watch(self, pod: Pod) -> None:
        """Pod changes into the queue (None: deleted) until cancelled; a watch window that ends is renewed."""
        try:

            def watch(seconds: int, version: str | None) -> AsyncIterator[dict[str, Any] | None]:
                return self.hook.watch_pod(self.pod_name, self.namespace, seconds, version)

            async for new in awatch_versions(
                watch,
                math.inf,
                version=resource_version(pod),
                relist=lambda: self.hook.read_pod(self.pod_name, self.namespace),  # after a 410, or a window
            ):
                await self._changes.put(("pod", new))
                if new is None:
                    return
        except Exception as e:  # handed to the loop, which raises it
            await self._changes.put(("error", e))

    async def _follow(self, slot: str, container_id: str, record: Any) -> None:
        """Log the stream of `slot`'s log until it ends or the result comes; then say so in the queue."""
        since = _since(record.swapped_at) if record.action == "go" else None
        self.output.reopen()
        try:
            stream = self.hook.follow_log(self.pod_name, self.namespace, slot, since_seconds=since)
            async with contextlib.aclosing(stream) as batches:
                async for batch in batches:
                    fresh: list[str] = []
                    for line in batch:
                        fresh.extend(self.output.feed(line)[1])
                    if fresh:
                        await self.emit(fresh)
                    if self.output.complete:  # the result line from both streams: all output is in
                        break
        except Exception as e:
            await self._changes.put(("error", e))
            return
        await self._changes.put(("log", container_id))

    # -- events --------------------------------------------------------------------------------------
    def payload(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "status": status,
            "generation": self.generation,
            "logged": self.output.counted,
            "tail": list(self.output.tail),
            **fields,
        }

    def finished(self, pod: ChainPod | None) -> dict[str, Any]:
        """The result is in: everything the resumed task needs to report it without reading the log."""
        record = pod.record(self.stage) if pod is not None else None
        return self.payload(
            "finished",
            state=str(StageState.FINISHED),
            result=self.output.result_line,
            record=record.to_annotation() if record is not None else None,
            sized=pod is not None and ChainSizing.from_pod(pod) is not None,
        )

    def ended(self, pod: ChainPod | None, status: Any) -> dict[str, Any]:
        """The stage ended without a result in its stream: lost pod, failed start, moved on, or its log does
        not hold the result."""
        if status is None:
            status = current_status(pod, self.stage)
        if status.state in (StageState.POD_LOST, StageState.FAILED_TO_START):
            tail = list(self.output.tail)[-TAIL_IN_MESSAGE:]
            message = f"stage {self.stage!r} {status.state}: {status.reason} {status.message}".strip()
            if tail:
                message += "; last lines:\n" + "\n".join(tail)
            return self.payload("failed", state=str(status.state), message=message)
        # superseded, or another generation: the resumed task reads the result from the slot's history
        return self.payload("finished", state=str(status.state))


def _runs(pod: ChainPod | None, slot: str, container_id: str) -> bool:
    """Whether `slot` still runs container `container_id`."""
    hosted = pod.slots.get(slot) if pod is not None else None
    return hosted is not None and hosted.container_id == container_id and hosted.running


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
