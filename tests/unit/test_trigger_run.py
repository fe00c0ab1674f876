"""`StageTrigger.run` as the triggerer drives it: what it opened is closed by the time its event is out."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.triggers.chain import StageTrigger
from tests.unit.podfactory import chain_pod


class FakeHook:
    """The calls the trigger makes without a generation: a pod whose stage has not started, then a watch
    that sees it deleted and would wait on after that. Records what is open."""

    def __init__(self) -> None:
        self.open: set[str] = set()

    @contextlib.asynccontextmanager
    async def one_client(self) -> AsyncIterator[FakeHook]:
        self.open.add("client")
        try:
            yield self
        finally:
            await asyncio.sleep(0)  # closing a client awaits
            self.open.discard("client")

    async def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        return chain_pod(name=name, namespace=namespace)

    async def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> AsyncIterator[ChainPod | None]:
        self.open.add("watch")
        try:
            yield None  # deleted
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # closing a watch's response awaits
            self.open.discard("watch")


def test_a_trigger_cancelled_after_its_event_leaves_nothing_open() -> None:
    """The triggerer iterates `run()` with `async for` and awaits in the loop's body (it logs the event); a
    cancel there (the task instance moved on, the triggerer stopping) leaves the generator suspended at its
    yield, never closed by the triggerer. Before, the trigger yielded inside its client's `async with` and
    its pod watch: both stayed open until the loop's async generator hooks closed them, at garbage
    collection or loop shutdown (where the generators were closed concurrently: "aclose(): asynchronous
    generator is already running")."""
    hook = FakeHook()
    trigger = StageTrigger(pod_name="chain-pod", namespace="default", stage="load", timeout=30)
    trigger.hook = lambda: hook  # type: ignore[method-assign]
    fired: list[dict[str, Any]] = []
    open_at_event: list[set[str]] = []

    async def triggerer() -> None:
        async for event in trigger.run():
            fired.append(event.payload)
            open_at_event.append(set(hook.open))
            await asyncio.sleep(3600)  # the triggerer's `await self.log.ainfo(...)`, cancelled

    async def main() -> set[str]:
        task = asyncio.create_task(triggerer())
        while not fired:
            await asyncio.sleep(0.01)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return set(hook.open)

    left_open = asyncio.run(asyncio.wait_for(main(), 30))
    assert fired[0]["status"] == "failed" and fired[0]["state"] == "pod_lost", fired
    assert open_at_event == [set()]
    assert left_open == set()
