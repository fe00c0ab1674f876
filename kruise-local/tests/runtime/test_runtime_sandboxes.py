"""The runtime's pod sandboxes: their network namespace (ports, localhost, probes), and a sandbox or a
container start that ends midway (cancelled, failed) leaving no process and no open pipe."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from kruise_local import runtime as runtime_module
from kruise_local.cri import RuntimeUnavailable
from kruise_local.processes import RunningContainer
from kruise_local.runtime import ContainerRuntime
from kruise_local.testing import child_processes, new_child_processes, no_process_leaks
from runtime_helpers import ENDS, alive, make_launch, sh, texts, until

LISTEN = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.bind(('127.0.0.1', 8765)); s.listen(); print('listening', flush=True)\n"
    "time.sleep(3600)\n"
)


async def test_pod_sandboxes_isolate_ports_and_share_localhost(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """Two pod sandboxes each take port 8765; a second container of the first pod reaches it on localhost;
    the probes connect inside their own pod only."""
    pods = [await any_runtime.create_sandbox() for _ in range(2)]
    try:
        servers = [
            await any_runtime.start(make_launch(tmp_path, ["python3", "-c", LISTEN], f"s{i}", pod_sandbox=sb))
            for i, sb in enumerate(pods)
        ]
        for srv in servers:
            await until(lambda srv=srv: "listening" in "".join(texts(srv)), "both servers listening")
        dial = "import socket; socket.create_connection(('127.0.0.1', 8765), timeout=5); print('reached')"
        client = await any_runtime.start(
            make_launch(tmp_path, ["python3", "-c", dial], "cl", pod_sandbox=pods[0])
        )
        assert await client.wait() == 0 and texts(client)[-1].endswith("reached")
        code, out = await any_runtime.exec(servers[1], ["python3", "-c", dial], timeout=30)
        assert (code, out.strip()) == (0, "reached")  # an exec (probe) runs in the pod's network namespace
        assert await pods[1].probe_tcp(8765, 2.0) == (True, "")
        ok, msg = await pods[1].probe_tcp(8766, 2.0)
        assert not ok and msg == "dial tcp 127.0.0.1:8766: connect: connection refused"
        for srv in servers:
            await srv.stop(0)
    finally:
        for sb in pods:
            await sb.close()
    assert await pods[0].probe_tcp(8765, 1.0) == (False, "pod sandbox is gone")


async def test_pod_sandbox_http_probe_status_codes(runtime: ContainerRuntime, tmp_path: Path) -> None:
    serve = (
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        code = {'/ok': 200, '/moved': 302, '/bad': 500}.get(self.path, 404)\n"
        "        self.send_response(code)\n"
        "        if code == 302: self.send_header('Location', '/bad')\n"
        "        self.end_headers(); self.wfile.write(self.headers.get('User-Agent', '').encode())\n"
        "    def log_message(self, *a): pass\n"
        "print('up', flush=True)\n"
        "http.server.HTTPServer(('127.0.0.1', 8080), H).serve_forever()\n"
    )
    sb = await runtime.create_sandbox()
    try:
        srv = await runtime.start(make_launch(tmp_path, ["python3", "-c", serve], pod_sandbox=sb))
        await until(lambda: "up" in "".join(texts(srv)), "server up")
        headers = {"User-Agent": "kube-probe/1.35"}
        assert await sb.probe_http(8080, "/ok", 2.0, headers=headers) == (True, "kube-probe/1.35")
        assert await sb.probe_http(8080, "/bad", 2.0) == (False, "HTTP probe failed with statuscode: 500")
        assert await sb.probe_http(8080, "/moved", 2.0) == (False, "HTTP probe failed with statuscode: 500")
        ok, msg = await sb.probe_http(8081, "/", 2.0)
        assert not ok and "connection refused" in msg
        await srv.stop(0)
    finally:
        await sb.close()


@pytest.mark.parametrize(
    "holder, end",
    [("import time; time.sleep(60)", "cancelled"), ("import sys; sys.exit('no namespace')", "failed")],
)
def test_a_sandbox_that_never_came_up_leaves_no_process_and_no_open_pipe(
    any_runtime: ContainerRuntime, monkeypatch: pytest.MonkeyPatch, holder: str, end: str
) -> None:
    """A pod sandbox start that ends without a sandbox (its pod went, or the holder failed) reaps the holder
    and closes its pipes before the loop goes. Before, its transport was left open: the garbage collector
    closed it later, after the loop had closed ('Event loop is closed', an unraisable exception in whatever
    test then ran: seen in CI under tests/e2e/test_runner_unreachable.py)."""
    monkeypatch.setattr(runtime_module, "HOLDER_SCRIPT", holder)
    spawn, spawned = asyncio.create_subprocess_exec, []

    async def spawn_and_keep(*argv: str, **kw: Any) -> asyncio.subprocess.Process:
        spawned.append(await spawn(*argv, **kw))
        return spawned[-1]

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_and_keep)
    before = child_processes()

    async def start_and_end() -> None:
        task = asyncio.create_task(any_runtime.create_sandbox())
        if end == "cancelled":
            await until(lambda: spawned, "the holder started")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            with pytest.raises(RuntimeUnavailable, match="no namespace"):
                await task
        [holder_proc] = spawned
        assert holder_proc.returncode is not None  # reaped
        assert holder_proc.stdin is not None and holder_proc.stdin.is_closing()

    with no_process_leaks():
        asyncio.run(start_and_end())
    assert new_child_processes(before) == {}


def test_a_sandbox_close_cancelled_midway_still_closes_the_holder_s_transport(
    any_runtime: ContainerRuntime,
) -> None:
    """The local cluster's stop cancels a pod's teardown while its sandbox close waits for the killed holder:
    the holder's transport is closed all the same. Before, it stayed open and the garbage collector closed it
    after the loop had gone ('Event loop is closed' in CI, allocated by `create_sandbox` in a pod worker)."""
    before = child_processes()

    async def close_and_cancel() -> None:
        sandbox = await any_runtime.create_sandbox()
        closing = asyncio.create_task(sandbox.close())
        await asyncio.sleep(0)  # the close has killed the holder and waits for it
        closing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await closing

    with no_process_leaks():
        asyncio.run(close_and_cancel())
    deadline = time.monotonic() + 10
    while new_child_processes(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert new_child_processes(before) == {}  # the killed holder was reaped


@pytest.mark.parametrize("tty", [False, True])
def test_a_container_start_cancelled_while_its_sandbox_sets_up_leaves_no_process(
    any_runtime: ContainerRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tty: bool
) -> None:
    """The local cluster stops (its pod workers are cancelled) while a container's sandbox sets up: the
    process already spawned is killed and reaped, its pipes closed, as containerd removes a task whose start
    did not complete. Before, nobody held it: it ran on past the cluster's stop and the garbage collector
    closed its transport after the loop had gone ('Event loop is closed' in CI, allocated by
    `pod_workers._start` in tests/provider/test_hook_retry.py)."""
    before = child_processes()
    setting_up = asyncio.Event()
    spawned: list[int] = []

    async def never_ready(self: RunningContainer) -> None:
        spawned.append(self.pid)
        setting_up.set()
        await asyncio.sleep(3600)

    monkeypatch.setattr(RunningContainer, "_await_main", never_ready)

    async def start_and_cancel() -> None:
        launch = make_launch(tmp_path, sh("sleep 60"), tty=tty, stdin=True)
        starting = asyncio.create_task(any_runtime.start(launch))
        await asyncio.wait_for(setting_up.wait(), ENDS)
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        [pid] = spawned
        assert not alive(pid)  # killed and reaped before the cancelled start returned

    with no_process_leaks():
        asyncio.run(start_and_cancel())
    assert new_child_processes(before) == {}
