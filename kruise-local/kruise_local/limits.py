"""What one request or one connection may make the local API server hold, as kube-apiserver bounds it.

Each limit cites where the real server sets it:

* JSON patch: at most `MAX_JSON_PATCH_OPERATIONS` operations (`endpoints/handlers/patch.go`,
  `maxJSONPatchOperations`, a 413), and `copy` operations may add at most `JSON_PATCH_MAX_COPY_BYTES` in
  total (`server/config.go` `JSONPatchMaxCopyBytes`, handed to evanphx/json-patch as
  `AccumulatedCopySizeLimit`, a 422), so a small patch cannot grow an object exponentially (CVE-2019-1002100).
* An object larger than etcd's `--max-request-bytes` (1.5 MiB) is not stored: etcd answers
  `etcdserver: request is too large` and the API server passes it on as a 500.
* Requests that are not long-running (`long_running`: watches, exec, attach, port-forward, proxy and log
  sessions are) end after `REQUEST_TIMEOUT` seconds with a 504 (`server/filters/timeout.go`
  `WithTimeoutForNonLongRunningRequests`, `--request-timeout`); at most `MAX_REQUESTS_IN_FLIGHT` of them run
  at once, others get a 429 (`server/filters/maxinflight.go` `WithMaxInFlightLimit`,
  `--max-requests-inflight`).
* A watch without `timeoutSeconds` ends after a random time in [min, 2 x min) of `MIN_REQUEST_TIMEOUT`
  (`endpoints/handlers/get.go` `ListResource`); a watcher that does not keep up with its events is closed
  (`storage/cacher/cache_watcher.go`, a full result channel terminates the watcher); what waits for a client
  that does not read is bounded per connection (`write_streamed`, `watches.py`).
* An idle connection, or one whose request never completes its headers, is closed after
  `IDLE_CONNECTION_TIMEOUT` seconds (`server/secure_serving.go`: `IdleTimeout` 90 s; `ReadHeaderTimeout` is
  32 s there, the local server closes a half-sent request with the idle timer).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .errors import ApiError

MAX_JSON_PATCH_OPERATIONS = 10_000
JSON_PATCH_MAX_COPY_BYTES = 3 * 1024 * 1024
MAX_OBJECT_BYTES = 3 * 1024 * 1024 // 2
REQUEST_TIMEOUT = 60.0
MIN_REQUEST_TIMEOUT = 1800
MAX_REQUESTS_IN_FLIGHT = 400 + 200  # --max-requests-inflight + --max-mutating-requests-inflight
WATCH_CHANNEL_SIZE = 1024  # cacher's maxWatchChanSizeWithoutIndex
IDLE_CONNECTION_TIMEOUT = 90.0
SHUTDOWN_GRACE = 0.5
"""seconds a stopping server gives its in-flight requests to end before it cancels them (then as long again
before aiohttp's own shutdown of the connections)"""
WATCH_WRITE_CHUNK = 4 * 1024
WATCH_WRITE_BUFFER = 4 * 1024
"""bytes a watch connection's buffer may hold before its writer waits (Go's server blocks in `Write` past
its 4 KiB `bufio.Writer`)"""


def json_size(value: Any) -> int:
    """Bytes of `value` encoded as compact JSON (what json-patch counts for a copy)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def check_json_patch_length(ops: list[Any]) -> None:
    """413 for a JSON patch with more operations than the real server applies."""
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise ApiError(
            413,
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}",
            reason="RequestEntityTooLarge",
        )


class CopyBudget:
    """The bytes a JSON patch's `copy` operations may still add (json-patch's accumulated copy size)."""

    def __init__(self, limit: int = JSON_PATCH_MAX_COPY_BYTES) -> None:
        self.limit = limit
        self.used = 0

    def spend(self, value: Any) -> None:
        self.used += json_size(value)
        if self.used > self.limit:
            raise ApiError(
                422,
                f"Unable to complete the copy, the accumulated size increase of copy is {self.used}, "
                f"exceeding the limit {self.limit}",
                reason="Invalid",
            )


def check_object_size(obj: Any) -> None:
    """500 as etcd refuses it: an object larger than etcd's request size limit is never stored."""
    if json_size(obj) > MAX_OBJECT_BYTES:
        raise ApiError(500, "etcdserver: request is too large", reason="InternalError")


def watch_timeout(timeout_seconds: int | None) -> float:
    """How long a watch runs: its `timeoutSeconds` (a negative one: not at all, as the timer of a negative
    duration fires at once in `ListResource`), else (none or 0) a random time in [min, 2 x min) request
    timeout."""
    if timeout_seconds:
        return float(timeout_seconds)
    return MIN_REQUEST_TIMEOUT * (random.random() + 1.0)


class WriteStalled(Exception):
    """A long-running response's client stopped reading until the response's deadline."""


async def write_streamed(
    resp: web.StreamResponse, request: web.Request, data: bytes, deadline: float
) -> None:
    """Write to a streamed response in `WATCH_WRITE_CHUNK` slices of `data` (shared, never copied whole),
    waiting after each for the connection's buffer to drain below its limit (the watch sets the transport's
    high-water mark to `WATCH_WRITE_BUFFER`); gives up at `deadline` (loop time) when the client does not
    read."""
    remaining = deadline - asyncio.get_running_loop().time()
    view = memoryview(data)
    try:
        async with asyncio.timeout(max(remaining, 0.001)):
            for start in range(0, len(view), WATCH_WRITE_CHUNK):
                await resp.write(view[start : start + WATCH_WRITE_CHUNK])
                await request.writer.drain()
    except TimeoutError:
        raise WriteStalled from None


LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
"""kube-apiserver's `LongRunningFunc` (`pkg/controlplane/apiserver/config.go` `BuildGenericConfig`):
`BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"), sets.NewString("attach", "exec", "proxy",
"log", "portforward"))`"""


def long_running(request: web.Request) -> bool:
    """Whether the request outlives the request timeout and the in-flight limit, as apiserver's
    `BasicLongRunningRequestCheck` (`server/filters/longrunning.go`) decides from the request's info
    (`endpoints/request/requestinfo.go` `NewRequestInfo`): a watch (the `/watch/` prefix, or a GET of a
    collection with `watch=true`), or a resource request for one of the long-running subresources, whatever
    its method and query: an exec or attach session, a port-forward, a proxy, a log (followed or not)."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        rest = parts[3:]
    else:
        return False
    if rest[:1] and rest[0] in LONG_RUNNING_VERBS:
        return True  # the special verbs' path prefix
    if len(rest) > 2 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        rest = rest[2:]  # a namespaced resource (else the namespace itself, or its subresource)
    if len(rest) == 1 and request.method in ("GET", "HEAD"):  # a list, or a watch
        return request.query.get("watch", "").lower() in ("true", "1")
    return len(rest) >= 3 and rest[2] in LONG_RUNNING_SUBRESOURCES


def request_limits(
    timeout: float = REQUEST_TIMEOUT, in_flight: int = MAX_REQUESTS_IN_FLIGHT
) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware bounding the time and the number of concurrent requests that are not long-running."""
    running = 0

    @web.middleware
    async def limits(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        nonlocal running
        if long_running(request):
            return await handler(request)
        if running >= in_flight:
            raise ApiError(429, "Too many requests, please try again later.", reason="TooManyRequests")
        running += 1
        try:
            async with asyncio.timeout(timeout):
                return await handler(request)
        except TimeoutError:
            raise ApiError(
                504,
                "Timeout: request did not complete within requested timeout - context deadline exceeded",
                reason="Timeout",
            ) from None
        finally:
            running -= 1

    return limits
