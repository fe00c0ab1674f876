"""The API server's request filters (`apiserver/pkg/endpoints/filters`, `apiserver/pkg/server/filters`):
request counts, authorization, the audit log, and fault injection for tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from aiohttp import web

from .errors import ApiError


class Filters:
    """What runs around every request before and after its handler."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.audit: list[tuple[str, str, int]] = []
        """(method, path, status code) of every write request, as an audit log would show them"""
        self.fault: Callable[[web.Request], ApiError | None] | None = None
        self.authorizer: Callable[..., None] | None = None
        """called with the request, and `verb=` for a check of another verb than the request's own"""

    def count_request(self, request: web.Request) -> None:
        self.requests[f"{request.method} {request.path}"] += 1

    async def authorize(self, request: web.Request, verb: str | None = None) -> None:
        """Authorize the request, as its method resolves or, with `verb`, for that verb (a compound check)."""
        if self.authorizer is not None:
            self.authorizer(request) if verb is None else self.authorizer(request, verb=verb)

    async def inject_fault(self, request: web.Request) -> None:
        if self.fault is not None:
            err = self.fault(request)
            if err is not None:
                raise err
