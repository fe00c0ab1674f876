"""How long the hooks wait on the API server: every request is bounded (`ApiTimeouts`, `bound`).

cncf.kubernetes' clients give each request 60 s in all (connect, headers and body together), whatever it is,
and urllib3 under the sync client tries a request that timed out three more times on its own: a server that
accepts the connection and never answers held one `read_pod` 4 min, and the hook's six tries 24 min. A watch
got the same 60 s, so a quiet watch window of 60 s or more raced the client's timer (cncf.kubernetes reads a
`timeout_seconds` keyword the generated clients never pass: it is a query parameter), and a log follow in the
triggerer had no read timeout at all. Here each request gets a connect timeout and a read timeout (no byte
for that long) that fit what it is, and the hook's `RetryPolicy` is the only layer that tries again (logged).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_kruise_chain.hooks.retry import describe


@dataclass(frozen=True)
class ApiTimeouts:
    """Seconds a request may wait on the API server, by kind of request."""

    connect: float = 10.0
    """to connect (TCP, and TLS for the sync client's exec); client-go's TLS handshake timeout is 10 s"""
    read: float = 60.0
    """with no byte of an answer: the API server ends any request that is not a watch or a stream after its
    own `--request-timeout` (1 min by default), so no answer comes later than that"""
    watch_grace: float = 5.0
    """a watch's read timeout is its `timeoutSeconds` (the server ends it then) plus this"""
    idle_stream: float = 60.0
    """a log follow silent that long ends (read timeout); the follow reads the pod and opens it again, so a
    stalled stream cannot hold a stage's end, and a silent stage costs a request a minute"""

    def of(self, query_params: Iterable[tuple[str, Any]] | None) -> tuple[float, float]:
        """(connect, read) for a request with these query parameters (as the generated clients pass them)."""
        query = dict(query_params or ())
        if query.get("watch"):
            return self.connect, float(query.get("timeoutSeconds") or self.read) + self.watch_grace
        if query.get("follow"):
            return self.connect, self.idle_stream
        return self.connect, self.read


def bound(api: Any, timeouts: ApiTimeouts) -> Any:
    """`api` (a sync or async `ApiClient`, one the hook made for itself) with `timeouts` on every request that
    does not set its own, and, for the sync client, no retry of urllib3's under the hook's own."""
    call = api.call_api

    def call_api(*args: Any, **kw: Any) -> Any:  # (resource_path, method, path_params, query_params, ...)
        if kw.get("_request_timeout") is None:
            kw["_request_timeout"] = timeouts.of(kw.get("query_params", args[3] if len(args) > 3 else None))
        return call(*args, **kw)

    api.call_api = call_api
    pool = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if pool is not None and hasattr(pool, "connection_pool_kw"):  # urllib3 (the sync client)
        pool.connection_pool_kw["retries"] = False
    return api


def log_stream_end(log: Any, error: BaseException, what: str, idle: float) -> None:
    """Say why a log follow of `what` ended before its container did: nothing came for `idle` s (the
    caller reads the pod and follows again), or the connection was cut."""
    from urllib3.exceptions import TimeoutError as Urllib3TimeoutError

    if isinstance(error, (TimeoutError, Urllib3TimeoutError)):
        log.info("Kubernetes API: no output on the log stream of %s for %gs: following it again", what, idle)
    else:
        log.warning("Kubernetes API: log stream of %s cut (%s)", what, describe(error))
