"""What a user may do and who they are, asked of the API server itself: `SelfSubjectAccessReview`
(`authorization.k8s.io/v1`, `kubectl auth can-i`;
`pkg/registry/authorization/selfsubjectaccessreview/rest.go`; SelfSubjectRulesReview for `can-i --list`)
and `SelfSubjectReview` (`authentication.k8s.io/v1`, `kubectl auth whoami`;
`pkg/registry/authentication/selfsubjectreview/rest.go`). Neither is stored: a create answers at once.

The decision is the cluster's authorizer's: everything is allowed without RBAC (AlwaysAllow); with RBAC,
the RBAC authorizer decides for the reviewing user, as it would for the request the review describes
(`rbac.RbacAuthorizer`), and `RulesFor` lists that user's rules in a namespace.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import resources as R
from .decoding import read_body
from .errors import ApiError, invalid
from .filters import Filters
from .rbac import ADMIN_USER, USER_INFO, RequestInfo, UserInfo
from .responses import json_response
from .validation import required


async def serve(request: web.Request, res: R.Resource, name: str | None, filters: Filters) -> web.Response:
    """A create of `res` (a review); any other verb is a 405, as the review storages implement Create only."""
    if request.method != "POST" or name is not None:
        raise ApiError(
            405, f"{request.method} is not allowed on {res.plural}.{res.group}", reason="MethodNotAllowed"
        )
    body = await read_body(request)
    if not isinstance(body, dict) or body.get("kind") not in (None, res.kind):
        raise ApiError(400, f"the body of the request must be a {res.api_version()} {res.kind}")
    if body.get("apiVersion") not in (None, res.api_version()):
        raise ApiError(
            400, f"the API version in the data ({body.get('apiVersion')}) does not match {res.api_version()}"
        )
    out = {"kind": res.kind, "apiVersion": res.api_version(), "metadata": {"creationTimestamp": None}}
    user = USER_INFO.get() or ADMIN_USER
    if res is R.SELF_SUBJECT_REVIEWS:
        info = {"username": user["username"], "groups": list(user["groups"])}
        if user.get("uid"):
            info["uid"] = user["uid"]
        if user.get("extra"):
            info["extra"] = {k: list(v) for k, v in user["extra"].items()}
        out["status"] = {"userInfo": info}
        return json_response(out, 201)
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    out["spec"] = spec
    if res is R.SELF_SUBJECT_RULES_REVIEWS:
        out["status"] = _rules(user, str(spec.get("namespace") or ""), filters)
    else:
        out["status"] = _decide(user, spec, filters)
    return json_response(out, 201)


def _rules(user: UserInfo, namespace: str, filters: Filters) -> dict[str, Any]:
    """`SelfSubjectRulesReview` (`kubectl auth can-i --list`): the rules the authorizer's `RulesFor` gives the
    user in `namespace`; AlwaysAllow's are `*` on everything (`alwaysAllowAuthorizer.RulesFor`)."""
    if filters.authorizer is None:
        everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
        return {
            "resourceRules": [everything],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    resource, non_resource = filters.authorizer.rules_for(user, namespace)
    return {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": False}


def _decide(user: UserInfo, spec: dict[str, Any], filters: Filters) -> dict[str, Any]:
    """`ValidateSelfSubjectAccessReviewSpec` (exactly one of the attribute kinds), then the authorizer."""
    attrs, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (attrs is None) == (non is None) or not isinstance(attrs or non, dict):
        cause = required(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )
        raise invalid("SelfSubjectAccessReview", "", [cause], group="authorization.k8s.io")
    if attrs is not None:
        info = RequestInfo(
            verb=str(attrs.get("verb") or ""),
            api_group=str(attrs.get("group") or ""),
            resource=str(attrs.get("resource") or ""),
            subresource=str(attrs.get("subresource") or ""),
            namespace=str(attrs.get("namespace") or ""),
            name=str(attrs.get("name") or ""),
            is_resource=True,
        )
    else:
        info = RequestInfo(str(non.get("verb") or ""), "", "", "", "", "", False, str(non.get("path") or ""))
    allowed, reason = filters.allows(user, info)
    return {"allowed": allowed, **({"reason": reason} if reason else {})}
