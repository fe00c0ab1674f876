"""Pod updates (pkg/apis/core/validation/validation.go `ValidatePodUpdate`, the pod strategy)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from .decode import _check_decodable
from .fields import MAX_INT32, Cause, _go_value, _raise_invalid, forbidden, invalid_value, required
from .meta import validate_metadata_update
from .names import _inclusive_range, _int
from .pod_spec import POD_UPDATE_FORBIDDEN, _pod_metadata_and_spec_causes, _tolerations_causes
from .quantity import format_quantity, parse_quantity

_QUANTITY_MAP_KEYS = {"requests", "limits", "overhead", "capacity", "allocatable"}
_QUANTITY_KEYS = {"sizeLimit", "divisor"}


def _normalize(value: Any, key: str = "") -> Any:
    """Semantic form for spec comparison: nulls and empty lists/maps dropped, quantities as amounts."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if key in _QUANTITY_MAP_KEYS and isinstance(v, str | int | float) and not isinstance(v, bool):
                try:
                    out[k] = ("quantity", parse_quantity(v))
                    continue
                except ValueError:
                    pass
            if k in _QUANTITY_KEYS and isinstance(v, str | int | float) and not isinstance(v, bool):
                try:
                    out[k] = ("quantity", parse_quantity(v))
                    continue
                except ValueError:
                    pass
            n = _normalize(v, k)
            if n is None or n == {} or n == []:
                continue
            out[k] = n
        return out
    if isinstance(value, list):
        return [_normalize(v, key) for v in value]
    if isinstance(value, bool):
        return ("bool", value)
    return value


def _show(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("quantity", "bool"):
        return format_quantity(value[1]) if value[0] == "quantity" else _go_value(value[1])
    try:
        return json.dumps(_plain(value), sort_keys=True, separators=(",", ":"))
    except TypeError:
        return repr(value)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("quantity", "bool"):
        return format_quantity(value[1]) if value[0] == "quantity" else value[1]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _diff(old: Any, new: Any, path: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        lines: list[str] = []
        for key in sorted(set(old) | set(new)):
            sub = f"{path}.{key}" if path else key
            if key not in new:
                lines.append(f"-\t{sub}: {_show(old[key])}")
            elif key not in old:
                lines.append(f"+\t{sub}: {_show(new[key])}")
            else:
                lines += _diff(old[key], new[key], sub)
        return lines
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        lines = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            lines += _diff(a, b, f"{path}[{i}]")
        return lines
    if old == new:
        return []
    return [f"-\t{path}: {_show(old)}", f"+\t{path}: {_show(new)}"]


def _container_update_causes(new: Any, old: Any, field: str) -> tuple[list[Cause], bool]:
    new_list, old_list = list(new or []), list(old or [])
    if len(new_list) != len(old_list):
        return [forbidden(field, "pod updates may not add or remove containers")], True
    causes: list[Cause] = []
    for i, ctr in enumerate(new_list):
        image = (ctr or {}).get("image") if isinstance(ctr, Mapping) else None
        if not image:
            causes.append(required(f"{field}[{i}].image"))
        elif isinstance(image, str) and image != image.strip():
            causes.append(
                invalid_value(f"{field}[{i}].image", image, "must not have leading or trailing whitespace")
            )
    return causes, False


def _only_added_tolerations(new: Any, old: Any) -> list[Cause]:
    new_list = [t for t in (new or []) if isinstance(t, Mapping)]
    for old_tol in old or []:
        if not isinstance(old_tol, Mapping):
            continue
        wanted = _normalize({k: v for k, v in old_tol.items() if k != "tolerationSeconds"})
        if not any(
            _normalize({k: v for k, v in t.items() if k != "tolerationSeconds"}) == wanted for t in new_list
        ):
            return [
                forbidden(
                    "spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"
                )
            ]
    return _tolerations_causes(new, "spec.tolerations")


def _only_deleted_gates(new: Any, old: Any) -> list[Cause]:
    old_names = {(g or {}).get("name") for g in (old or []) if isinstance(g, Mapping)}
    causes: list[Cause] = []
    for i, gate in enumerate(new or []):
        name = (gate or {}).get("name") if isinstance(gate, Mapping) else None
        if name not in old_names:
            message = f"only deletion is allowed, but found new scheduling gate '{name}'"
            causes.append(forbidden(f"spec.schedulingGates[{i}].name", message))
    return causes


def validate_pod_update(
    old: Mapping[str, Any], new: Mapping[str, Any], *, relaxed_env_names: bool = False
) -> None:
    """Validate a pod update (the new object already defaulted); raise 422 Invalid naming every cause.

    Metadata may change except name/namespace/uid/creationTimestamp (`field is immutable`). In the spec only
    `containers[*].image` and `initContainers[*].image` (not emptied: `Required value`),
    `activeDeadlineSeconds` (set when unset, or lowered; never raised nor unset), `tolerations` (additions;
    existing ones may only change their tolerationSeconds), the removal of `schedulingGates`, additions to
    `nodeSelector` while the pod is gated, and `terminationGracePeriodSeconds` from a negative value to 1 may
    change. Adding or removing containers gives `spec.containers: Forbidden: pod updates may not add or remove
    containers`; anything else `spec: Forbidden: pod updates may not change fields other than ...` followed by
    a diff.
    """
    _check_decodable("Pod", new)
    causes = validate_metadata_update("Pod", old, new)
    causes += _pod_metadata_and_spec_causes(new, relaxed_env_names)
    old_spec: Mapping[str, Any] = old.get("spec") or {}
    new_spec: Mapping[str, Any] = new.get("spec") or {}
    for key in ("containers", "initContainers"):
        errs, stop = _container_update_causes(new_spec.get(key), old_spec.get(key), f"spec.{key}")
        causes += errs
        if stop:
            _raise_invalid("Pod", new, causes)
    new_deadline, old_deadline = new_spec.get("activeDeadlineSeconds"), old_spec.get("activeDeadlineSeconds")
    if new_deadline is not None:
        number = _int(new_deadline)
        if number is None or not 0 <= number <= MAX_INT32:
            causes.append(
                invalid_value("spec.activeDeadlineSeconds", new_deadline, _inclusive_range(0, MAX_INT32))
            )
            _raise_invalid("Pod", new, causes)
        if old_deadline is not None and (_int(old_deadline) or 0) < (number or 0):
            message = "must be less than or equal to previous value"
            causes.append(invalid_value("spec.activeDeadlineSeconds", new_deadline, message))
            _raise_invalid("Pod", new, causes)
    elif old_deadline is not None:
        message = "must not update from a positive integer to nil value"
        causes.append(invalid_value("spec.activeDeadlineSeconds", None, message))
    causes += _only_added_tolerations(new_spec.get("tolerations"), old_spec.get("tolerations"))
    causes += _only_deleted_gates(new_spec.get("schedulingGates"), old_spec.get("schedulingGates"))

    munged = copy.deepcopy(dict(new_spec))
    for key in ("containers", "initContainers"):
        for ctr, old_ctr in zip(munged.get(key) or [], old_spec.get(key) or [], strict=False):
            if isinstance(ctr, dict) and isinstance(old_ctr, Mapping):
                ctr["image"] = old_ctr.get("image")
    for key in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged.pop(key, None)
        if key in old_spec:
            munged[key] = copy.deepcopy(old_spec[key])
    old_grace = _int(old_spec.get("terminationGracePeriodSeconds"))
    if old_grace is not None and old_grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = old_grace
    if old_spec.get("schedulingGates"):
        old_selector = old_spec.get("nodeSelector") or {}
        new_selector = munged.get("nodeSelector") or {}
        if new_selector != old_selector:
            if any(new_selector.get(k) != v for k, v in old_selector.items()):
                message = "only additions to spec.nodeSelector are allowed (no mutations or deletions)"
                causes.append(forbidden("spec.nodeSelector", message))
            munged["nodeSelector"] = copy.deepcopy(old_selector)
    old_norm, new_norm = _normalize(old_spec), _normalize(munged)
    if old_norm != new_norm:
        diff = "\n".join(_diff(old_norm, new_norm))
        causes.append(forbidden("spec", f"{POD_UPDATE_FORBIDDEN}\n{diff}"))
    _raise_invalid("Pod", new, causes)
