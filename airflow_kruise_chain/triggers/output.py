"""Following a deferred stage in the triggerer: its output into the task log as it comes, then its result.

The triggerer writes what a trigger logs into the task's log (a file next to the task's own, which the API
server shows while the task is deferred), so a deferred stage's output is live. What is logged is counted
(`GenerationOutput`): the event carries the count, and the resumed task logs only what comes after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_kruise_chain.core.conflicts import arun
from airflow_kruise_chain.core.constants import other_slot
from airflow_kruise_chain.core.errors import ChainError
from airflow_kruise_chain.core.follow import HAND_OVER_AFTER, GenerationFollow, Next, Step
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.sizing import (
    SETTLE_WAIT,
    apark_generation,
    guarded_size_ahead,
    idle_by_pod,
    resize_unsettled,
)
from airflow_kruise_chain.core.status import StageState, StageStatus, current_status
from airflow_kruise_chain.core.swap import prepare_two_ahead, retire_unstarted
from airflow_kruise_chain.core.watch import awatch_versions
from airflow_kruise_chain.core.wire import replay_note, replay_request

if TYPE_CHECKING:
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook

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
        ahead: tuple[str, str] | None = None,
        then: tuple[str, str] | None = None,
    ) -> None:
        self.hook = hook
        self.pod_name = pod_name
        self.namespace = namespace
        self.stage = stage
        self.generation = generation
        self.deadline = deadline
        self.emit = emit
        self.skip = skip
        self.ahead = ahead
        """(name, image) of the stage predicted to run next: its slot is sized once this one succeeded"""
        self.then = then
        """(name, image) of the stage predicted after that one: this stage's slot is then prepared for it"""
        self.follow = GenerationFollow(stage, "", generation, "", skip=skip)
        """what the log and the pod mean (made again once the stage's record is read)"""
        self._changes: asyncio.Queue[tuple[str, int, Any]] = asyncio.Queue(maxsize=16)

    async def run(self) -> dict[str, Any]:
        """Follow until the result, or until the follow ends without one (`GenerationFollow` decides); what
        comes (pod changes, log lines, a stream's end) is taken in order from one queue."""
        loop = asyncio.get_running_loop()
        pod = await self.hook.read_pod(self.pod_name, self.namespace)
        record = pod.record(self.stage) if pod is not None else None
        if pod is None or record is None or record.generation != self.generation:
            # gone, or swapped in again since: the resumed task reads the pod and decides
            return self.ended(pod, None)
        follow = self.follow = GenerationFollow(
            self.stage,
            record.slot,
            self.generation,
            record.token,
            swapped_at=record.swapped_at,
            go=record.action == "go",
            skip=self.skip,
            hand_over_after=HAND_OVER_AFTER,
        )
        watcher = asyncio.create_task(self._watch(pod))
        stream: asyncio.Task[None] | None = None
        streams = 0  # streams opened: what a closed one still queued is dropped
        step = follow.see(pod, loop.time())
        try:
            while True:
                if step.next is Next.OPEN:
                    if stream is not None:
                        await _cancel(stream)
                    streams += 1
                    stream = asyncio.create_task(self._stream(streams, follow.slot, follow.since(_now())))
                    step = Step(Next.WAIT, step.status)
                elif step.next is Next.ENDED:
                    return await self.finished(pod)
                elif step.next is Next.REPLAY:
                    key, value = replay_request(follow.slot, self.generation)
                    body = {"metadata": {"annotations": {key: value}}}
                    await self.hook.patch_pod(self.pod_name, self.namespace, body)
                    await self.emit([replay_note(follow.slot, self.generation, key)])
                elif step.next is not Next.WAIT and step.next is not Next.STOPPED:
                    if step.next is Next.FAILED_TO_START:
                        await self.retire(follow.slot)
                    return self.ended(pod, step.status if step.next is not Next.GAVE_UP else None)
                now = loop.time()
                if now >= self.deadline:
                    return self.payload("timeout", message=f"stage {self.stage!r} did not finish in time")
                wait = min(self.deadline, step.at if step.at is not None else math.inf) - now
                try:
                    kind, which, value = await asyncio.wait_for(self._changes.get(), max(0.0, wait))
                except TimeoutError:
                    step = follow.tick(pod, loop.time())
                    continue
                if kind == "pod":
                    if value is None:
                        return self.ended(None, None)
                    pod = value
                    step = follow.see(pod, loop.time())
                elif kind == "error":
                    raise value
                elif which != streams:
                    continue  # a stream closed before: what it had read is not ours any more
                elif kind == "lines":
                    batch, taken = value
                    step = follow.read(batch, loop.time())
                    if step.lines:
                        await self.emit(list(step.lines))
                    taken.set()
                elif kind == "end":
                    stream = None
                    if follow.output.result is None:
                        pod = await self.hook.read_pod(self.pod_name, self.namespace) or pod
                    step = follow.stream_ended(pod, loop.time())
        finally:
            await _cancel(watcher)
            if stream is not None:
                await _cancel(stream)

    async def _watch(self, pod: ChainPod) -> None:
        """Pod changes into the queue (None: deleted) until cancelled; a watch window that ends is renewed."""
        try:

            def watch(seconds: int, version: str | None) -> AsyncIterator[ChainPod | None]:
                return self.hook.watch_pod(self.pod_name, self.namespace, seconds, version)

            changes = awatch_versions(
                watch,
                math.inf,
                version=pod.resource_version,
                relist=lambda: self.hook.read_pod(self.pod_name, self.namespace),  # after a 410, or a window
            )
            # closed when cancelled too (e.g. waiting for room in the queue), with the watch inside it
            async with contextlib.aclosing(changes):
                async for new in changes:
                    await self._changes.put(("pod", 0, new))
                    if new is None:
                        return
        except Exception as e:  # handed to the loop, which raises it
            await self._changes.put(("error", 0, e))

    async def _stream(self, which: int, slot: str, since: int | None) -> None:
        """Stream `which`: the batches of `slot`'s log into the queue, then its end."""
        try:
            stream = self.hook.follow_log(self.pod_name, self.namespace, slot, since_seconds=since)
            async with contextlib.aclosing(stream) as batches:
                async for batch in batches:
                    taken = asyncio.Event()  # one batch at a time: read no faster than it is logged
                    await self._changes.put(("lines", which, (batch, taken)))
                    await taken.wait()
        except Exception as e:
            await self._changes.put(("error", which, e))
            return
        await self._changes.put(("end", which, None))

    # -- events --------------------------------------------------------------------------------------
    def payload(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "status": status,
            "generation": self.generation,
            "logged": self.follow.output.counted,
            "tail": list(self.follow.output.tail),
            **fields,
        }

    async def finished(self, pod: ChainPod | None) -> dict[str, Any]:
        """The result is in: parks the stage's slot, then everything the resumed task needs to report it
        with no Kubernetes client and no API call (`triggers/event.py` reads it)."""
        record = pod.record(self.stage) if pod is not None else None
        return self.payload(
            "finished",
            state=str(StageState.FINISHED),
            result=self.follow.output.result_line,
            record=record.to_annotation() if record is not None else None,
            parked=await self.park(pod),
        )

    async def park(self, pod: ChainPod | None) -> bool:
        """Park the ended generation's slot (`apark_generation`) and, when the stage succeeded, size the next
        stage's slot ahead (`guarded_size_ahead`, the slot idle only when the pod alone says so: no log read)
        and prepare the ended slot two ahead (`prepare_two_ahead`), as a
        stage task does at its stage's end; their lines go to the task log. False when the park failed
        otherwise than with a ChainError (which the next swap mends, as the stage task's park): the resumed
        task parks it then."""
        lines: list[str] = []
        slot, result = self.follow.slot, self.follow.output.result
        args = (self.hook, self.pod_name, self.namespace)
        succeeded = result is not None and result.exit_code == 0
        park_ahead = (*self.ahead, idle_by_pod) if self.ahead is not None and succeeded else None
        try:
            parked = await apark_generation(
                *args, self.stage, slot, self.generation, lines.append, pod, ahead=park_ahead
            )
        except ChainError as err:
            lines.append(f"could not park {slot} after stage {self.stage!r}: {err}")
        except Exception as err:  # e.g. the API out of reach after the retries
            lines.append(f"could not park {slot} after stage {self.stage!r} ({err}): the resumed task will")
            await self.emit(lines)
            return False
        else:
            if self.ahead is not None and succeeded:  # sized by the park's resize: asks for nothing
                sized = None
                try:
                    ahead = guarded_size_ahead(*self.ahead, slot, idle_by_pod, lines.append, parked)
                    sized = await arun(ahead, *args)
                except Exception as err:  # ahead-of-time work: the next swap sizes its slot itself
                    lines.append(f"::kruise-chain:: not sizing {other_slot(slot)} ahead: {err}")
                if self.then is not None:  # from the pod as the last resize left it, as the task does
                    latest = sized or parked or pod
                    if latest is not None and resize_unsettled(latest):
                        latest = await self._in_force(latest)  # not to meet the kubelet's writes (409)
                    steps = prepare_two_ahead(
                        lines.append, slot, self.generation, self.ahead, self.then, idle_by_pod, latest
                    )
                    await arun(steps, *args)
        if lines:
            await self.emit(lines)
        return True

    async def _in_force(self, pod: ChainPod) -> ChainPod | None:
        """The pod once the park's resize is in force (`resize_unsettled`), as one watch sent it; None when
        `SETTLE_WAIT` passed first or the pod is gone (the prepare reads it), as a stage task's park does."""

        def watch(seconds: int, version: str | None) -> AsyncIterator[ChainPod | None]:
            return self.hook.watch_pod(self.pod_name, self.namespace, seconds, version)

        changes = awatch_versions(watch, time.monotonic() + SETTLE_WAIT, version=pod.resource_version)
        async with contextlib.aclosing(changes):
            async for new in changes:
                if new is None or not resize_unsettled(new):
                    return new
        return None

    async def retire(self, slot: str) -> None:
        """Delete the run spec of the generation, which cannot start in `slot`, before the task fails
        (`swap.retire_unstarted`, as the worker's `FollowLoop.cannot_start`); a failure is logged."""
        try:
            await arun(retire_unstarted(slot, self.generation), self.hook, self.pod_name, self.namespace)
        except Exception as e:  # the failure the event reports is what the task raises
            await self.emit(
                [f"::kruise-chain:: could not retire the run spec of generation {self.generation}: {e}"]
            )

    def ended(self, pod: ChainPod | None, status: StageStatus | None) -> dict[str, Any]:
        """The stage ended without a result in its stream: lost pod, failed start, moved on, or its log does
        not hold the result."""
        if status is None:
            status = current_status(pod, self.stage)
        if status.state in (StageState.POD_LOST, StageState.FAILED_TO_START):
            tail = list(self.follow.output.tail)[-TAIL_IN_MESSAGE:]
            message = f"stage {self.stage!r} {status.state}: {status.reason} {status.message}".strip()
            if tail:
                message += "; last lines:\n" + "\n".join(tail)
            return self.payload("failed", state=str(status.state), message=message)
        # superseded, or another generation: the resumed task reads the result from the slot's history
        return self.payload("finished", state=str(status.state))


def _now() -> datetime:
    return datetime.now(UTC)


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
