"""Field errors (k8s.io/apimachinery/pkg/util/validation/field)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kruise_local.errors import invalid

from .quantity import format_quantity

Cause = dict[str, str]
MAX_INT32 = 2**31 - 1


def _go_value(value: Any) -> str:
    """A bad value as `field.Error.ErrorBody` prints it: %q for strings, %v for scalars, else JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Decimal):
        return json.dumps(format_quantity(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _cause(reason: str, field: str, message: str) -> Cause:
    return {"reason": reason, "message": message, "field": field}


def required(field: str, detail: str = "") -> Cause:
    """`field: Required value[: detail]`."""
    return _cause("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def invalid_value(field: str, value: Any, detail: str = "") -> Cause:
    """`field: Invalid value: <value>[: detail]`."""
    return _cause(
        "FieldValueInvalid", field, f"Invalid value: {_go_value(value)}" + (f": {detail}" if detail else "")
    )


def duplicate(field: str, value: Any) -> Cause:
    """`field: Duplicate value: <value>`."""
    return _cause("FieldValueDuplicate", field, f"Duplicate value: {_go_value(value)}")


def forbidden(field: str, detail: str) -> Cause:
    """`field: Forbidden: detail`."""
    return _cause("FieldValueForbidden", field, "Forbidden" + (f": {detail}" if detail else ""))


def not_supported(field: str, value: Any, supported: Iterable[str]) -> Cause:
    """`field: Unsupported value: <value>: supported values: "a", "b"`."""
    values = ", ".join(json.dumps(str(v)) for v in supported)
    detail = f": supported values: {values}" if values else ""
    return _cause("FieldValueNotSupported", field, f"Unsupported value: {_go_value(value)}{detail}")


def not_found_value(field: str, value: Any) -> Cause:
    """`field: Not found: <value>`."""
    return _cause("FieldValueNotFound", field, f"Not found: {_go_value(value)}")


def too_long(field: str, max_bytes: int) -> Cause:
    """`field: Too long: may not be more than N bytes`."""
    unit = "byte" if max_bytes == 1 else "bytes"
    return _cause("FieldValueTooLong", field, f"Too long: may not be more than {max_bytes} {unit}")


def _dedupe(causes: list[Cause]) -> list[Cause]:
    seen: set[tuple[str, str, str]] = set()
    out: list[Cause] = []
    for c in causes:
        key = (c["reason"], c["field"], c["message"])
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _raise_invalid(kind: str, obj: Mapping[str, Any], causes: list[Cause], group: str = "") -> None:
    if causes:
        name = (obj.get("metadata") or {}).get("name") or ""
        raise invalid(kind, name, _dedupe(causes), group=group)
