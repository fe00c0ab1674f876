"""Roles, ClusterRoles, RoleBindings and ClusterRoleBindings (`pkg/apis/rbac/v1/defaults.go`,
`pkg/apis/rbac/validation/validation.go`).

Names are path segments only (`ValidateRBACName`: `path.IsValidPathSegmentName`, not DNS names: the bootstrap
roles are called `system:basic-user`); a rule has verbs, and either resources with API groups or
non-resource URLs (those in ClusterRoles only); a binding's roleRef is immutable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .fields import Cause, _raise_invalid, invalid_value, not_supported, required
from .meta import validate_metadata, validate_metadata_update
from .names import is_dns1123_subdomain

GROUP = "rbac.authorization.k8s.io"
_SUBJECT_KINDS = ("ServiceAccount", "User", "Group")


def path_segment_problems(name: str, prefix: bool = False) -> list[str]:
    """`path.IsValidPathSegmentName` (a generateName prefix: `IsValidPathSegmentPrefix`, no whole-name
    check): what makes `name` unusable as one segment of a URL path."""
    if not prefix:
        for illegal in (".", ".."):
            if name == illegal:
                return [f"may not be '{illegal}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


def default_binding(obj: dict[str, Any]) -> None:
    """`SetDefaults_RoleBinding` / `SetDefaults_ClusterRoleBinding` and `SetDefaults_Subject`: an empty
    roleRef.apiGroup is rbac's, a User's or Group's subject apiGroup too (a ServiceAccount's stays "")."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for subject in obj.get("subjects") or ():
        if isinstance(subject, dict) and not subject.get("apiGroup"):
            if subject.get("kind") in ("User", "Group"):
                subject["apiGroup"] = GROUP


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _rule_causes(rule: Any, namespaced: bool, path: str) -> list[Cause]:
    """`ValidatePolicyRule`."""
    if not isinstance(rule, Mapping):
        return [invalid_value(path, rule, "must be an object")]
    causes: list[Cause] = []
    if not _list(rule.get("verbs")):
        causes.append(required(f"{path}.verbs", "verbs must contain at least one value"))
    urls = _list(rule.get("nonResourceURLs"))
    if urls:
        if namespaced:
            causes.append(_invalid_go(f"{path}.nonResourceURLs", _go_strings(urls), _NAMESPACED_URLS))
        if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
            causes.append(_invalid_go(f"{path}.nonResourceURLs", _go_strings(urls), _MIXED_URLS))
        return causes
    if not _list(rule.get("apiGroups")):
        causes.append(required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
    if not _list(rule.get("resources")):
        causes.append(required(f"{path}.resources", "resource rules must supply at least one resource"))
    if _list(rule.get("resourceNames")) and len(_list(rule.get("resources"))) > 1:
        causes.append(required(f"{path}.resourceNames", "resource names cannot apply to multiple resources"))
    return causes


def _role_causes(kind: str, obj: Mapping[str, Any]) -> list[Cause]:
    namespaced = kind == "Role"
    causes = validate_metadata(kind, obj, namespaced, name_problems=path_segment_problems)
    for i, rule in enumerate(_list(obj.get("rules"))):
        causes += _rule_causes(rule, namespaced, f"rules[{i}]")
    aggregation = obj.get("aggregationRule")
    if kind == "ClusterRole" and aggregation is not None:
        selectors = _list((aggregation or {}).get("clusterRoleSelectors"))
        if not selectors:
            causes.append(
                required(
                    "aggregationRule.clusterRoleSelectors",
                    "at least one clusterRoleSelector required if aggregationRule is non-nil",
                )
            )
    return causes


def _subject_causes(subject: Any, namespaced: bool, path: str) -> list[Cause]:
    """`validateRoleBindingSubject`."""
    if not isinstance(subject, Mapping):
        return [invalid_value(path, subject, "must be an object")]
    causes: list[Cause] = []
    name, kind, group = subject.get("name") or "", subject.get("kind") or "", subject.get("apiGroup") or ""
    if not name:
        causes.append(required(f"{path}.name"))
    if kind == "ServiceAccount":
        if name:
            causes += [invalid_value(f"{path}.name", name, m) for m in is_dns1123_subdomain(str(name))]
        if group:
            causes.append(not_supported(f"{path}.apiGroup", group, [""]))
        if not namespaced and not subject.get("namespace"):
            causes.append(required(f"{path}.namespace"))
    elif kind in ("User", "Group"):
        if not name:
            what = "user" if kind == "User" else "group"
            causes.append(invalid_value(f"{path}.name", name, f"{what} name cannot be empty"))
        if group != GROUP:
            causes.append(not_supported(f"{path}.apiGroup", group, [GROUP]))
    else:
        causes.append(not_supported(f"{path}.kind", kind, _SUBJECT_KINDS))
    return causes


def _binding_causes(kind: str, obj: Mapping[str, Any]) -> list[Cause]:
    namespaced = kind == "RoleBinding"
    causes = validate_metadata(kind, obj, namespaced, name_problems=path_segment_problems)
    ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), Mapping) else {}
    if ref.get("apiGroup") != GROUP:
        causes.append(not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", [GROUP]))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        causes.append(not_supported("roleRef.kind", ref.get("kind") or "", kinds))
    ref_name = ref.get("name") or ""
    if not ref_name:
        causes.append(required("roleRef.name"))
    else:
        causes += [invalid_value("roleRef.name", ref_name, m) for m in path_segment_problems(str(ref_name))]
    for i, subject in enumerate(_list(obj.get("subjects"))):
        causes += _subject_causes(subject, namespaced, f"subjects[{i}]")
    return causes


_NAMESPACED_URLS = "namespaced rules cannot apply to non-resource URLs"
_MIXED_URLS = "rules cannot apply to both regular resources and non-resource URLs"


def _go_strings(values: list[Any]) -> str:
    """A []string as Go's `%#v` prints it in a field error (`field.Error.ErrorBody`)."""
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def _invalid_go(field: str, shown: str, detail: str) -> Cause:
    """`field.Invalid` of a value that is no string or number: shown as Go's `%#v`."""
    return {"reason": "FieldValueInvalid", "field": field, "message": f"Invalid value: {shown}: {detail}"}


def _go_role_ref(ref: Any) -> str:
    """A RoleRef as Go's `%#v` prints it in the "cannot change roleRef" error."""
    ref = ref if isinstance(ref, Mapping) else {}
    parts = (
        f'{key}:"{ref.get(field) or ""}"'
        for key, field in (("APIGroup", "apiGroup"), ("Kind", "kind"), ("Name", "name"))
    )
    return "rbac.RoleRef{" + ", ".join(parts) + "}"


def validate_rbac(kind: str, obj: Mapping[str, Any]) -> None:
    """Validate a new Role, ClusterRole, RoleBinding or ClusterRoleBinding; raises 422 Invalid."""
    causes = _role_causes(kind, obj) if kind.endswith("Role") else _binding_causes(kind, obj)
    _raise_invalid(kind, obj, causes, group=GROUP)


def validate_rbac_update(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """`Validate*Update`: the new object's own checks, the metadata's update rules, and (bindings) the
    roleRef unchanged."""
    causes = _role_causes(kind, new) if kind.endswith("Role") else _binding_causes(kind, new)
    causes += validate_metadata_update(kind, old, new)
    if kind.endswith("Binding") and old.get("roleRef") != new.get("roleRef"):
        causes.append(_invalid_go("roleRef", _go_role_ref(new.get("roleRef")), "cannot change roleRef"))
    _raise_invalid(kind, new, causes, group=GROUP)
