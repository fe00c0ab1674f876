"""One contract for both hooks: `KruiseHook` (a task) and `AsyncKruiseHook` (a trigger) answer the chain pod's
read, patch, resize and watch with the same values and fail with the same errors, against the local cluster
over real HTTP, so one guarded update (`core/conflicts.py`) serves both.

Each case runs the same call through both hooks and compares what came back: the type, and for an error its
status and its message word for word.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kruise_local import LocalCluster

from airflow_kruise_chain.core.errors import ConflictError, ResizeRefusedError, ResizeUnsupportedError
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseApiError, KruiseHook, RetryPolicy
from tests.provider.test_hook_retry import FailFirst, pod_body, wait_running, writes_to

QUICK = RetryPolicy(attempts=3, initial=0.01, maximum=0.02)


class AsyncAsSync:
    """`AsyncKruiseHook`'s calls, each awaited to its end: a case calls both hooks alike."""

    def __init__(self, hook: AsyncKruiseHook) -> None:
        self.hook = hook

    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        return asyncio.run(self.hook.read_pod(name, namespace))

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        return asyncio.run(self.hook.patch_pod(name, namespace, body))

    def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        return asyncio.run(self.hook.resize_pod(name, namespace, body))

    def first_event(self, name: str, namespace: str, timeout: int) -> ChainPod | None:
        async def first() -> ChainPod | None:
            async for ev in self.hook.watch_pod(name, namespace, timeout):
                return ev
            raise AssertionError("no event")

        return asyncio.run(first())


class SyncHook:
    """`KruiseHook`, with the watch's first event as `AsyncAsSync` has it."""

    def __init__(self, hook: KruiseHook) -> None:
        self.hook = hook
        self.read_pod, self.patch_pod, self.resize_pod = hook.read_pod, hook.patch_pod, hook.resize_pod

    def first_event(self, name: str, namespace: str, timeout: int) -> ChainPod | None:
        return next(iter(self.hook.watch_pod(name, namespace, timeout)))


@pytest.fixture
def hooks(cluster: LocalCluster, kubeconfig: Path) -> Iterator[dict[str, Any]]:
    """Both hooks on the session cluster (its fault hook cleared after the test)."""
    sync = KruiseHook(conn_id=None, config_file=str(kubeconfig), retry_policy=QUICK)
    async_hook = AsyncKruiseHook(conn_id=None, config_dict=cluster.kubeconfig(), retry_policy=QUICK)
    yield {"sync": SyncHook(sync), "async": AsyncAsSync(async_hook)}
    cluster.fault = None


def outcome(call: Callable[[], Any]) -> tuple[type, Any]:
    """What a call came to: (type of its answer, the answer) or (type of its error, (status, message))."""
    try:
        answer = call()
    except Exception as e:
        return type(e), (getattr(e, "status", None), str(e))
    return type(answer), answer


def both(hooks: dict[str, Any], call: Callable[[Any], Any], arm: Callable[[], None] = lambda: None) -> Any:
    """`call(hook)` through each hook (`arm` sets up the fault before each): the same outcome; it is
    returned."""
    seen = {}
    for kind, hook in hooks.items():
        arm()
        seen[kind] = outcome(lambda hook=hook: call(hook))
    (sync_type, sync_value), (async_type, async_value) = seen["sync"], seen["async"]
    assert sync_type is async_type, seen
    if not isinstance(sync_value, ChainPod):
        assert sync_value == async_value, seen
    return seen["sync"]


def test_a_read_answers_the_snapshot_or_none(hooks, namespace):
    created = hooks["sync"].hook.create_pod(pod_body("p"), namespace)
    kind, pod = both(hooks, lambda h: h.read_pod("p", namespace))
    assert kind is ChainPod and pod.uid == created["metadata"]["uid"]
    assert both(hooks, lambda h: h.read_pod("gone", namespace)) == (type(None), None)


def test_a_patch_answers_the_patched_pod_and_a_stale_one_raises_conflict(cluster, hooks, namespace):
    hooks["sync"].hook.create_pod(pod_body("p"), namespace)
    pod = wait_running(hooks["sync"].hook, "p", namespace)  # no more status updates: its version stays
    for kind, hook in hooks.items():
        patched = hook.patch_pod("p", namespace, {"metadata": {"annotations": {"by": kind}}})
        assert isinstance(patched, ChainPod) and patched.annotations["by"] == kind
    stale = {"metadata": {"resourceVersion": pod.resource_version, "annotations": {"a": "1"}}}
    before = len(writes_to(cluster, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p"))
    kind, (_status, message) = both(hooks, lambda h: h.patch_pod("p", namespace, stale))
    assert kind is ConflictError and message == 'pods "p" changed since it was read (409 Conflict)'
    # a 409 is the caller's to handle (it reads again and plans again): neither hook retries it
    assert writes_to(cluster, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p")[before:] == [409, 409]


def test_failed_patches_raise_the_same_errors(cluster, hooks, namespace):
    hooks["sync"].hook.create_pod(pod_body("p"), namespace)
    path = f"/namespaces/{namespace}/pods/p"
    body = {"metadata": {"annotations": {"a": "1"}}}

    def fail(code: int) -> Callable[[], None]:
        def arm() -> None:
            cluster.fault = FailFirst("PATCH", path, code, times=1)

        return arm

    # an unconditional patch is not replayed after a failure the server may have acted on
    kind, (status, message) = both(hooks, lambda h: h.patch_pod("p", namespace, body), fail(500))
    assert (kind, status) == (KruiseApiError, 500)
    failed = f"patch pods \"p\" in namespace '{namespace}' failed (500) (still failing after retries)"
    assert message == f"{failed}: injected 500"
    kind, (status, message) = both(hooks, lambda h: h.patch_pod("p", namespace, body), fail(403))
    assert (kind, status) == (KruiseApiError, 403) and message.startswith("permission denied: cannot patch")
    kind, (status, _) = both(hooks, lambda h: h.patch_pod("none", namespace, body))
    assert (kind, status) == (KruiseApiError, 404)


def test_failed_resizes_raise_the_same_errors(cluster, hooks, namespace):
    hooks["sync"].hook.create_pod(pod_body("p"), namespace)
    body = {"spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "100m"}}}]}}

    def refuse(code: int, message: str) -> Callable[[], None]:
        def arm() -> None:
            cluster.fault = FailFirst(
                "PATCH", f"/namespaces/{namespace}/pods/p/resize", code, 1, message=message
            )

        return arm

    resize = lambda h: h.resize_pod("p", namespace, body)  # noqa: E731
    unserved = refuse(404, "the server could not find the requested resource")
    assert both(hooks, resize, unserved)[0] is ResizeUnsupportedError
    assert both(hooks, resize, refuse(422, "memory limits cannot be decreased"))[0] is ResizeRefusedError
    assert both(hooks, resize, refuse(409, "the object has been modified"))[0] is ConflictError
    kind, (status, _) = both(hooks, lambda h: h.resize_pod("none", namespace, body))
    assert (kind, status) == (KruiseApiError, 404)  # a missing pod is no missing resource


def test_a_watch_answers_snapshots_and_fails_alike(cluster, hooks, namespace):
    created = hooks["sync"].hook.create_pod(pod_body("p"), namespace)
    kind, first = both(hooks, lambda h: h.first_event("p", namespace, 10))
    assert kind is ChainPod and first.uid == created["metadata"]["uid"]

    def refuse() -> None:
        cluster.fault = FailFirst("GET", f"/namespaces/{namespace}/pods", 403, times=1, query="watch=true")

    kind, (status, message) = both(hooks, lambda h: h.first_event("p", namespace, 10), refuse)
    assert (kind, status) == (KruiseApiError, 403) and "cannot watch pods" in message
