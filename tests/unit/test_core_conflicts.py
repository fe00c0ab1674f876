"""A guarded update (`core/conflicts.py`) carried out over a blocking client (`run`) and an async one
(`arun`): the same calls, the same answers sent in, a conflict thrown in where it yielded, an error it does
not handle raised to the caller."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_kruise_chain.core.conflicts import READ, Guarded, arun, patch, run
from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.podview import ChainPod
from tests.unit.podfactory import chain_pod


class Clients:
    """A sync and an async client over one scripted pod: a patch fails with the next of `failures`."""

    def __init__(self, *failures: Exception | None) -> None:
        self.failures = list(failures)
        self.calls: list[tuple[str, str, str, dict[str, Any] | None]] = []
        self.version = 1

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.calls.append(("read_pod", name, namespace, None))
        return chain_pod(resource_version=str(self.version))

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        self.calls.append(("patch_pod", name, namespace, body))
        self.version += 1  # a concurrent write, or this one
        if failure := self.failures.pop(0) if self.failures else None:
            raise failure
        return chain_pod(resource_version=str(self.version))


class AsyncClients(Clients):
    async def read_pod(self, name: str, namespace: str) -> ChainPod:  # type: ignore[override]
        return Clients.read_pod(self, name, namespace)

    async def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:  # type: ignore[override]
        return Clients.patch_pod(self, name, namespace, body)


def bump(log: list[str], tries: int = 3) -> Guarded[str | None]:
    """Patch an annotation guarded by the version read; again from a fresh read after a conflict."""
    for _ in range(tries):
        pod = yield READ
        assert pod is not None
        try:
            patched = yield patch({"metadata": {"resourceVersion": pod.resource_version}})
        except ConflictError:
            log.append(f"conflict at {pod.resource_version}")
            continue
        assert patched is not None
        return patched.resource_version
    return None


def both(failures: tuple[Exception | None, ...]) -> list[tuple[Any, list[str], list[tuple]]]:
    """`bump` run over each client with the same failures: (outcome, its log, the calls made)."""
    seen = []
    for clients in (Clients(*failures), AsyncClients(*failures)):
        log: list[str] = []
        steps = bump(log)
        try:
            if isinstance(clients, AsyncClients):
                value: Any = asyncio.run(arun(steps, clients, "p", "ns"))
            else:
                value = run(steps, clients, "p", "ns")
        except Exception as e:
            value = e
        seen.append((value, log, clients.calls))
    return seen


def test_a_conflict_is_thrown_in_and_the_update_plans_again_from_a_fresh_read() -> None:
    sync, async_ = both((ConflictError("409"), None))
    assert sync == async_
    value, log, calls = sync
    assert value == "3" and log == ["conflict at 1"]
    assert [(c[0], c[3]) for c in calls] == [
        ("read_pod", None),
        ("patch_pod", {"metadata": {"resourceVersion": "1"}}),
        ("read_pod", None),
        ("patch_pod", {"metadata": {"resourceVersion": "2"}}),
    ]
    assert {c[1:3] for c in calls} == {("p", "ns")}


def test_an_update_that_keeps_conflicting_ends_with_its_own_answer() -> None:
    sync, async_ = both((ConflictError("a"), ConflictError("b"), ConflictError("c"), None))
    assert sync == async_ and sync[0] is None and len(sync[1]) == 3


def test_an_error_the_update_does_not_handle_reaches_the_caller() -> None:
    refused = OSError("connection refused")
    for value, log, calls in both((refused,)):
        assert value is refused and log == [] and len(calls) == 2


def test_an_update_that_needs_no_call_makes_none() -> None:
    def nothing() -> Guarded[int]:
        return 7
        yield READ  # a generator all the same

    assert run(nothing(), Clients(), "p", "ns") == 7
    assert asyncio.run(arun(nothing(), AsyncClients(), "p", "ns")) == 7
