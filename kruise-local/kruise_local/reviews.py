"""What a user may do and who they are, asked of the API server itself: `SelfSubjectAccessReview`
(`authorization.k8s.io/v1`, `kubectl auth can-i`;
`pkg/registry/authorization/selfsubjectaccessreview/rest.go`; SelfSubjectRulesReview for `can-i --list`)
and `SelfSubjectReview` (`authentication.k8s.io/v1`, `kubectl auth whoami`;
`pkg/registry/authentication/selfsubjectreview/rest.go`). Neither is stored: a create answers at once.

The decision is the cluster's authorizer's: everything is allowed without RBAC (the local cluster then runs
as an AlwaysAllow server, every request as `kruise-local-admin` in `system:masters`); with RBAC, `Rbac.can`
decides for the reviewing token, as the RBAC authorizer would for the request the review describes.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import resources as R
from .decoding import read_body
from .errors import ApiError, invalid
from .rbac import ADMIN_USER, USER_INFO, RequestInfo
from .responses import json_response
from .validation import required


async def serve(request: web.Request, res: R.Resource, name: str | None, authorizer: Any) -> web.Response:
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
    if res is R.SELF_SUBJECT_REVIEWS:
        user = USER_INFO.get() or ADMIN_USER
        out["status"] = {"userInfo": {"username": user["username"], "groups": list(user["groups"])}}
        return json_response(out, 201)
    spec = body.get("spec") if isinstance(body.get("spec"), dict) else {}
    out["spec"] = spec
    if res is R.SELF_SUBJECT_RULES_REVIEWS:
        out["status"] = _rules(request, str(spec.get("namespace") or ""), authorizer)
    else:
        out["status"] = _decide(request, spec, authorizer)
    return json_response(out, 201)


def _rules(request: web.Request, namespace: str, authorizer: Any) -> dict[str, Any]:
    """`SelfSubjectRulesReview` (`kubectl auth can-i --list`): the rules the authorizer's `RulesFor` gives the
    user in `namespace`; AlwaysAllow's are `*` on everything (`alwaysAllowAuthorizer.RulesFor`)."""
    if authorizer is None:
        everything = {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}
        return {
            "resourceRules": [everything],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        }
    rules_for = getattr(authorizer, "rules_for", None)
    if rules_for is None:
        return {"resourceRules": [], "nonResourceRules": [], "incomplete": True}
    resource, non_resource = rules_for(request, namespace)
    return {"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": False}


def _decide(request: web.Request, spec: dict[str, Any], authorizer: Any) -> dict[str, Any]:
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
        info = RequestInfo(str(non.get("verb") or ""), "", "", "", "", "", False)
    if authorizer is None:
        return {"allowed": True}
    can = getattr(authorizer, "can", None)
    if can is None:
        return {
            "allowed": False,
            "evaluationError": "the cluster's authorizer answers requests only, not reviews",
        }
    return {"allowed": bool(can(request, info))}
