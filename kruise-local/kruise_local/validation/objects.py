"""Namespace, ConfigMap, Secret, Event, Node."""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Mapping
from typing import Any

from ..errors import ApiError
from .fields import _raise_invalid, forbidden, invalid_value, required, too_long
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


def validate_configmap_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """`ValidateConfigMapUpdate`: an immutable ConfigMap keeps its data, binaryData and `immutable`."""
    causes = []
    if old.get("immutable"):
        if not new.get("immutable"):
            causes.append(forbidden("immutable", "field is immutable when `immutable` is set"))
        for part in ("data", "binaryData"):
            if (new.get(part) or {}) != (old.get(part) or {}):
                causes.append(forbidden(part, "field is immutable when `immutable` is set"))
    _raise_invalid("ConfigMap", new, causes)
    validate_configmap(new)


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


MAX_SECRET_SIZE = 1024 * 1024
_SECRET_REQUIRED = {  # ValidateSecret: the data keys a secret type requires
    "kubernetes.io/dockercfg": (".dockercfg",),
    "kubernetes.io/dockerconfigjson": (".dockerconfigjson",),
    "kubernetes.io/ssh-auth": ("ssh-privatekey",),
    "kubernetes.io/tls": ("tls.crt", "tls.key"),
}


def convert_secret(secret: dict[str, Any]) -> None:
    """The v1 -> internal conversion (`Convert_v1_Secret_To_core_Secret`): `stringData` is written into `data`
    (its keys win) and is never stored; `data` values are base64 (Go's `[]byte` in JSON: standard alphabet,
    padded), and one that is not is a 400 decoding error, as the JSON decoder reports it."""
    data = {k: "" if v is None else v for k, v in (secret.get("data") or {}).items()}  # null: an empty []byte
    if "data" in secret and secret["data"] is not None:
        secret["data"] = data
    for key, value in data.items():
        try:
            base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            version = str(secret.get("apiVersion") or "v1").rpartition("/")[2]
            raise ApiError(
                400,
                f'Secret in version "{version}" cannot be handled as a Secret: illegal base64 data at input '
                f"byte {_first_bad_base64(str(value))} (data[{key}])",
            ) from None
    string_data = secret.pop("stringData", None) or {}
    if string_data:
        secret["data"] = {
            **data,
            **{k: base64.b64encode(str(v).encode()).decode() for k, v in string_data.items()},
        }


def _first_bad_base64(text: str) -> int:
    for i, ch in enumerate(text):
        if not (ch.isascii() and (ch.isalnum() or ch in "+/=")):
            return i
    return len(text) - len(text) % 4 if len(text) % 4 else max(len(text) - 1, 0)


def default_secret(secret: dict[str, Any]) -> None:
    """`SetDefaults_Secret`: an empty type is Opaque."""
    if not secret.get("type"):
        secret["type"] = "Opaque"


def _secret_causes(secret: Mapping[str, Any]) -> list[Any]:
    """`ValidateSecret` (pkg/apis/core/validation): keys, total size, and what each known type requires."""
    causes = validate_metadata("Secret", secret, True)
    data = secret.get("data") or {}
    total = 0
    for key, value in data.items():
        causes += [invalid_value(f"data[{key}]", key, m) for m in _is_config_map_key(str(key))]
        total += len(base64.b64decode(str(value)))
    if total > MAX_SECRET_SIZE:
        causes.append(too_long("data", MAX_SECRET_SIZE))
    kind = secret.get("type") or "Opaque"
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    if kind == "kubernetes.io/service-account-token":
        if not annotations.get("kubernetes.io/service-account.name"):
            causes.append(required("metadata.annotations[kubernetes.io/service-account.name]"))
    elif kind == "kubernetes.io/basic-auth":
        if "username" not in data and "password" not in data:
            causes += [required("data[username]"), required("data[password]")]
    elif kind in _SECRET_REQUIRED:
        missing = [
            k for k in _SECRET_REQUIRED[kind] if k not in data or (kind.endswith("ssh-auth") and not data[k])
        ]
        causes += [required(f"data[{k}]") for k in missing]
        if kind in ("kubernetes.io/dockercfg", "kubernetes.io/dockerconfigjson") and not missing:
            key = _SECRET_REQUIRED[kind][0]
            try:
                json.loads(base64.b64decode(str(data[key])))
            except ValueError as e:
                causes.append(invalid_value(f"data[{key}]", "<secret contents redacted>", str(e)))
    return causes


def validate_secret(secret: Mapping[str, Any]) -> None:
    """`ValidateSecret`; raises 422 Invalid."""
    _raise_invalid("Secret", secret, _secret_causes(secret))


def validate_secret_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """`ValidateSecretUpdate`: the type never changes; an immutable secret's data and `immutable` do not."""
    causes = []
    if (new.get("type") or "Opaque") != (old.get("type") or "Opaque"):
        causes.append(invalid_value("type", new.get("type"), "field is immutable"))
    if old.get("immutable"):
        if not new.get("immutable"):
            causes.append(forbidden("immutable", "field is immutable when `immutable` is set"))
        if (new.get("data") or {}) != (old.get("data") or {}):
            causes.append(forbidden("data", "field is immutable when `immutable` is set"))
    _raise_invalid("Secret", new, causes + _secret_causes(new))
