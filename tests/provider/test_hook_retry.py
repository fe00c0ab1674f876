"""`KruiseHook` under transient API failures, against the local cluster over real HTTP.

Faults come from the cluster's own hook (`LocalCluster.fault`: an error answered before the cluster acts, at
random with `set_random_faults` or deterministically with `FailFirst`) and from `FaultyProxy` (tests/provider/
faultproxy.py: a 429 with Retry-After, an answer lost after the cluster acted, a stream cut mid-way).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiohttp import web
from kruise_local import LocalCluster
from kruise_local import resources as R
from kruise_local.errors import ApiError
from kruise_local.testing import wait_for
from kubernetes.client import ApiException

from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseApiError, KruiseHook, RetryPolicy
from airflow_kruise_chain.hooks.retry import WatchResume
from tests.provider.faultproxy import FaultyProxy, Rule, faulty_proxy

QUICK = RetryPolicy(attempts=4, initial=0.01, maximum=0.05)
LABELS = {"app.kubernetes.io/managed-by": "airflow-kruise-chain", "kruise-chain/chain": "c"}


class FailFirst:
    """A `LocalCluster.fault` hook: the first `times` requests with `method` whose path contains `path` (and
    whose query contains `query`) are answered with `code` (and `message`) before the cluster acts on them."""

    def __init__(
        self, method: str, path: str, code: int, times: int, query: str = "", message: str = ""
    ) -> None:
        self.method, self.path, self.code, self.times, self.query = method, path, code, times, query
        self.message = message or f"injected {code}"
        self.failed = 0

    def __call__(self, request: web.Request) -> ApiError | None:
        if (
            self.failed < self.times
            and request.method == self.method
            and self.path in request.path
            and self.query in request.query_string.lower()
        ):
            self.failed += 1
            return ApiError(self.code, self.message)
        return None


@pytest.fixture
def faults(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The session cluster, its fault hook cleared after the test."""
    yield cluster
    cluster.fault = None


@pytest.fixture
def hook(kubeconfig: Path) -> KruiseHook:
    return KruiseHook(conn_id=None, config_file=str(kubeconfig), retry_policy=QUICK)


@pytest.fixture
def proxy(cluster: LocalCluster, tmp_path: Path) -> Iterator[tuple[FaultyProxy, KruiseHook]]:
    """A `FaultyProxy` in front of the session cluster, and a hook that goes through it."""
    with faulty_proxy(cluster.url) as p:
        config = p.write_kubeconfig(cluster.kubeconfig(), tmp_path / "kubeconfig-proxy")
        yield p, KruiseHook(conn_id=None, config_file=str(config), retry_policy=QUICK)


def pod_body(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(LABELS if labels is None else labels)},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
        },
    }


def requests_to(cluster: LocalCluster, method: str, path: str) -> int:
    return sum(n for key, n in cluster.requests.items() if key == f"{method} {path}")


def writes_to(cluster: LocalCluster, method: str, path: str) -> list[int]:
    """Status codes of the cluster's audited writes with `method` to exactly `path`."""
    return [code for m, p, code in cluster.audit if m == method and p == path]


def warnings(logs: list[dict[str, Any]]) -> list[str]:
    """The hook's warnings in `structlog.testing.capture_logs()` entries, formatted."""
    return [e["event"] % tuple(e.get("positional_args", ())) for e in logs if e["log_level"] == "warning"]


def wait_running(hook: KruiseHook, name: str, namespace: str) -> ChainPod:
    for pod in hook.watch_pod(name, namespace, 30):
        if pod and any(
            "running" in (s.get("state") or {}) for s in pod.raw["status"].get("containerStatuses") or []
        ):
            return pod
    raise AssertionError(f"pod {name} did not start")


# -- reads ----------------------------------------------------------------------------------------------
def test_a_read_is_retried_on_5xx_and_each_retry_is_logged(faults, hook, namespace):
    pod = hook.create_pod(pod_body("p"), namespace)
    path = f"/api/v1/namespaces/{namespace}/pods/p"
    faults.fault = FailFirst("GET", path, 503, times=2)
    before = requests_to(faults, "GET", path)
    with structlog.testing.capture_logs() as logs:
        got = hook.read_pod("p", namespace)
    assert got.uid == pod["metadata"]["uid"]
    assert requests_to(faults, "GET", path) - before == 3  # two 503s, then the answer
    retries = warnings(logs)
    assert len(retries) == 2, retries
    assert "HTTP 503" in retries[0] and "retry 1 of 3" in retries[0] and "get pods p" in retries[0]


def test_a_persistent_5xx_gives_up_after_the_policys_attempts_with_a_clear_error(faults, hook, namespace):
    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods/p", 500, times=100)
    with pytest.raises(KruiseApiError) as err:
        hook.read_pod("p", namespace)
    assert err.value.status == 500
    assert 'get pods "p"' in str(err.value) and "still failing after retries" in str(err.value)
    assert requests_to(faults, "GET", f"/api/v1/namespaces/{namespace}/pods/p") == QUICK.attempts


def test_an_error_that_is_not_transient_is_not_retried(faults, hook, namespace):
    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods/p", 403, times=100)
    with pytest.raises(KruiseApiError, match="permission denied"):
        hook.read_pod("p", namespace)
    assert requests_to(faults, "GET", f"/api/v1/namespaces/{namespace}/pods/p") == 1


def test_a_429_is_retried_after_the_servers_retry_after(proxy, cluster, namespace):
    # a POST: urllib3 itself only retries idempotent methods on a 429 with Retry-After
    p, hook = proxy
    p.rules.append(Rule("POST", f"/namespaces/{namespace}/pods", "throttle", times=1, retry_after=1))
    with structlog.testing.capture_logs() as logs:
        hook.create_pod(pod_body("p"), namespace)
    assert [a for a, _, _ in p.applied] == ["throttle"]
    assert writes_to(cluster, "POST", f"/api/v1/namespaces/{namespace}/pods") == [201]
    retries = warnings(logs)
    assert len(retries) == 1 and "HTTP 429" in retries[0] and "in 1.00s" in retries[0], retries


def test_retry_after_is_honoured_and_capped_and_backoff_is_bounded():
    policy = RetryPolicy(initial=0.5, maximum=4.0, retry_after_max=10.0)
    assert policy.delay(1, 429, {"Retry-After": "3"}) == 3.0
    assert policy.delay(1, 503, {"Retry-After": "120"}) == 10.0
    delays = [policy.delay(n, 500, None) for n in range(1, 10)]
    assert all(0.25 <= d <= 0.5 for d in delays[:1])
    assert all(d <= 4.0 for d in delays) and max(delays) >= 2.0  # grows, then stays under the cap


def test_a_watch_resumes_from_the_last_version_until_its_deadline():
    resume = WatchResume(QUICK, timeout=60, started=100.0, version="7")
    assert resume.request(100.0) == {"timeout_seconds": 60, "resource_version": "7"}  # the whole timeout
    resume.seen("9")
    resume.seen(None)  # an event without a version keeps the last one
    assert resume.after(ConnectionResetError()) == "again"
    assert resume.request(130.4) == {"timeout_seconds": 29, "resource_version": "9"}  # the time left
    assert resume.request(159.5) is None  # less than a second left: the watch is over
    assert WatchResume(QUICK, timeout=5, started=0.0).request(0.0) == {"timeout_seconds": 5}


def test_a_watch_is_retried_as_the_policy_allows_and_ends_on_a_gone_version():
    resume = WatchResume(QUICK, timeout=60, started=0.0, version="7")
    assert [resume.after(ApiException(status=503)) for _ in range(QUICK.attempts)] == [
        *["again"] * (QUICK.attempts - 1),
        "give up",
    ]
    resume.seen("8")  # an event: the failures in a row start again
    assert resume.after(ApiException(status=503)) == "again" and resume.retries == 1
    assert resume.after(ApiException(status=403)) == "give up"  # not transient
    assert resume.after(ApiException(status=410)) == "too old"  # the caller reads the object again
    assert WatchResume(QUICK, timeout=60, started=0.0).after(ApiException(status=410)) == "give up"


# -- creates --------------------------------------------------------------------------------------------
def test_a_create_that_failed_with_500_is_sent_again_and_creates_one_object(faults, hook, namespace):
    faults.fault = FailFirst("POST", f"/namespaces/{namespace}/pods", 500, times=2)
    created = hook.create_pod(pod_body("p"), namespace)
    assert created["metadata"]["name"] == "p"
    assert writes_to(faults, "POST", f"/api/v1/namespaces/{namespace}/pods") == [500, 500, 201]


def test_a_create_whose_answer_was_lost_finds_its_own_object_on_the_retry(proxy, cluster, namespace):
    p, hook = proxy
    p.rules.append(Rule("POST", f"/namespaces/{namespace}/pods", "lose"))
    pod = hook.create_pod(pod_body("lost"), namespace)
    stored = cluster.call(lambda: cluster.store.peek(R.PODS, namespace, "lost"))
    assert pod["metadata"]["uid"] == stored["metadata"]["uid"]  # the one pod the first try created
    assert writes_to(cluster, "POST", f"/api/v1/namespaces/{namespace}/pods") == [201, 409]
    assert [a for a, _, _ in p.applied] == ["lose"]


def test_an_object_of_that_name_that_is_not_the_chains_is_not_adopted(hook, namespace):
    hook.create_pod(pod_body("p", labels={"app": "someone-else"}), namespace)
    with pytest.raises(KruiseApiError, match="not this chain's") as err:
        hook.create_pod(pod_body("p"), namespace)
    assert "kruise-chain/chain" in str(err.value) and err.value.status == 409


# -- patches and deletes --------------------------------------------------------------------------------
def test_a_conditional_patch_is_retried_after_500_and_applied_once(faults, hook, namespace):
    hook.create_pod(pod_body("p"), namespace)
    pod = wait_running(hook, "p", namespace)  # no more status updates: its version stays
    faults.fault = FailFirst("PATCH", f"/namespaces/{namespace}/pods/p", 500, times=1)
    rv = pod.resource_version
    patched = hook.patch_pod("p", namespace, {"metadata": {"resourceVersion": rv, "annotations": {"a": "1"}}})
    assert patched.annotations["a"] == "1"
    assert writes_to(faults, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p") == [500, 200]


def test_a_replayed_conditional_patch_that_went_through_gets_a_conflict(proxy, cluster, namespace):
    p, hook = proxy
    hook.create_pod(pod_body("p"), namespace)
    pod = wait_running(hook, "p", namespace)
    p.rules.append(Rule("PATCH", f"/namespaces/{namespace}/pods/p", "lose"))
    rv = pod.resource_version
    with pytest.raises(ConflictError):  # the driver re-reads the pod and finds its swap already made
        hook.patch_pod("p", namespace, {"metadata": {"resourceVersion": rv, "annotations": {"a": "1"}}})
    assert writes_to(cluster, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p") == [200, 409]
    assert hook.read_pod("p", namespace).annotations["a"] == "1"


def test_an_unconditional_patch_is_not_replayed_after_500(faults, hook, namespace):
    hook.create_pod(pod_body("p"), namespace)
    faults.fault = FailFirst("PATCH", f"/namespaces/{namespace}/pods/p", 500, times=1)
    with pytest.raises(KruiseApiError, match=r"patch pods \"p\".*\(500\)"):
        hook.patch_pod("p", namespace, {"metadata": {"annotations": {"a": "1"}}})
    assert writes_to(faults, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p") == [500]


def test_a_delete_whose_answer_was_lost_counts_as_deleted(proxy, cluster, namespace):
    p, hook = proxy
    hook.create_pod(pod_body("p"), namespace)
    p.rules.append(Rule("DELETE", f"/namespaces/{namespace}/pods/p", "lose"))
    assert hook.delete_pod("p", namespace, grace_period_seconds=0) is True
    assert writes_to(cluster, "DELETE", f"/api/v1/namespaces/{namespace}/pods/p") == [200, 404]
    assert hook.delete_pod("p", namespace) is False  # really gone before this call


# -- watches and logs -----------------------------------------------------------------------------------
def test_a_watch_that_fails_to_open_is_opened_again(faults, hook, namespace):
    pod = hook.create_pod(pod_body("p"), namespace)
    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods", 502, times=2, query="watch=true")
    first = next(iter(hook.watch_pod("p", namespace, 10)))
    assert first.uid == pod["metadata"]["uid"]
    assert faults.fault.failed == 2


def test_a_cut_watch_resumes_from_the_last_version_seen(proxy, namespace):
    p, hook = proxy
    pod = hook.create_pod(pod_body("p"), namespace)
    p.rules.append(Rule("GET", f"/namespaces/{namespace}/pods", "cut", query="watch=true"))
    seen: list[str] = []
    stream = hook.watch_pod("p", namespace, 20)
    first = next(stream)  # the stream is cut right after this event
    seen.append(first.resource_version)
    hook.patch_pod("p", namespace, {"metadata": {"annotations": {"after": "cut"}}})
    for new in stream:
        seen.append(new.resource_version)
        if new.annotations.get("after") == "cut":
            break
    assert [a for a, _, _ in p.applied] == ["cut"]
    assert len(seen) == len(set(seen)), seen  # resumed from the version seen: nothing twice
    assert first.uid == pod["metadata"]["uid"]


def test_a_cut_log_stream_ends_quietly_and_a_log_read_is_retried(faults, proxy, namespace):
    p, hook = proxy
    hook.create_pod(
        {
            **pod_body("p"),
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "echo one; echo two; sleep 3600"],
                    }
                ],
            },
        },
        namespace,
    )
    wait_running(hook, "p", namespace)
    # Running is not yet printed: wait for both lines before the fault
    wait_for(lambda: "two" in hook.read_log("p", namespace, "main"), what="both lines logged")
    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods/p/log", 500, times=1)
    assert hook.read_log("p", namespace, "main").splitlines()[:2] == ["one", "two"]
    assert faults.fault.failed == 1
    p.rules.append(Rule("GET", f"/namespaces/{namespace}/pods/p/log", "cut", query="follow=true"))
    assert list(hook.follow_log("p", namespace, "main")) == ["one"]  # cut after its first line: no error


# -- random faults over a sequence of calls -------------------------------------------------------------
def test_a_sequence_of_calls_under_random_5xx_and_409_succeeds(faults, hook, namespace):
    answered: list[int] = []
    faults.set_random_faults(conflict=0.0, error=0.3, seed=7)
    inner = faults.fault
    assert inner is not None

    def counting(request: web.Request) -> ApiError | None:
        err = inner(request) if namespace in request.path else None
        if err is not None:
            answered.append(err.code)
        return err

    faults.fault = counting
    pod = hook.create_pod(pod_body("p"), namespace)
    wait_running(hook, "p", namespace)
    for i in range(5):
        rv = hook.read_pod("p", namespace).resource_version
        hook.patch_pod("p", namespace, {"metadata": {"resourceVersion": rv, "annotations": {"i": str(i)}}})
    assert hook.read_pod("p", namespace).annotations["i"] == "4"
    assert hook.read_pod("p", namespace).uid == pod["metadata"]["uid"]
    assert hook.delete_pod("p", namespace) is True
    faults.fault = None  # the namespace's own deletion after the test is not under test
    assert answered.count(500) >= 3, answered  # the faults did happen
    created = [c for m, p, c in faults.audit if m == "POST" and p == f"/api/v1/namespaces/{namespace}/pods"]
    assert created.count(201) == 1


def test_random_conflicts_reach_the_caller_of_a_conditional_patch(faults, hook, namespace):
    hook.create_pod(pod_body("p"), namespace)
    pod = wait_running(hook, "p", namespace)
    faults.set_random_faults(conflict=1.0, seed=1)
    rv = pod.resource_version
    with pytest.raises(ConflictError):  # not retried by the hook: the driver re-plans from a fresh read
        hook.patch_pod("p", namespace, {"metadata": {"resourceVersion": rv, "annotations": {"a": "1"}}})
    assert writes_to(faults, "PATCH", f"/api/v1/namespaces/{namespace}/pods/p") == [409]


# -- the async hook (triggers) --------------------------------------------------------------------------
def test_the_async_hook_retries_reads_and_watches(faults, hook, namespace):
    pod = hook.create_pod(pod_body("p"), namespace)
    async_hook = AsyncKruiseHook(conn_id=None, config_dict=faults.kubeconfig(), retry_policy=QUICK)
    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods/p", 503, times=2)
    got = asyncio.run(async_hook.read_pod("p", namespace))
    assert got.uid == pod["metadata"]["uid"]
    assert faults.fault.failed == 2

    faults.fault = FailFirst("GET", f"/namespaces/{namespace}/pods", 500, times=2, query="watch=true")

    async def first_event() -> ChainPod | None:
        async for ev in async_hook.watch_pod("p", namespace, 10):
            return ev
        return None

    event = asyncio.run(first_event())
    assert event is not None and event.uid == pod["metadata"]["uid"]
    assert faults.fault.failed == 2
