"""`/openapi/v2` in protobuf: the generated swagger document encoded as gnostic's `openapi_v2.Document`.

kube-openapi serves `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (what client-go's
`OpenAPISchema()` asks for: kubectl's v2 fallbacks, `explain --output=plaintext-openapiv2`, helm's
validation). The encoding follows the field numbers of gnostic's `openapiv2/OpenAPIv2.proto`; vendor
extensions, `enum` and `default` values are `Any` messages carrying the value as YAML, as gnostic's compiler
writes them. Only the parts of Swagger 2.0 the generated document uses are encoded.
"""

from __future__ import annotations

import json
import struct
from typing import Any

Obj = dict[str, Any]


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _str(number: int, value: Any) -> bytes:
    return _bytes(number, str(value).encode()) if value not in (None, "") else b""


def _bool(number: int, value: Any) -> bytes:
    return _varint(number << 3) + b"\x01" if value else b""


def _int(number: int, value: Any) -> bytes:
    return _varint(number << 3) + _varint(int(value)) if value else b""


def _double(number: int, value: Any) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", float(value)) if value else b""


def _any(value: Any) -> bytes:
    """gnostic `Any`: the value as YAML (JSON is YAML) in field 2."""
    return _str(2, json.dumps(value, separators=(",", ":")))


def _extensions(number: int, node: Obj) -> bytes:
    out = b""
    for key, value in node.items():
        if key.startswith("x-"):
            out += _bytes(number, _str(1, key) + _bytes(2, _any(value)))
    return out


def schema(node: Obj) -> bytes:
    """A `Schema` message."""
    out = _str(1, node.get("$ref")) + _str(2, node.get("format")) + _str(3, node.get("title"))
    out += _str(4, node.get("description"))
    if "default" in node:
        out += _bytes(5, _any(node["default"]))
    out += _double(6, node.get("multipleOf")) + _double(7, node.get("maximum"))
    out += _bool(8, node.get("exclusiveMaximum")) + _double(9, node.get("minimum"))
    out += _bool(10, node.get("exclusiveMinimum")) + _int(11, node.get("maxLength"))
    out += _int(12, node.get("minLength")) + _str(13, node.get("pattern"))
    out += _int(14, node.get("maxItems")) + _int(15, node.get("minItems"))
    out += _bool(16, node.get("uniqueItems")) + _int(17, node.get("maxProperties"))
    out += _int(18, node.get("minProperties"))
    out += b"".join(_str(19, r) for r in node.get("required") or [])
    out += b"".join(_bytes(20, _any(v)) for v in node.get("enum") or [])
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out += _bytes(21, _bytes(1, schema(extra)))
    elif isinstance(extra, bool):
        out += _bytes(21, _varint(2 << 3) + (b"\x01" if extra else b"\x00"))
    kind = node.get("type")
    if kind:
        out += _bytes(22, b"".join(_str(1, t) for t in (kind if isinstance(kind, list) else [kind])))
    items = node.get("items")
    if isinstance(items, dict):
        out += _bytes(23, _bytes(1, schema(items)))
    out += b"".join(_bytes(24, schema(s)) for s in node.get("allOf") or [])
    props = node.get("properties")
    if isinstance(props, dict):
        named = b"".join(_bytes(1, _str(1, name) + _bytes(2, schema(s))) for name, s in props.items())
        out += _bytes(25, named)
    out += _bool(27, node.get("readOnly"))
    return out + _extensions(31, node)


def _parameter(p: Obj) -> bytes:
    """A `ParametersItem` holding a body or a query/path parameter."""
    if p.get("in") == "body":
        body = _str(1, p.get("description")) + _str(2, p["name"]) + _str(3, "body")
        body += _bool(4, p.get("required")) + _bytes(5, schema(p.get("schema") or {}))
        return _bytes(1, _bytes(1, body))
    common = (
        _bool(1, p.get("required")) + _str(2, p["in"]) + _str(3, p.get("description")) + _str(4, p["name"])
    )
    if p["in"] == "query":
        sub = common + _str(6, p.get("type")) + _bool(20, p.get("uniqueItems"))
        non_body = _bytes(3, sub)
    else:  # path
        sub = common + _str(5, p.get("type")) + _bool(19, p.get("uniqueItems"))
        non_body = _bytes(4, sub)
    return _bytes(1, _bytes(2, non_body))


def _operation(op: Obj) -> bytes:
    out = b"".join(_str(1, t) for t in op.get("tags") or [])
    out += _str(3, op.get("description")) + _str(5, op.get("operationId"))
    out += b"".join(_str(6, m) for m in op.get("produces") or [])
    out += b"".join(_str(7, m) for m in op.get("consumes") or [])
    out += b"".join(_bytes(8, _parameter(p)) for p in op.get("parameters") or [])
    codes = b""
    for code, resp in (op.get("responses") or {}).items():
        response = _str(1, resp.get("description"))
        if isinstance(resp.get("schema"), dict):
            response += _bytes(2, _bytes(1, schema(resp["schema"])))
        codes += _bytes(1, _str(1, code) + _bytes(2, _bytes(1, response)))
    out += _bytes(9, codes)
    out += b"".join(_str(10, s) for s in op.get("schemes") or [])
    return out + _extensions(13, op)


_METHODS = {"get": 2, "put": 3, "post": 4, "delete": 5, "options": 6, "head": 7, "patch": 8}


def document(doc: Obj) -> bytes:
    """A Swagger 2.0 document as a gnostic `openapi_v2.Document`."""
    info = doc.get("info") or {}
    out = _str(1, doc.get("swagger")) + _bytes(2, _str(1, info.get("title")) + _str(2, info.get("version")))
    paths = b""
    for name, item in (doc.get("paths") or {}).items():
        body = b"".join(_bytes(_METHODS[m], _operation(op)) for m, op in item.items() if m in _METHODS)
        body += b"".join(_bytes(9, _parameter(p)) for p in item.get("parameters") or [])
        paths += _bytes(2, _str(1, name) + _bytes(2, body))
    out += _bytes(8, paths)
    defs = b"".join(
        _bytes(1, _str(1, n) + _bytes(2, schema(s))) for n, s in (doc.get("definitions") or {}).items()
    )
    out += _bytes(9, defs)
    for requirement in doc.get("security") or []:
        named = b"".join(
            _bytes(1, _str(1, n) + _bytes(2, b"".join(_str(1, v) for v in values)))
            for n, values in requirement.items()
        )
        out += _bytes(12, named)
    security = b""
    for name, item in (doc.get("securityDefinitions") or {}).items():
        api_key = _str(1, item.get("type")) + _str(2, item.get("name")) + _str(3, item.get("in"))
        api_key += _str(4, item.get("description"))
        security += _bytes(1, _str(1, name) + _bytes(2, _bytes(2, api_key)))
    if security:
        out += _bytes(13, security)
    return out
