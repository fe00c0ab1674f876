"""Object metadata (k8s.io/apimachinery/pkg/api/validation/objectmeta.go)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from kruise_local.selectors import validate_label_key, validate_label_value

from .fields import Cause, forbidden, invalid_value, required, too_long
from .names import _int, _name_is_label, _name_is_subdomain, _qualified_name, is_dns1123_label

TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024
_STANDARD_FINALIZERS = {"kubernetes", "orphan", "foregroundDeletion"}
_LABEL_NAME_KINDS = {"Namespace"}


def _labels_causes(labels: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(labels, Mapping):
        return (
            [invalid_value(field, labels, "must be a map of string keys to string values")] if labels else []
        )
    for key, value in labels.items():
        if (err := validate_label_key(key)) is not None:
            causes.append(invalid_value(field, key, err))
        if (err := validate_label_value(value)) is not None:
            causes.append(invalid_value(field, value, err))
    return causes


def _annotations_causes(annotations: Any, field: str) -> list[Cause]:
    if not annotations:
        return []
    if not isinstance(annotations, Mapping):
        return [invalid_value(field, annotations, "must be a map of string keys to string values")]
    causes: list[Cause] = []
    total = 0
    for key, value in annotations.items():
        key_s = key if isinstance(key, str) else str(key)
        if (err := validate_label_key(key_s.lower())) is not None:
            causes.append(invalid_value(field, key_s, err))
        total += len(key_s.encode()) + len(str(value).encode())
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        causes.append(too_long(field, TOTAL_ANNOTATION_SIZE_LIMIT))
    return causes


def _owner_references_causes(refs: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    controller = ""
    for i, ref in enumerate(refs or []):
        path = f"{field}[{i}]"
        if not isinstance(ref, Mapping):
            causes.append(invalid_value(path, ref, "must be an object"))
            continue
        api_version = ref.get("apiVersion") or ""
        if not api_version:
            causes.append(required(f"{path}.apiVersion", "must not be empty"))
        elif api_version.count("/") > 1 or api_version.endswith("/"):
            causes.append(
                invalid_value(f"{path}.apiVersion", api_version, "must be <group>/<version> or <version>")
            )
        for key in ("kind", "name", "uid"):
            if not ref.get(key):
                causes.append(required(f"{path}.{key}", "must not be empty"))
        if api_version == "v1" and ref.get("kind") == "Event":
            causes.append(invalid_value(path, ref, "/v1, Kind=Event is disallowed from being an owner"))
        if ref.get("controller") is True:
            current = f"{ref.get('kind')}/{ref.get('name')}"
            if controller:
                causes.append(
                    invalid_value(
                        field,
                        refs,
                        'Only one reference can have Controller set to true. Found "true" in references for '
                        f"{controller} and {current}",
                    )
                )
            else:
                controller = current
    return causes


def _finalizers_causes(finalizers: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, fin in enumerate(finalizers or []):
        causes.extend(_qualified_name(fin, field))
        if isinstance(fin, str) and "/" not in fin and fin not in _STANDARD_FINALIZERS:
            causes.append(
                invalid_value(
                    f"{field}[{i}]",
                    fin,
                    "name is neither a standard finalizer name nor is it fully qualified",
                )
            )
    names = set(finalizers or [])
    if {"orphan", "foregroundDeletion"} <= names:
        causes.append(
            invalid_value(field, finalizers, "finalizer orphan and foregroundDeletion cannot be both set")
        )
    return causes


def _common_metadata_causes(meta: Mapping[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    generation = _int(meta.get("generation"))
    if generation is not None and generation < 0:
        causes.append(invalid_value("metadata.generation", generation, "must be greater than or equal to 0"))
    causes += _labels_causes(meta.get("labels"), "metadata.labels")
    causes += _annotations_causes(meta.get("annotations"), "metadata.annotations")
    causes += _owner_references_causes(meta.get("ownerReferences"), "metadata.ownerReferences")
    causes += _finalizers_causes(meta.get("finalizers"), "metadata.finalizers")
    return causes


def validate_metadata(
    kind: str,
    obj: Mapping[str, Any],
    namespaced: bool,
    name_problems: Callable[[str, bool], list[str]] | None = None,
) -> list[Cause]:
    """The causes against `obj.metadata` on create, as `ValidateObjectMeta` finds them.

    Names are RFC 1123 subdomains (Namespace names: RFC 1123 labels), or what `name_problems(name, prefix)`
    allows (the kind's `ValidateNameFunc`). The caller resolves `generateName` into a name first. Namespaced
    objects need a namespace (an RFC 1123 label); cluster-scoped ones may not have one.
    """
    meta = obj.get("metadata") or {}
    name_fn = name_problems or (_name_is_label if kind in _LABEL_NAME_KINDS else _name_is_subdomain)
    causes: list[Cause] = []
    generate_name = meta.get("generateName") or ""
    if generate_name:
        causes += [
            invalid_value("metadata.generateName", generate_name, m) for m in name_fn(generate_name, True)
        ]
    name = meta.get("name") or ""
    if not name:
        causes.append(required("metadata.name", "name or generateName is required"))
    else:
        causes += [invalid_value("metadata.name", name, m) for m in name_fn(str(name), False)]
    namespace = meta.get("namespace") or ""
    if namespaced:
        if not namespace:
            causes.append(required("metadata.namespace"))
        else:
            causes += [invalid_value("metadata.namespace", namespace, m) for m in is_dns1123_label(namespace)]
    elif namespace:
        causes.append(forbidden("metadata.namespace", "not allowed on this type"))
    return causes + _common_metadata_causes(meta)


def validate_metadata_update(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Cause]:
    """The causes against a metadata change, as `ValidateObjectMetaUpdate` finds them.

    name, namespace, uid, creationTimestamp, deletionTimestamp and deletionGracePeriodSeconds are immutable
    (`field is immutable`), generation may not go down, no finalizer may be added once deletion started;
    labels, annotations, ownerReferences and finalizers must stay well formed.
    """
    old_meta = old.get("metadata") or {}
    new_meta = new.get("metadata") or {}
    causes: list[Cause] = []
    if old_meta.get("deletionTimestamp"):
        extra = sorted(set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or []))
        if extra:
            shown = "[]string{" + ", ".join(json.dumps(e) for e in extra) + "}"
            causes.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {shown}",
                )
            )
    new_gen, old_gen = _int(new_meta.get("generation")) or 0, _int(old_meta.get("generation")) or 0
    if new_gen < 0:
        causes.append(invalid_value("metadata.generation", new_gen, "must be greater than or equal to 0"))
    if new_gen < old_gen:
        causes.append(invalid_value("metadata.generation", new_gen, "must not be decremented"))
    for key in (
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ):
        if (new_meta.get(key) or None) != (old_meta.get(key) or None):
            causes.append(invalid_value(f"metadata.{key}", new_meta.get(key), "field is immutable"))
    return causes + _common_metadata_causes(new_meta)
