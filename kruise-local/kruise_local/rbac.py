"""The RBAC authorizer over the cluster's `rbac.authorization.k8s.io/v1` objects, as kube-apiserver's.

A request is resolved into attributes (`apiserver/pkg/endpoints/request/requestinfo.go` `NewRequestInfo`:
verb, API group, resource, subresource, namespace, name, or a non-resource path); the RBAC authorizer
(`plugin/pkg/auth/authorizer/rbac/rbac.go` `Authorize`) visits the rules of every ClusterRoleBinding, then
of every RoleBinding of the request's namespace, whose subjects name the user (`rbac/validation/rule.go`
`VisitRulesFor`, `appliesToUser`), and allows the request when one rule matches it (`RuleAllows`: verbs,
API groups, resources with `*` and `*/subresource`, resourceNames, non-resource URLs with a trailing `*`). A
binding whose role is missing contributes nothing (its error only joins the denial's reason). Members of
`system:masters` are allowed everything before RBAC is asked (`pkg/kubeapiserver/authorizer/config.go`:
the privileged-groups authorizer heads the union). A refusal is the 403 of `responsewriters.Forbidden`.

The escalation check of the role and binding registries (`ConfirmNoEscalation`: the writer must already
hold every rule it grants, `Covers`) lives here too, with the `CompactRules` form its message lists.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from . import resources as R
from .errors import ApiError
from .store import Obj, Store
from .validation.rbac import path_segment_problems

_METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch"}
MASTERS = "system:masters"
"""`user.SystemPrivilegedGroup`: allowed everything, and never held to the escalation check"""

UserInfo = dict[str, Any]
"""`user.Info` as the admission request's `userInfo` carries it: username, uid, groups, extra"""

USER_INFO: ContextVar[UserInfo | None] = ContextVar("user_info", default=None)
"""The user of the request being served (each request runs in a task of its own)."""
ADMIN_USER: UserInfo = {
    "username": "kruise-local-admin",
    "uid": "",
    "groups": [MASTERS, "system:authenticated"],
    "extra": {},
}
"""Who the admin's static token authenticates as, and who sends a request no authenticator claims while the
cluster authorizes nothing (AlwaysAllow)."""


@dataclass(frozen=True)
class RequestInfo:
    """What a request asks to do, in the authorizer's terms (`authorizer.Attributes`)."""

    verb: str
    api_group: str
    resource: str
    subresource: str
    namespace: str
    name: str
    is_resource: bool
    path: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _name_from_field_selector(selector: str) -> str:
    """`FieldSelector.RequiresExactMatch("metadata.name")` of a list or watch, when it is a valid name."""
    for term in selector.split(","):
        key, op, value = term.partition("==") if "==" in term else term.partition("=")
        if op and key.strip() == "metadata.name" and not key.strip().endswith("!"):
            value = value.strip()
            return value if value and not path_segment_problems(value) else ""
    return ""


def request_info(method: str, path: str, query: Mapping[str, str]) -> RequestInfo:
    """`NewRequestInfo`: the verb (get/list/watch, create, update, patch, delete/deletecollection), API
    group, resource, subresource, namespace and name of an API request; anything else is a non-resource
    request for its path (`/version`, `/healthz`, `/openapi/v2`, discovery)."""
    parts = [p for p in path.split("/") if p]
    verb = _METHOD_VERBS.get(method, method.lower())
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return RequestInfo(verb, "", "", "", "", "", False, path)
    watch_path = rest[0] == "watch"
    if watch_path:
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces":
        if len(rest) > 1:
            namespace = rest[1]
            if len(rest) > 2 and rest[2] not in ("status", "finalize"):
                rest = rest[2:]
    if not rest:  # e.g. /api/v1/watch: not a resource
        return RequestInfo(verb, group, "", "", namespace, "", False, path)
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if str(query.get("watch", "")).lower() not in ("", "false", "0") else "list"
    if not name and verb in ("list", "watch"):
        name = _name_from_field_selector(str(query.get("fieldSelector", "")))
    if not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, group, resource, sub, namespace, name, True, path)


# -- RuleAllows (pkg/apis/rbac/v1/evaluation_helpers.go) --------------------------------------------------
def _strings(rule: Mapping[str, Any], key: str) -> list[str]:
    value = rule.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


def _resource_matches(rule: Mapping[str, Any], combined: str, subresource: str) -> bool:
    """`ResourceMatches`: `*`, the exact `resource[/subresource]`, or `*/subresource`."""
    for wanted in _strings(rule, "resources"):
        if wanted in ("*", combined):
            return True
        if subresource and wanted == f"*/{subresource}":
            return True
    return False


def _url_matches(rule: Mapping[str, Any], path: str) -> bool:
    """`NonResourceURLMatches`: `*`, the exact path, or a prefix ending in `*`."""
    for url in _strings(rule, "nonResourceURLs"):
        if url in ("*", path) or (url.endswith("*") and path.startswith(url.rstrip("*"))):
            return True
    return False


def rule_allows(info: RequestInfo, rule: Mapping[str, Any]) -> bool:
    """`RuleAllows`: whether one PolicyRule grants the request."""
    verbs = _strings(rule, "verbs")
    if "*" not in verbs and info.verb not in verbs:
        return False
    if not info.is_resource:
        return _url_matches(rule, info.path)
    groups = _strings(rule, "apiGroups")
    if "*" not in groups and info.api_group not in groups:
        return False
    if not _resource_matches(rule, info.full_resource, info.subresource):
        return False
    names = _strings(rule, "resourceNames")
    return not names or info.name in names


# -- the rule resolver (pkg/registry/rbac/validation/rule.go) ---------------------------------------------
def applies_to_user(user: UserInfo, subject: Mapping[str, Any], namespace: str) -> bool:
    """`appliesToUser`: a User by name, a Group by membership, a ServiceAccount by its username (its
    namespace, when unset, the binding's)."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return user.get("username") == name
    if kind == "Group":
        return name in (user.get("groups") or ())
    if kind == "ServiceAccount":
        sa_namespace = subject.get("namespace") or namespace
        return bool(sa_namespace) and user.get("username") == f"system:serviceaccount:{sa_namespace}:{name}"
    return False


def _describe(binding: Obj, subject: Mapping[str, Any]) -> str:
    """The source a rule came from, as `clusterRoleBindingDescriber` / `roleBindingDescriber` print it."""
    meta, ref = binding["metadata"], binding.get("roleRef") or {}
    namespace = meta.get("namespace") or ""
    if subject.get("kind") == "ServiceAccount":
        who = f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or namespace}"'
    else:
        who = f'{subject.get("kind")} "{subject.get("name")}"'
    if namespace:
        return f'RoleBinding "{meta["name"]}/{namespace}" of {ref.get("kind")} "{ref.get("name")}" to {who}'
    return f'ClusterRoleBinding "{meta["name"]}" of {ref.get("kind")} "{ref.get("name")}" to {who}'


class RuleResolver:
    """`DefaultRuleResolver` over the store: through the authorizer's listers (`listers=True`: a missing role
    is a lister's NotFound, `role.rbac.authorization.k8s.io "x" not found`) or the registry's storage (the
    escalation check: `roles.rbac.authorization.k8s.io "x" not found`)."""

    def __init__(self, store: Store, listers: bool = False) -> None:
        self.store = store
        self.listers = listers

    def role_reference_rules(self, ref: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
        """`GetRoleReferenceRules`: the rules of a binding's Role (in the binding's namespace) or
        ClusterRole; LookupError when it does not exist."""
        kind, name = ref.get("kind"), str(ref.get("name") or "")
        if kind == "Role":
            role = self.store.peek(R.ROLES, namespace, name)
        elif kind == "ClusterRole":
            role = self.store.peek(R.CLUSTER_ROLES, "", name)
        else:
            raise ValueError(f'unsupported role reference kind: "{kind}"')
        if role is None:
            what = str(kind).lower() if self.listers else f"{str(kind).lower()}s"
            raise LookupError(f'{what}.rbac.authorization.k8s.io "{name}" not found')
        return [r for r in role.get("rules") or () if isinstance(r, dict)]

    def visit_rules_for(
        self, user: UserInfo, namespace: str
    ) -> Iterator[tuple[str, dict[str, Any] | None, str | None]]:
        """`VisitRulesFor`: (source, rule, None) for each rule that holds for `user` in `namespace` (the
        ClusterRoleBindings', then the namespace's RoleBindings'), (source, None, error) for a binding whose
        role cannot be found."""
        scopes = [(R.CLUSTER_ROLE_BINDINGS, "")]
        if namespace:
            scopes.append((R.ROLE_BINDINGS, namespace))
        for res, ns in scopes:
            for binding in self.store.items(res, ns):
                subject = next(
                    (
                        s
                        for s in binding.get("subjects") or ()
                        if isinstance(s, dict) and applies_to_user(user, s, ns)
                    ),
                    None,
                )
                if subject is None:
                    continue
                source = _describe(binding, subject)
                try:
                    rules = self.role_reference_rules(binding.get("roleRef") or {}, ns)
                except (LookupError, ValueError) as e:
                    yield source, None, str(e)
                    continue
                for rule in rules:
                    yield source, rule, None

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], list[str]]:
        """`RulesFor`: every rule that holds, and the errors met resolving them."""
        rules, errors = [], []
        for _, rule, err in self.visit_rules_for(user, namespace):
            if rule is not None:
                rules.append(rule)
            if err is not None:
                errors.append(err)
        return rules, errors


class RbacAuthorizer:
    """The cluster's authorizers with `--authorization-mode=RBAC`: privileged groups, then RBAC."""

    def __init__(self, store: Store) -> None:
        self.resolver = RuleResolver(store, listers=True)

    def authorize(self, user: UserInfo, info: RequestInfo) -> tuple[bool, str]:
        """(allowed, reason): `system:masters` at once, else the first RBAC rule that allows the request
        (`authorizingVisitor`); a denial's reason names the bindings whose roles were missing."""
        if MASTERS in (user.get("groups") or ()):
            return True, ""
        errors = []
        for source, rule, err in self.resolver.visit_rules_for(user, info.namespace):
            if rule is not None and rule_allows(info, rule):
                return True, f"RBAC: allowed by {source}"
            if err is not None:
                errors.append(err)
        return False, f"RBAC: {_aggregate(errors)}" if errors else ""

    def rules_for(self, user: UserInfo, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """`RBACAuthorizer.RulesFor`: resource rules and non-resource rules (the self rules review)."""
        rules, _ = self.resolver.rules_for(user, namespace)
        if MASTERS in (user.get("groups") or ()):  # the privileged-groups authorizer's `RulesFor`
            rules = [
                {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
                {"verbs": ["*"], "nonResourceURLs": ["*"]},
                *rules,
            ]
        resource = [
            {k: list(r[k]) for k in ("verbs", "apiGroups", "resources", "resourceNames") if r.get(k)}
            for r in rules
            if r.get("resources")
        ]
        non_resource = [
            {"verbs": list(r.get("verbs") or ()), "nonResourceURLs": list(r["nonResourceURLs"])}
            for r in rules
            if r.get("nonResourceURLs")
        ]
        return resource, non_resource


def _aggregate(errors: list[str]) -> str:
    """`utilerrors.NewAggregate(errs).Error()`."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def forbidden(user: UserInfo, info: RequestInfo, reason: str = "") -> ApiError:
    """`responsewriters.Forbidden`: `forbiddenMessage` of the attributes, then the authorizer's reason."""
    username = user.get("username", "")
    if not info.is_resource:
        message = f'forbidden: User "{username}" cannot {info.verb} path "{info.path}"'
        return ApiError(403, message + (f": {reason}" if reason else ""), reason="Forbidden")
    where = f' in the namespace "{info.namespace}"' if info.namespace else " at the cluster scope"
    text = (
        f'User "{username}" cannot {info.verb} resource "{info.full_resource}" in API group '
        f'"{info.api_group}"{where}' + (f": {reason}" if reason else "")
    )
    what = info.full_resource + (f".{info.api_group}" if info.api_group else "")
    subject = f'{what} "{info.name}"' if info.name else what
    return ApiError(
        403,
        f"{subject} is forbidden: {text}",
        reason="Forbidden",
        kind=info.full_resource,
        name=info.name or None,
        group=info.api_group,
    )


def with_verb(info: RequestInfo, verb: str) -> RequestInfo:
    """The same request authorized for another verb (the compound `create` check of a WebSocket upgrade)."""
    return replace(info, verb=verb)


# -- escalation (component-helpers/auth/rbac/validation/policy_comparator.go, rbac/validation) ------------
def _breakdown(rule: Mapping[str, Any]) -> list[dict[str, list[str]]]:
    """`BreakdownRule`: one rule per group, resource, verb (and resource name), and per URL and verb."""
    out: list[dict[str, list[str]]] = []
    names = _strings(rule, "resourceNames")
    for group in _strings(rule, "apiGroups"):
        for resource in _strings(rule, "resources"):
            for verb in _strings(rule, "verbs"):
                base = {"apiGroups": [group], "resources": [resource], "verbs": [verb]}
                out += [{**base, "resourceNames": [n]} for n in names] if names else [base]
    for url in _strings(rule, "nonResourceURLs"):
        out += [{"nonResourceURLs": [url], "verbs": [verb]} for verb in _strings(rule, "verbs")]
    return out


def _resources_cover(owner: list[str], wanted: list[str]) -> bool:
    """`resourceCoversAll`: `*`, the exact names, or `*/subresource` for a subresource."""
    if "*" in owner or set(wanted) <= set(owner):
        return True
    for path in wanted:
        if path in owner:
            continue
        if "/" not in path or f"*/{path.split('/', 1)[1]}" not in owner:
            return False
    return True


def _rule_covers(owner: Mapping[str, Any], sub: Mapping[str, list[str]]) -> bool:
    """`ruleCovers`: whether one owner rule covers a broken-down rule."""
    verbs, groups = _strings(owner, "verbs"), _strings(owner, "apiGroups")
    owner_urls, owner_names = _strings(owner, "nonResourceURLs"), _strings(owner, "resourceNames")
    if not ("*" in verbs or set(sub.get("verbs", [])) <= set(verbs)):
        return False
    if not ("*" in groups or set(sub.get("apiGroups", [])) <= set(groups)):
        return False
    if not _resources_cover(_strings(owner, "resources"), sub.get("resources", [])):
        return False
    for path in sub.get("nonResourceURLs", []):
        if not any(u == path or (u.endswith("*") and path.startswith(u.rstrip("*"))) for u in owner_urls):
            return False
    names = sub.get("resourceNames", [])
    return not owner_names if not names else (not owner_names or set(names) <= set(owner_names))


def covers(owner: list[dict[str, Any]], servant: list[dict[str, Any]]) -> list[dict[str, list[str]]]:
    """`Covers`: the broken-down rules of `servant` that no rule of `owner` covers (none: covered)."""
    return [
        sub for rule in servant for sub in _breakdown(rule) if not any(_rule_covers(o, sub) for o in owner)
    ]


def compact_rules(rules: list[dict[str, list[str]]]) -> list[dict[str, list[str]]]:
    """`CompactRules`: rules of one API group and one resource and nothing else merge their verbs."""
    compacted: list[dict[str, list[str]]] = []
    simple: dict[tuple[str, str], dict[str, list[str]]] = {}
    for rule in rules:
        if (
            set(rule) == {"apiGroups", "resources", "verbs"}
            and len(rule["apiGroups"]) == len(rule["resources"]) == 1
        ):
            key = (rule["apiGroups"][0], rule["resources"][0])
            if key in simple:
                simple[key]["verbs"] = simple[key]["verbs"] + rule["verbs"]
            else:
                simple[key] = {k: list(v) for k, v in rule.items()}
        else:
            compacted.append(rule)
    return compacted + list(simple.values())


def _go_strings(values: list[str]) -> str:
    """A []string as `%q` prints it."""
    return "[" + " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "]"


def compact_string(rule: Mapping[str, list[str]]) -> str:
    """`CompactString`: `{APIGroups:["..."], Resources:["..."], Verbs:["..."]}`."""
    keys = (
        ("APIGroups", "apiGroups"),
        ("Resources", "resources"),
        ("NonResourceURLs", "nonResourceURLs"),
        ("ResourceNames", "resourceNames"),
        ("Verbs", "verbs"),
    )
    return "{" + ", ".join(f"{name}:{_go_strings(rule[k])}" for name, k in keys if rule.get(k)) + "}"


def escalation(resolver: RuleResolver, user: UserInfo, namespace: str, rules: list[dict[str, Any]]) -> str:
    """`ConfirmNoEscalation`: "" when `user` already holds every rule of `rules` in `namespace`, else the
    error listing the rules it lacks."""
    owner, errors = resolver.rules_for(user, namespace)
    missing = covers(owner, rules)
    if not missing:
        return ""
    described = sorted({compact_string(r) for r in compact_rules(missing)})
    groups = _go_strings(list(user.get("groups") or ()))
    message = (
        f'user "{user.get("username", "")}" (groups={groups}) is attempting to grant RBAC permissions not '
        "currently held:\n" + "\n".join(described)
    )
    return message + (f"; resolution errors: [{' '.join(errors)}]" if errors else "")
