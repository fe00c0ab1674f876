"""The API server's request filters (`apiserver/pkg/endpoints/filters`, `apiserver/pkg/server/filters`):
request counts, authentication, authorization, the audit log, and fault injection for tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from aiohttp import web

from .authn import ANONYMOUS, Authenticator, impersonate
from .errors import ApiError
from .rbac import USER_INFO, RbacAuthorizer, RequestInfo, UserInfo, forbidden, request_info, with_verb


class Filters:
    """What runs around every request before and after its handler."""

    def __init__(self, authenticator: Authenticator) -> None:
        self.requests: Counter[str] = Counter()
        self.audit: list[tuple[str, str, int]] = []
        """(method, path, status code) of every write request, as an audit log would show them"""
        self.fault: Callable[[web.Request], ApiError | None] | None = None
        self.authenticator = authenticator
        self.authorizer: RbacAuthorizer | None = None
        """`--authorization-mode`: None is AlwaysAllow, else RBAC"""

    def count_request(self, request: web.Request) -> None:
        self.requests[f"{request.method} {request.path}"] += 1

    async def authenticate(self, request: web.Request) -> None:
        """`WithAuthentication`, then `WithImpersonation`: the request's user (USER_INFO), or a 401 (a 403
        for an impersonation the requestor may not)."""
        user = self.authenticator.authenticate(request, strict=self.authorizer is not None)
        USER_INFO.set(impersonate(request, user, self.allows))

    def allows(self, user: UserInfo, info: RequestInfo) -> tuple[bool, str]:
        """The authorizer's decision and reason (everything is allowed without one)."""
        return (True, "") if self.authorizer is None else self.authorizer.authorize(user, info)

    async def authorize(self, request: web.Request, verb: str | None = None) -> None:
        """`WithAuthorization`: the request as its method resolves or, with `verb`, for that verb (a compound
        check); a 403 when the authorizer does not allow it."""
        if self.authorizer is None:
            return
        info = request_info(request.method, request.path, request.query)
        if verb is not None:
            info = with_verb(info, verb)
        user = USER_INFO.get() or ANONYMOUS
        allowed, reason = self.authorizer.authorize(user, info)
        if not allowed:
            raise forbidden(user, info, reason)

    async def inject_fault(self, request: web.Request) -> None:
        if self.fault is not None:
            err = self.fault(request)
            if err is not None:
                raise err
