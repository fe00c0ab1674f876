"""The RBAC registry: Roles, ClusterRoles, RoleBindings and ClusterRoleBindings as stored objects, with the
escalation check their storage runs, and the bootstrap policy a fresh cluster has.

Escalation (`pkg/registry/rbac/{role,clusterrole,rolebinding,clusterrolebinding}/policybased/storage.go`,
`pkg/registry/rbac/escalation_check.go`): a member of `system:masters` writes anything
(`EscalationAllowed`); otherwise a role may be written by whoever may `escalate` it
(`RoleEscalationAuthorized`) or already holds every rule it grants in the request's namespace
(`ConfirmNoEscalation`; a ClusterRole with an `aggregationRule` needs `*` on everything), and a binding by
whoever may `bind` its role (`BindingAuthorized`) or holds every rule of that role (whose absence is then a
404). An update that only changes what the garbage collector needs (ownerReferences, finalizers) is not
checked (`IsOnlyMutatingGCFields`). The refusal is a 403 naming the rules missing; the check runs before
validation, as the policy-based storage wraps the standard one.

Bootstrap (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`, ensured at start by
`pkg/registry/rbac/rest/storage_rbac.go`): `cluster-admin` (bound to `system:masters`), `system:discovery` and
`system:basic-user` (bound to `system:authenticated`), `system:public-info-viewer` (bound to
`system:authenticated` and `system:unauthenticated`), labelled `kubernetes.io/bootstrapping: rbac-defaults`
and annotated for auto-update. The other bootstrap roles (controllers', nodes', the aggregated
`admin`/`edit`/`view`) are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import resources as R
from .admission import Admission
from .errors import ApiError
from .rbac import ADMIN_USER, MASTERS, USER_INFO, RequestInfo, RuleResolver, UserInfo, escalation
from .resources import Resource
from .store import Obj, Store, deep_copy
from .strategies import Strategy
from .validation import check_decodable
from .validation.rbac import GROUP, default_binding, validate_rbac, validate_rbac_update

Authorize = Callable[[UserInfo, RequestInfo], bool]
"""the cluster's authorizer as the registry asks it (everything allowed without one)"""

_FULL_AUTHORITY = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
]


def _gc_fields_only(old: Obj, new: Obj) -> bool:
    """`IsOnlyMutatingGCFields`: `new` differs from `old` in ownerReferences and finalizers at most."""
    keep = ("ownerReferences", "finalizers", "managedFields", "resourceVersion")
    a, b = deep_copy(old), deep_copy(new)
    for obj in (a, b):
        for key in keep:
            obj.setdefault("metadata", {}).pop(key, None)
    return a == b


class RbacStrategy(Strategy):
    """A role or binding resource: defaults, the escalation check, then validation."""

    def __init__(self, res: Resource, store: Store, admission: Admission, authorize: Authorize) -> None:
        super().__init__(res, store, admission)
        self.resolver = RuleResolver(store)
        self.authorize = authorize

    def validate_create(self, obj: Obj) -> None:
        check_decodable(self.res.kind, obj)
        if self.res in (R.ROLE_BINDINGS, R.CLUSTER_ROLE_BINDINGS):
            default_binding(obj)
        self._check_escalation(obj)
        validate_rbac(self.res.kind, obj)

    def validate_update(self, old: Obj, new: Obj) -> None:
        check_decodable(self.res.kind, new)
        if self.res in (R.ROLE_BINDINGS, R.CLUSTER_ROLE_BINDINGS):
            default_binding(new)
        if not _gc_fields_only(old, new):
            self._check_escalation(new)
        validate_rbac_update(self.res.kind, old, new)

    def _check_escalation(self, obj: Obj) -> None:
        user = USER_INFO.get() or ADMIN_USER
        if MASTERS in (user.get("groups") or ()):  # EscalationAllowed
            return
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if self.res in (R.ROLES, R.CLUSTER_ROLES):
            escalate = RequestInfo("escalate", GROUP, self.res.plural, "", namespace, name, True)
            if self.authorize(user, escalate):  # RoleEscalationAuthorized
                return
            rules = [r for r in obj.get("rules") or () if isinstance(r, dict)]
            if problem := escalation(self.resolver, user, namespace, rules):
                raise self._forbidden(name, problem)
            if obj.get("aggregationRule") and escalation(self.resolver, user, namespace, _FULL_AUTHORITY):
                raise self._forbidden(name, "must have cluster-admin privileges to use the aggregationRule")
            return
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
        plural = {"ClusterRole": "clusterroles", "Role": "roles"}.get(str(ref.get("kind")))
        if plural is not None:
            bind = RequestInfo(
                "bind",
                str(ref.get("apiGroup") or ""),
                plural,
                "",
                namespace,
                str(ref.get("name") or ""),
                True,
            )
            if self.authorize(user, bind):  # BindingAuthorized
                return
        try:
            rules = self.resolver.role_reference_rules(ref, namespace)
        except LookupError as e:  # the role's storage's NotFound
            raise ApiError(404, str(e), kind=plural, name=str(ref.get("name") or ""), group=GROUP) from None
        except ValueError as e:  # a plain error: an internal one, before validation could name the field
            raise ApiError(500, str(e)) from None
        if problem := escalation(self.resolver, user, namespace, rules):
            raise self._forbidden(name, problem)

    def _forbidden(self, name: str, problem: str) -> ApiError:
        """`errors.NewForbidden(groupResource, name, err)`."""
        return ApiError(
            403,
            f'{self.res.plural}.{GROUP} "{name}" is forbidden: {problem}',
            reason="Forbidden",
            kind=self.res.plural,
            name=name,
            group=GROUP,
        )


_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}
CLUSTER_ROLES: dict[str, list[dict[str, Any]]] = {
    "cluster-admin": _FULL_AUTHORITY,
    "system:discovery": [
        {
            "verbs": ["get"],
            "nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                "/readyz", "/version", "/version/",
            ],
        }
    ],
    "system:basic-user": [
        {
            "verbs": ["create"],
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
        },
        {"verbs": ["create"], "apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"]},
    ],
    "system:public-info-viewer": [
        {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]}
    ],
}  # fmt: skip
"""the bootstrap ClusterRoles modelled, by name (`clusterRoles()`)"""
CLUSTER_ROLE_BINDINGS: dict[str, tuple[str, ...]] = {
    "cluster-admin": (MASTERS,),
    "system:discovery": ("system:authenticated",),
    "system:basic-user": ("system:authenticated",),
    "system:public-info-viewer": ("system:authenticated", "system:unauthenticated"),
}
"""the groups each bootstrap ClusterRole is bound to by a ClusterRoleBinding of its name
(`clusterRoleBindings()`)"""


def ensure_bootstrap_policy(store: Store) -> None:
    """Create the bootstrap ClusterRoles and ClusterRoleBindings (`ensureRBACPolicy`)."""
    for name, rules in CLUSTER_ROLES.items():
        store.create(
            R.CLUSTER_ROLES,
            {"metadata": {"name": name, **deep_copy(_BOOTSTRAP_META)}, "rules": deep_copy(rules)},
        )
    for name, groups in CLUSTER_ROLE_BINDINGS.items():
        store.create(
            R.CLUSTER_ROLE_BINDINGS,
            {
                "metadata": {"name": name, **deep_copy(_BOOTSTRAP_META)},
                "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": name},
                "subjects": [{"apiGroup": GROUP, "kind": "Group", "name": g} for g in groups],
            },
        )


def install(registry: Any, store: Store, admission: Admission, authorize: Authorize) -> None:
    """Give `registry` the RBAC resources' strategies."""
    for res in R.RBAC_RESOURCES:
        registry.register(RbacStrategy(res, store, admission, authorize))
