"""Bearer-token authentication and RBAC authorization for the local cluster (off unless enabled).

Roles are ordinary `rbac.authorization.k8s.io/v1` Role/ClusterRole dicts; `Rbac.grant(token, user, role,
namespace)` binds one to a token, like a RoleBinding to a ServiceAccount. Requests are mapped to verbs and
resources exactly as the API server's request-info resolver does, and refusals carry the real 403 message.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from .errors import ApiError

_METHOD_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass
class Binding:
    """A token's identity and the rules it holds, in one namespace (None: cluster-wide)."""

    user: str
    rules: list[dict[str, Any]] = field(default_factory=list)
    namespace: str | None = None


@dataclass(frozen=True)
class RequestInfo:
    """What a request asks to do, in RBAC's terms."""

    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    is_resource: bool

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def request_info(method: str, path: str, query: dict[str, str]) -> RequestInfo:
    """Resolve verb, group, resource, subresource, namespace and name from an API request."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return RequestInfo(method.lower(), "", "", "", "", "", False)
    watch = bool(rest) and rest[0] == "watch"
    if watch:
        rest = rest[1:]
    namespace = ""
    if (
        len(rest) >= 3
        and rest[0] == "namespaces"
        and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    elif len(rest) >= 2 and rest[0] == "namespaces":
        namespace = rest[1]
    if not rest:
        return RequestInfo(method.lower(), group, "", "", namespace, "", False)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        if watch or query.get("watch", "").lower() in ("true", "1"):
            verb = "watch"
        else:
            verb = "get" if name else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _METHOD_VERBS.get(method, method.lower())
    return RequestInfo(verb, group, resource, sub, namespace, name, True)


def _matches(values: list[str], wanted: str) -> bool:
    return "*" in values or wanted in values


def allows(rules: list[dict[str, Any]], info: RequestInfo) -> bool:
    """Whether any rule grants the request (apiGroups, resources incl. subresources, verbs, resourceNames)."""
    for rule in rules:
        if not _matches(rule.get("verbs") or [], info.verb):
            continue
        if not _matches(rule.get("apiGroups") or [], info.api_group):
            continue
        if not _matches(rule.get("resources") or [], info.full_resource):
            continue
        names = rule.get("resourceNames") or []
        if names and info.name not in names:
            continue
        return True
    return False


USER_INFO: ContextVar[dict[str, Any] | None] = ContextVar("user_info", default=None)
"""The user info of the request being served (each request runs in a task of its own)."""
ADMIN_USER: dict[str, Any] = {
    "username": "kruise-local-admin",
    "groups": ["system:masters", "system:authenticated"],
}
"""Who sends the requests of a cluster without authentication."""


def user_info(username: str) -> dict[str, Any]:
    """The user info a token authenticator gives `username`: a ServiceAccount's groups, as upstream's
    `serviceaccount.UserInfo` sets them, or only `system:authenticated`."""
    groups = ["system:authenticated"]
    parts = username.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}", *groups]
    return {"username": username, "groups": groups}


BASIC_USER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        "verbs": ["create"],
    },
    {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
]
"""the bootstrap ClusterRole `system:basic-user`, bound to `system:authenticated` (bootstrappolicy)"""


DISCOVERY_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/readyz",
    "/version",
    "/version/",
)
"""what `system:discovery` and `system:public-info-viewer` let every authenticated user GET"""


class Rbac:
    """Authenticates bearer tokens and authorizes each request against the token's bound rules."""

    def __init__(self) -> None:
        self.bindings: dict[str, list[Binding]] = {}

    def can(self, request: web.Request, info: RequestInfo) -> bool:
        """Whether the request's token may do what `info` says (the RBAC authorizer's decision, as
        SelfSubjectAccessReview asks it). Non-resource requests (discovery, /version, /healthz) are open to
        every authenticated user (`system:discovery`, `system:public-info-viewer`)."""
        header = request.headers.get("Authorization", "")
        bindings = self.bindings.get(header[7:] if header.startswith("Bearer ") else "") or []
        if not bindings:
            return False
        if not info.is_resource or allows(BASIC_USER_RULES, info):
            return True
        return any(
            allows(b.rules, info) for b in bindings if b.namespace is None or b.namespace == info.namespace
        )

    def rules_for(
        self, request: web.Request, namespace: str
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The RBAC authorizer's `RulesFor`: the token's resource rules that hold in `namespace` (cluster-wide
        bindings and those of the namespace) with `system:basic-user`'s, and the non-resource rules every
        authenticated user has (`system:discovery`, `system:public-info-viewer`)."""
        header = request.headers.get("Authorization", "")
        bindings = self.bindings.get(header[7:] if header.startswith("Bearer ") else "") or []
        rules = [dict(r) for r in BASIC_USER_RULES]
        for b in bindings:
            if b.namespace is None or b.namespace == namespace:
                rules += [dict(r) for r in b.rules]
        return rules, [{"verbs": ["get"], "nonResourceURLs": list(DISCOVERY_URLS)}]

    def grant(self, token: str, user: str, role: dict[str, Any], namespace: str | None = None) -> None:
        """Bind a Role's (namespace given) or ClusterRole's rules to `token`, as user `user`."""
        self.bindings.setdefault(token, []).append(Binding(user, list(role.get("rules") or []), namespace))

    def __call__(self, request: web.Request, verb: str | None = None) -> None:
        """Authenticate and authorize `request`; `verb` checks that verb instead of the one its method
        resolves to (the pod registry's compound `create` check of a WebSocket upgrade)."""
        header = request.headers.get("Authorization", "")
        token = header[7:] if header.startswith("Bearer ") else ""
        bindings = self.bindings.get(token)
        if not bindings:
            raise ApiError(401, "Unauthorized")
        user = bindings[0].user
        USER_INFO.set(user_info(user))
        info = request_info(request.method, request.path, dict(request.query))
        if verb is not None:
            info = replace(info, verb=verb)
        if self.can(request, info):
            return
        what = f"{info.full_resource}{'.' + info.api_group if info.api_group else ''}"
        subject = f'{what} "{info.name}"' if info.name else what
        where = f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
        raise ApiError(
            403,
            f'{subject} is forbidden: User "{user}" cannot {info.verb} resource "{info.full_resource}" '
            f'in API group "{info.api_group}"{where}',
            reason="Forbidden",
            kind=info.full_resource,
            name=info.name or None,
            group=info.api_group,
        )
