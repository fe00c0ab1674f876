"""Namespace, ConfigMap, Event, Node."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .fields import _raise_invalid, invalid_value, too_long
from .meta import _STANDARD_FINALIZERS, validate_metadata
from .names import _is_config_map_key, _qualified_name

MAX_CONFIG_MAP_SIZE = 1024 * 1024


def default_namespace(ns: dict[str, Any]) -> None:
    """Namespace create defaults: label `kubernetes.io/metadata.name`, finalizer `kubernetes`, Active."""
    meta = ns.setdefault("metadata", {})
    if meta.get("name"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    spec = ns.setdefault("spec", {})
    finalizers = spec.setdefault("finalizers", [])
    if "kubernetes" not in finalizers:
        finalizers.append("kubernetes")
    ns["status"] = {"phase": "Active"}


def validate_namespace(ns: Mapping[str, Any]) -> None:
    """Namespace names are RFC 1123 labels; namespaces are cluster-scoped. Raises 422 Invalid."""
    causes = validate_metadata("Namespace", ns, False)
    for i, fin in enumerate((ns.get("spec") or {}).get("finalizers") or []):
        causes += _qualified_name(fin, "spec.finalizers")
        if isinstance(fin, str) and "/" not in fin and fin not in _STANDARD_FINALIZERS:
            message = "name is neither a standard finalizer name nor is it fully qualified"
            causes.append(invalid_value(f"spec.finalizers[{i}]", fin, message))
    _raise_invalid("Namespace", ns, causes)


def validate_configmap(cm: Mapping[str, Any]) -> None:
    """ConfigMap keys match `[-._a-zA-Z0-9]+` and are unique across data/binaryData; total size <= 1 MiB."""
    causes = validate_metadata("ConfigMap", cm, True)
    data = cm.get("data") or {}
    binary = cm.get("binaryData") or {}
    total = 0
    for part, values, other, other_name in (
        ("data", data, binary, "binaryData"),
        ("binaryData", binary, data, "data"),
    ):
        for key, value in values.items():
            causes += [invalid_value(f"{part}[{key}]", key, m) for m in _is_config_map_key(str(key))]
            if part == "data" and key in other:
                causes.append(
                    invalid_value(f"{part}[{key}]", key, f"duplicate of key present in {other_name}")
                )
            if part == "data":
                total += len(str(value).encode())
            else:
                total += (len(str(value)) * 3) // 4  # base64-encoded bytes
    if total > MAX_CONFIG_MAP_SIZE:
        causes.append(too_long("", MAX_CONFIG_MAP_SIZE))
    _raise_invalid("ConfigMap", cm, causes)


def default_event(event: dict[str, Any]) -> None:
    """A core/v1 Event as the server returns it: `eventTime: null`, empty reportingComponent/Instance."""
    event.setdefault("eventTime", None)
    event.setdefault("reportingComponent", "")
    event.setdefault("reportingInstance", "")


def validate_event(event: Mapping[str, Any]) -> None:
    """A legacy core/v1 Event: its namespace must match `involvedObject.namespace`. Raises 422 Invalid."""
    causes = validate_metadata("Event", event, True)
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    involved_ns = (event.get("involvedObject") or {}).get("namespace") or ""
    if not event.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                causes.append(
                    invalid_value("involvedObject.namespace", involved_ns, "does not match event.namespace")
                )
        elif namespace != involved_ns:
            causes.append(
                invalid_value("involvedObject.namespace", involved_ns, "does not match event.namespace")
            )
    _raise_invalid("Event", event, causes)


def default_node(node: dict[str, Any]) -> None:
    """Node defaults: `status.allocatable` copied from `status.capacity` when unset."""
    status = node.setdefault("status", {})
    if status.get("capacity") and not status.get("allocatable"):
        status["allocatable"] = copy.deepcopy(status["capacity"])


def validate_node(node: Mapping[str, Any]) -> None:
    """Node names are RFC 1123 subdomains; nodes are cluster-scoped. Raises 422 Invalid."""
    causes = validate_metadata("Node", node, False)
    _raise_invalid("Node", node, causes)
