"""Updates of the chain pod guarded by its resourceVersion, planned again after a 409: one loop, without I/O,
carried out over the sync client (a task) or the async one (a trigger).

A guarded update is a generator (`Guarded`): it yields the call it needs (`READ`: the chain pod's snapshot,
None once it is gone; `patch(body)`, `resize(body)`: the pod's snapshot as the patch or the `pods/resize`
left it) and is sent the answer; a call that failed is thrown into it where it yielded (`ConflictError` on a
409: both hooks raise it, `KruiseHook` and `AsyncKruiseHook` keeping one contract), so it reads as the
blocking code it replaces and decides, once, what a conflict or an error means. `run` carries it out over a
`ChainApi`, `arun` over an `AsyncPodApi`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from .api import ChainApi
from .podview import ChainPod

T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    """One call a guarded update needs: the client's `method` on the chain pod, with `body` if any."""

    method: Literal["read_pod", "patch_pod", "resize_pod"]
    body: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def args(self) -> tuple[Any, ...]:
        return () if self.body is None else (self.body,)


READ = Call("read_pod")
"""read the chain pod: sent its snapshot, None once it is gone"""


def patch(body: dict[str, Any]) -> Call:
    """Strategic-merge patch the chain pod with `body` (guarded when it carries a resourceVersion): sent the
    patched pod's snapshot; `ConflictError` thrown in on a 409."""
    return Call("patch_pod", body)


def resize(body: dict[str, Any]) -> Call:
    """A `pods/resize` patch of the chain pod: sent the pod's snapshot; `ConflictError` (a stale
    resourceVersion), `ResizeRefusedError` or `ResizeUnsupportedError` thrown in."""
    return Call("resize_pod", body)


Guarded = Generator[Call, ChainPod | None, T]
"""a guarded update that ends with a `T`"""


class AsyncPodApi(Protocol):
    """What `arun` needs of an async client (`AsyncKruiseHook`): `ChainApi`'s pod calls, awaited."""

    async def read_pod(self, name: str, namespace: str) -> ChainPod | None: ...

    async def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod: ...

    async def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod: ...


class _Walk(Generic[T]):
    """A guarded update carried forward: the call it waits for (None once it has ended with `value`)."""

    def __init__(self, steps: Guarded[T]) -> None:
        self.steps = steps
        self.call: Call | None = None
        self.value: T | None = None
        self._resume(lambda: next(steps))

    def go_on(self, answer: ChainPod | None, error: Exception | None) -> None:
        """Hand the update its call's answer, or the error the call raised."""
        self._resume(lambda: self.steps.throw(error) if error is not None else self.steps.send(answer))

    def _resume(self, step: Callable[[], Call]) -> None:
        try:
            self.call = step()
        except StopIteration as stop:
            self.call, self.value = None, stop.value


def _outcome(make: Callable[[], Any]) -> tuple[Any, Exception | None]:
    try:
        return make(), None
    except Exception as error:
        return None, error


async def _aoutcome(answer: Awaitable[Any]) -> tuple[Any, Exception | None]:
    try:
        return await answer, None
    except Exception as error:
        return None, error


def run(steps: Guarded[T], api: ChainApi | Any, pod_name: str, namespace: str) -> T:
    """Carry out `steps` over a blocking client (`ChainApi`, or a part of it that has the calls `steps`
    yields); what it returns (an error it does not handle is raised)."""
    walk = _Walk(steps)
    while (call := walk.call) is not None:
        walk.go_on(*_outcome(lambda: getattr(api, call.method)(pod_name, namespace, *call.args)))
    return walk.value  # type: ignore[return-value]  # set once the walk ended


async def arun(steps: Guarded[T], api: AsyncPodApi, pod_name: str, namespace: str) -> T:
    """`run` over an async client."""
    walk = _Walk(steps)
    while (call := walk.call) is not None:
        walk.go_on(*await _aoutcome(getattr(api, call.method)(pod_name, namespace, *call.args)))
    return walk.value  # type: ignore[return-value]  # set once the walk ended
