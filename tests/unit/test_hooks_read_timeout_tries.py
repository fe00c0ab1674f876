"""A call whose request the API server took and never answered (a read timeout) is tried again once, not as
often as the retry policy allows: each try waits the whole read timeout (60 s), so six tries kept a task up to
6 min on a server that never answers. A call that found no connection (refused, connect timed out) keeps every
try: it never reached the server, and a server restarting answers again soon. Through real sockets
(`stalled_server.py`): counts of tries, not timings."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import structlog

from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseHook, RetryPolicy
from airflow_kruise_chain.hooks.retry import READ_TIMEOUT_TRIES
from tests.unit.stalled_server import Mode, StalledServer, stalled_server
from tests.unit.test_hooks_stalled_server import async_hook, ends, names_the_server, run_async, sync_hook

MANY = RetryPolicy(attempts=5, initial=0.01, maximum=0.02)


def _sync(server: StalledServer, tmp_path: Path) -> KruiseHook:
    return sync_hook(server, tmp_path, MANY)


def _async(server: StalledServer, tmp_path: Path) -> AsyncKruiseHook:
    return async_hook(server, tmp_path, MANY)


@pytest.mark.parametrize("mode", ["silent", "headers"])
def test_a_read_the_server_never_answers_is_tried_twice_in_all(mode: Mode, tmp_path: Path) -> None:
    assert READ_TIMEOUT_TRIES == 2 < MANY.attempts
    with stalled_server(mode) as server:
        names_the_server(ends(lambda: _sync(server, tmp_path).read_pod("p", "default")), server)
        assert server.requests == READ_TIMEOUT_TRIES


def test_an_async_read_the_server_never_answers_is_tried_twice_in_all(tmp_path: Path) -> None:
    with stalled_server("silent") as server:
        names_the_server(run_async(lambda: _async(server, tmp_path).read_pod("p", "default")), server)
        assert server.requests == READ_TIMEOUT_TRIES


@pytest.mark.parametrize("connect", ["refused", "timed out"])
def test_a_call_that_finds_no_connection_keeps_every_try(connect: str, tmp_path: Path) -> None:
    with stalled_server("silent" if connect == "refused" else "full") as server:
        if connect == "refused":
            closed = socket.socket()
            closed.bind(("127.0.0.1", 0))
            server.url = f"http://127.0.0.1:{closed.getsockname()[1]}"
            closed.close()  # nothing listens there: each connect is refused
        hook = _sync(server, tmp_path)
        with structlog.testing.capture_logs() as logs:
            names_the_server(ends(lambda: hook.read_pod("p", "default")), server)
    assert len([e for e in logs if e["log_level"] == "warning"]) == MANY.attempts - 1, logs
