"""The background tasks of one part of the local cluster (scheduler, kubelet, Kruise controllers)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class BackgroundTasks:
    """Tasks a part started: referenced until they end (the loop keeps only weak references), cancelled when
    the part stops."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel(self, wait: float = 5.0) -> None:
        """Cancel every task and give them up to `wait` seconds to end (a kill they were doing finishes
        before the loop closes: a process reaped, its pipes closed)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=wait)
