"""A reverse proxy in front of the local cluster for faults its own hook cannot make.

`LocalCluster.fault` answers a request with an error *before* the cluster acts on it. A real network also
loses answers *after* the server acted (a proxy or load balancer timing out: 504), throttles with a
Retry-After header, and cuts long streams. `FaultyProxy` forwards every request to the cluster and applies
such faults to the requests its rules match.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import aiohttp
import yaml
from aiohttp import web

Action = Literal["throttle", "lose", "cut"]


@dataclass
class Rule:
    """Apply `action` to the next `times` requests with this method whose path contains `path`.

    - ``throttle``: answer 429 with ``Retry-After: <retry_after>`` without forwarding;
    - ``lose``: forward, let the cluster act, then answer 504 instead of its answer;
    - ``cut``: forward and stream the answer, then drop the connection after its first line.
    """

    method: str
    path: str
    action: Action
    times: int = 1
    retry_after: int = 1
    query: str = ""
    """a substring the query string must contain as well (e.g. ``watch=true``)"""

    def matches(self, request: web.Request) -> bool:
        return (
            self.times > 0
            and request.method == self.method
            and self.path in request.path
            and self.query in request.query_string.lower()
        )


class FaultyProxy:
    """Serves on loopback in a thread; `rules` may be changed at any time; `applied` logs what was done."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.rules: list[Rule] = []
        self.applied: list[tuple[Action, str, str]] = []
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        rule = next((r for r in self.rules if r.matches(request)), None)
        if rule is not None:
            rule.times -= 1
            self.applied.append((rule.action, request.method, request.path_qs))
        if rule is not None and rule.action == "throttle":
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": "Too many requests, please try again later.",
                    "reason": "TooManyRequests",
                    "details": {"retryAfterSeconds": rule.retry_after},
                    "code": 429,
                },
                status=429,
                headers={"Retry-After": str(rule.retry_after)},
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        body = await request.read()
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session,
            session.request(
                request.method, self.upstream + request.path_qs, headers=headers, data=body or None
            ) as upstream,
        ):
            if rule is not None and rule.action == "lose":
                await upstream.read()  # the cluster has acted; its answer is lost on the way back
                return web.json_response(
                    {"kind": "Status", "status": "Failure", "message": "gateway timeout", "code": 504},
                    status=504,
                )
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            async for line in upstream.content:
                await response.write(line)
                if rule is not None and rule.action == "cut":
                    assert request.transport is not None
                    request.transport.abort()
                    return response
            await response.write_eof()
            return response

    def start(self) -> FaultyProxy:
        ready: Future[str] = Future()

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)

            async def setup() -> str:
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0, shutdown_timeout=0.2)
                await site.start()
                return f"http://127.0.0.1:{runner.addresses[0][1]}"

            ready.set_result(loop.run_until_complete(setup()))
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            # a request still streaming (a watch, a log follow: the proxy sees its client leave only when it
            # writes) is cancelled and awaited: destroyed pending with the loop, its `async with` could not
            # exit ("coroutine ignored GeneratorExit", an unraisable exception in whichever test came next)
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:  # (gather of nothing asks for the thread's current loop, which this thread has not)
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=main, name="faulty-proxy", daemon=True)
        self._thread.start()
        self.url = ready.result(timeout=30)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)

    def write_kubeconfig(self, kubeconfig: dict, path: Path) -> Path:
        """`kubeconfig` (a cluster's) pointed at this proxy, written to `path`."""
        config = {
            **kubeconfig,
            "clusters": [{**c, "cluster": {"server": self.url}} for c in kubeconfig["clusters"]],
        }
        path.write_text(yaml.safe_dump(config))
        return path


@contextmanager
def faulty_proxy(upstream: str) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(upstream).start()
    try:
        yield proxy
    finally:
        proxy.stop()
