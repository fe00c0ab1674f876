"""The hooks against an API server that stalls, through real sockets (`stalled_server.py`): every call ends
within its timeouts and the hook's retries, with an error naming the server, never hangs.

Before `hooks/timeouts.py`: a read of a server that never answers took 4 min per try (cncf.kubernetes' 60 s,
and urllib3 trying three times more on its own), a log follow whose body stalled 60 s, an exec whose server
never answered the upgrade, or cut a frame half-way, for ever (sync and async alike for the follow: none)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseApiError, KruiseHook, RetryPolicy
from airflow_kruise_chain.hooks.timeouts import ApiTimeouts
from tests.unit.stalled_server import Mode, StalledServer, stalled_server

SHORT = ApiTimeouts(connect=0.5, read=0.5, watch_grace=0.5, idle_stream=0.5)
TWICE = RetryPolicy(attempts=2, initial=0.01, maximum=0.02)
BOUND = 20.0
"""seconds any call here may take: its timeouts allow about 1-3 s; unbounded, it took minutes or for ever"""


def ends(call: Callable[[], Any]) -> Any:
    """What `call()` returned or raised, on a thread, asserting it ended within `BOUND`."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as e:  # the outcome to check
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"still waiting after {BOUND:g}s"
    return outcome[0]


def sync_hook(server: StalledServer, tmp_path: Path, policy: RetryPolicy = TWICE) -> KruiseHook:
    config = server.kubeconfig(tmp_path / "kubeconfig")
    return KruiseHook(conn_id=None, config_file=str(config), retry_policy=policy, api_timeouts=SHORT)


def async_hook(server: StalledServer, tmp_path: Path, policy: RetryPolicy = TWICE) -> AsyncKruiseHook:
    config = server.kubeconfig(tmp_path / "kubeconfig")
    return AsyncKruiseHook(conn_id=None, config_file=str(config), retry_policy=policy, api_timeouts=SHORT)


def names_the_server(error: Any, server: StalledServer) -> None:
    assert isinstance(error, KruiseApiError), error
    assert f"cannot reach the Kubernetes API server {server.url}" in str(error)
    assert "that this machine reaches it" in str(error)


@pytest.mark.parametrize("mode", ["silent", "headers", "full"])
def test_a_read_of_a_server_that_does_not_answer_fails_naming_it(mode: Mode, tmp_path: Path) -> None:
    with stalled_server(mode) as server:
        error = ends(lambda: sync_hook(server, tmp_path).read_pod("p", "default"))
        names_the_server(error, server)
        if mode != "full":
            assert server.requests == TWICE.attempts  # the hook's tries only: urllib3 retries none on its own


def test_a_create_of_a_server_that_does_not_answer_fails_naming_it(tmp_path: Path) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    with stalled_server("silent") as server:
        names_the_server(ends(lambda: sync_hook(server, tmp_path).create_pod(body, "default")), server)


def test_a_watch_whose_server_stalls_ends(tmp_path: Path) -> None:
    """A watch window of 3 s gets 3.5 s to read: it ends (the caller reads the object again) or fails."""
    with stalled_server("headers") as server:
        outcome = ends(lambda: list(sync_hook(server, tmp_path).watch_pod("p", "default", 3)))
        assert outcome == [] or isinstance(outcome, KruiseApiError), outcome


def test_a_log_follow_whose_body_stalls_ends(tmp_path: Path) -> None:
    with stalled_server("headers") as server:
        # ends without its half line: the follow that opens it again reads it whole
        assert ends(lambda: list(sync_hook(server, tmp_path).follow_log("p", "default", "slot-a"))) == []


@pytest.mark.parametrize("mode", ["silent", "full"])
def test_an_exec_the_server_does_not_answer_fails_naming_it(mode: Mode, tmp_path: Path) -> None:
    with stalled_server(mode) as server:
        hook = sync_hook(server, tmp_path)
        error = ends(lambda: hook.open_exec_in_pod("p", "default", "slot-a", ["true"]))
        names_the_server(error, server)
        assert error.status == 0  # not an RBAC refusal: the fast go says "failed"


def test_an_exec_whose_frame_stalls_half_way_fails_at_its_deadline(tmp_path: Path) -> None:
    with stalled_server("upgrade") as server:
        session = sync_hook(server, tmp_path).open_exec_in_pod("p", "default", "slot-a", ["true"])
        error = ends(lambda: session.send(b"spec", 1.0))
        assert isinstance(error, KruiseApiError) and "did not end within 1s" in str(error), error


def run_async(call: Callable[[], Any]) -> Any:
    return ends(lambda: asyncio.run(call()))


def test_an_async_read_of_a_server_that_does_not_answer_fails_naming_it(tmp_path: Path) -> None:
    with stalled_server("silent") as server:
        names_the_server(run_async(lambda: async_hook(server, tmp_path).read_pod("p", "default")), server)


def test_an_async_watch_whose_server_stalls_ends(tmp_path: Path) -> None:
    with stalled_server("headers") as server:
        hook = async_hook(server, tmp_path)

        async def watch() -> list[Any]:
            return [pod async for pod in hook.watch_pod("p", "default", 3)]

        outcome = run_async(watch)
        assert outcome == [] or isinstance(outcome, KruiseApiError), outcome


def test_an_async_log_follow_whose_body_stalls_ends(tmp_path: Path) -> None:
    with stalled_server("headers") as server:
        hook = async_hook(server, tmp_path)

        async def follow() -> list[list[str]]:
            return [batch async for batch in hook.follow_log("p", "default", "slot-a")]

        assert run_async(follow) == []


def test_each_kind_of_request_gets_its_read_timeout() -> None:
    """cncf.kubernetes gave every request 60 s in all: a quiet watch window of 60 s raced it, and was
    retried with a warning (its `timeout_seconds` lookup reads a keyword the generated clients never pass)."""
    timeouts = ApiTimeouts()
    assert timeouts.of([("watch", True), ("timeoutSeconds", 60)]) == (10.0, 65.0)
    assert timeouts.of([("follow", True), ("container", "slot-a")]) == (10.0, 60.0)
    assert timeouts.of([("labelSelector", "a=b")]) == timeouts.of(None) == (10.0, 60.0)


def test_a_write_that_found_no_connection_is_tried_again(tmp_path: Path) -> None:
    """An unconditional patch is not replayed after a failure the server may have acted on, but one that
    never reached it (connection refused) is: urllib3 under the hook retries nothing itself now."""
    import socket

    import structlog

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: each connect is refused
    with stalled_server("silent") as server:
        server.url = f"http://127.0.0.1:{port}"
        hook = sync_hook(server, tmp_path)
        with structlog.testing.capture_logs() as logs:
            error = ends(lambda: hook.patch_pod("p", "default", {"metadata": {"annotations": {"a": "b"}}}))
    names_the_server(error, server)
    retries = [e for e in logs if e["log_level"] == "warning"]
    assert len(retries) == TWICE.attempts - 1, logs
