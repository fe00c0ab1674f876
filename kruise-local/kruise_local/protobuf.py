"""Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the kinds kubectl sends so.

kubectl's typed clients (`kubectl create configmap|secret|namespace ...`) encode built-in objects as protobuf,
and client-go falls back to JSON after a 415 only for CBOR (`rest/client.go` `UnsupportedMediaType`), so the
server must read them. The envelope is apimachinery's (`runtime/serializer/protobuf`: the magic `k8s\\0`, then
a `runtime.Unknown` {typeMeta, raw}); `raw` is decoded with the field numbers of `k8s.io/api/core/v1` and
`k8s.io/apimachinery/pkg/apis/meta/v1` `generated.proto` for ConfigMap, Secret, ServiceAccount, Namespace,
the self reviews (`authorization`/`authentication` v1), TokenRequest and the rbac/v1 kinds. Other kinds are
a 415, naming the media types accepted for them.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import ApiError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"

# message -> field number -> (json name, type); types: string, bytes, int, bool, time, fields (FieldsV1 raw
# JSON), msg:<message>, list:<type>, map:<value type>
_SCHEMAS: dict[str, dict[int, tuple[str, str]]] = {
    "Unknown": {1: ("typeMeta", "msg:TypeMeta"), 2: ("raw", "bytes"), 3: ("contentEncoding", "string"),
                4: ("contentType", "string")},
    "TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    "ObjectMeta": {
        1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
        4: ("selfLink", "string"), 5: ("uid", "string"), 6: ("resourceVersion", "string"),
        7: ("generation", "int"),
        8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "int"),
        11: ("labels", "map:string"), 12: ("annotations", "map:string"),
        13: ("ownerReferences", "list:msg:OwnerReference"), 14: ("finalizers", "list:string"),
        17: ("managedFields", "list:msg:ManagedFieldsEntry"),
    },
    "OwnerReference": {5: ("apiVersion", "string"), 1: ("kind", "string"), 3: ("name", "string"),
                       4: ("uid", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")},
    "ManagedFieldsEntry": {1: ("manager", "string"), 2: ("operation", "string"), 3: ("apiVersion", "string"),
                           4: ("time", "time"), 6: ("fieldsType", "string"), 7: ("fieldsV1", "fields"),
                           8: ("subresource", "string")},
    "Time": {1: ("seconds", "int"), 2: ("nanos", "int")},
    "LabelSelector": {1: ("matchLabels", "map:string"),
                      2: ("matchExpressions", "list:msg:LabelSelectorRequirement")},
    "LabelSelectorRequirement": {1: ("key", "string"), 2: ("operator", "string"),
                                 3: ("values", "list:string")},
    "Quantity": {1: ("string", "string")},
    "IntOrString": {1: ("type", "int"), 2: ("intVal", "int"), 3: ("strVal", "string")},
    "ConfigMap": {1: ("metadata", "msg:ObjectMeta"), 4: ("immutable", "bool"), 2: ("data", "map:string"),
                  3: ("binaryData", "map:bytes")},
    "Secret": {1: ("metadata", "msg:ObjectMeta"), 5: ("immutable", "bool"), 2: ("data", "map:bytes"),
               4: ("stringData", "map:string"), 3: ("type", "string")},
    "ServiceAccount": {1: ("metadata", "msg:ObjectMeta"), 2: ("secrets", "list:msg:ObjectReference"),
                       3: ("imagePullSecrets", "list:msg:LocalObjectReference"),
                       4: ("automountServiceAccountToken", "bool")},
    "ObjectReference": {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                        4: ("uid", "string"), 5: ("apiVersion", "string"), 6: ("resourceVersion", "string"),
                        7: ("fieldPath", "string")},
    "SelfSubjectAccessReview": {1: ("metadata", "msg:ObjectMeta"),
                                2: ("spec", "msg:SelfSubjectAccessReviewSpec")},
    "SelfSubjectAccessReviewSpec": {1: ("resourceAttributes", "msg:ResourceAttributes"),
                                    2: ("nonResourceAttributes", "msg:NonResourceAttributes")},
    "ResourceAttributes": {1: ("namespace", "string"), 2: ("verb", "string"), 3: ("group", "string"),
                           4: ("version", "string"), 5: ("resource", "string"), 6: ("subresource", "string"),
                           7: ("name", "string")},
    "NonResourceAttributes": {1: ("path", "string"), 2: ("verb", "string")},
    "SelfSubjectReview": {1: ("metadata", "msg:ObjectMeta")},
    "SelfSubjectRulesReview": {1: ("metadata", "msg:ObjectMeta"),
                               2: ("spec", "msg:SelfSubjectRulesReviewSpec")},
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string")},
    "Namespace": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:NamespaceSpec"),
                  3: ("status", "msg:NamespaceStatus")},
    "NamespaceSpec": {1: ("finalizers", "list:string")},
    "NamespaceStatus": {1: ("phase", "string"), 2: ("conditions", "list:msg:NamespaceCondition")},
    "NamespaceCondition": {1: ("type", "string"), 2: ("status", "string"), 4: ("lastTransitionTime", "time"),
                           5: ("reason", "string"), 6: ("message", "string")},
    # k8s.io/api rbac/v1 generated.proto
    "Role": {1: ("metadata", "msg:ObjectMeta"), 2: ("rules", "list:msg:PolicyRule")},
    "ClusterRole": {1: ("metadata", "msg:ObjectMeta"), 2: ("rules", "list:msg:PolicyRule"),
                    3: ("aggregationRule", "msg:AggregationRule")},
    "AggregationRule": {1: ("clusterRoleSelectors", "list:msg:LabelSelector")},
    "PolicyRule": {1: ("verbs", "list:string"), 2: ("apiGroups", "list:string"),
                   3: ("resources", "list:string"), 4: ("resourceNames", "list:string"),
                   5: ("nonResourceURLs", "list:string")},
    "RoleBinding": {1: ("metadata", "msg:ObjectMeta"), 2: ("subjects", "list:msg:Subject"),
                    3: ("roleRef", "msg:RoleRef")},
    "ClusterRoleBinding": {1: ("metadata", "msg:ObjectMeta"), 2: ("subjects", "list:msg:Subject"),
                           3: ("roleRef", "msg:RoleRef")},
    "Subject": {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                4: ("namespace", "string")},
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    # k8s.io/api authentication/v1 generated.proto
    "TokenRequest": {1: ("metadata", "msg:ObjectMeta"), 2: ("spec", "msg:TokenRequestSpec")},
    "TokenRequestSpec": {1: ("audiences", "list:string"), 4: ("expirationSeconds", "int"),
                         3: ("boundObjectRef", "msg:BoundObjectReference")},
    "BoundObjectReference": {1: ("kind", "string"), 2: ("apiVersion", "string"), 3: ("name", "string"),
                             4: ("uid", "string")},
}  # fmt: skip
# the messages a Pod reaches, from k8s.io/api core/v1/generated.proto (scripts/gen_protobuf_schema.py)
_CORE = json.loads(Path(__file__).with_name("protobuf_core.json").read_text())
for _name, _fields in _CORE.items():
    _SCHEMAS.setdefault(_name, {int(n): (json_name, kind) for n, (json_name, kind) in _fields.items()})
_KINDS = {
    ("v1", "Pod"),  # kubectl debug --copy-to
    ("v1", "ConfigMap"),
    ("v1", "Namespace"),
    ("v1", "Secret"),
    ("v1", "ServiceAccount"),  # kubectl create serviceaccount
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),  # kubectl auth can-i
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),  # kubectl auth can-i --list
    ("authentication.k8s.io/v1", "SelfSubjectReview"),  # kubectl auth whoami
    ("authentication.k8s.io/v1", "TokenRequest"),  # kubectl create token
    ("rbac.authorization.k8s.io/v1", "Role"),  # kubectl create role
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),  # kubectl create clusterrole
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),  # kubectl create rolebinding
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),  # kubectl create clusterrolebinding
}


class _Malformed(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise _Malformed("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """(field number, wire type, value) of each field of a message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise _Malformed("truncated field")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > len(buf):
                raise _Malformed("truncated field")
            value, pos = int.from_bytes(buf[pos : pos + size], "little"), pos + size
        else:
            raise _Malformed(f"unsupported wire type {wire}")
        yield number, wire, value


def _packed(buf: bytes):
    """The varints of a packed repeated field, as (number, wire, value) like `_fields`."""
    pos = 0
    while pos < len(buf):
        value, pos = _varint(buf, pos)
        yield 0, 0, value


def _scalar(kind: str, wire: int, value: Any, depth: int) -> Any:
    if kind in ("string", "bytes", "fields", "time", "quantity", "intstr") or kind.startswith("msg:"):
        if wire != 2:
            raise _Malformed(f"a {kind} field must be length-delimited")
        if kind == "string":
            return value.decode("utf-8")
        if kind == "bytes":
            return base64.b64encode(value).decode()
        if kind == "fields":
            raw = _message("FieldsV1Raw", value, depth + 1).get("Raw")
            return json.loads(base64.b64decode(raw)) if raw else {}
        if kind == "time":
            t = _message("Time", value, depth + 1)
            return datetime.fromtimestamp(t.get("seconds", 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if kind == "quantity":  # resource.Quantity's JSON form is its string
            return _message("Quantity", value, depth + 1).get("string", "")
        if kind == "intstr":  # intstr.IntOrString: type 0 is an int, 1 a string
            v = _message("IntOrString", value, depth + 1)
            return v.get("strVal", "") if v.get("type") == 1 else v.get("intVal", 0)
        return _message(kind[4:], value, depth + 1)
    if kind == "double":
        if wire != 1:
            raise _Malformed("a double field must be 64-bit")
        return struct.unpack("<d", value.to_bytes(8, "little"))[0]
    if wire != 0:
        raise _Malformed(f"a {kind} field must be a varint")
    if kind == "bool":
        return bool(value)
    return value - (1 << 64) if value >= 1 << 63 else value  # int64 two's complement


def _message(name: str, buf: bytes, depth: int = 0) -> dict[str, Any]:
    if depth > 32:
        raise _Malformed("nested too deeply")
    if name == "FieldsV1Raw":
        schema = {1: ("Raw", "bytes")}
    else:
        schema = _SCHEMAS[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(buf):
        field = schema.get(number)
        if field is None:
            continue  # an unknown field: dropped, as the decoder does for fields of newer releases
        key, kind = field
        if kind.startswith("z:"):  # a non-pointer omitempty field: its zero value is no value in JSON
            kind = kind[2:]
            if not _scalar(kind, wire, value, depth):
                out.pop(key, None)
                continue
        if kind.startswith("map:"):
            entry = {n: v for n, w, v in _fields(value)} if wire == 2 else {}
            k = entry.get(1, b"").decode("utf-8")
            out.setdefault(key, {})[k] = _scalar(kind[4:], 2, entry.get(2, b""), depth)
        elif kind.startswith("inline:"):  # an embedded Go struct (`json:",inline"`)
            if wire != 2:
                raise _Malformed(f"{key} must be length-delimited")
            out.update(_message(kind[7:], value, depth + 1))
        elif kind in ("list:int", "list:bool") and wire == 2:  # a packed repeated scalar
            out.setdefault(key, []).extend(_scalar(kind[5:], 0, v, depth) for _, _, v in _packed(value))
        elif kind.startswith("list:"):
            out.setdefault(key, []).append(_scalar(kind[5:], wire, value, depth))
        else:
            out[key] = _scalar(kind, wire, value, depth)
    return out


def decode(raw: bytes) -> dict[str, Any]:
    """A protobuf-encoded object as its JSON form; a 400 when it is malformed, a 415 for other kinds."""
    if not raw.startswith(_MAGIC):
        raise ApiError(400, "the body of the request was in an unknown format: missing the protobuf prefix")
    try:
        envelope = _message("Unknown", raw[len(_MAGIC) :])
        meta = envelope.get("typeMeta") or {}
        api_version, kind = meta.get("apiVersion", ""), meta.get("kind", "")
        if (api_version, kind) not in _KINDS:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - {kind or 'an object'} in protobuf is "
                "not read by the local cluster; accepted media types include: application/json, "
                "application/merge-patch+json (send it as JSON)",
                reason="UnsupportedMediaType",
            )
        obj = _message(kind, base64.b64decode(envelope.get("raw", "")))
    except (ValueError, AttributeError, TypeError, OverflowError, OSError) as e:  # any malformed field
        raise ApiError(400, f"the body of the request was in an unknown format: {e}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
