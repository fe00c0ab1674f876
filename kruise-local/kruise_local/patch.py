"""The three PATCH flavours of the Kubernetes API server, on JSON-like values.

* `json_merge_patch` — RFC 7386 (`application/merge-patch+json`).
* `json_patch` — RFC 6902 (`application/json-patch+json`).
* `strategic_merge_patch` — Kubernetes strategic merge patch (`application/strategic-merge-patch+json`)
  for core/v1 Pod-shaped objects and generic objects.

All functions are pure: they never mutate their arguments and never share structure with them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from kruise_local.errors import ApiError
from kruise_local.limits import CopyBudget, check_json_patch_length

__all__ = ["json_equal", "json_merge_patch", "json_patch", "strategic_merge_patch"]


# --------------------------------------------------------------------------------------------------
# RFC 7386
# --------------------------------------------------------------------------------------------------


def json_merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch: `null` deletes, objects merge, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    _merge_into(result, patch)
    return result


def _merge_into(result: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            child = result.get(key)
            if not isinstance(child, dict):
                child = {}
                result[key] = child
            _merge_into(child, value)
        else:
            result[key] = copy.deepcopy(value)


# --------------------------------------------------------------------------------------------------
# RFC 6902
# --------------------------------------------------------------------------------------------------

_OPS = ("add", "remove", "replace", "move", "copy", "test")
_BAD_ESCAPE = re.compile(r"~(?![01])")


def json_equal(a: Any, b: Any) -> bool:
    """JSON value equality: numbers compare numerically, but booleans are never numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    return bool(a == b)


def _parse_pointer(pointer: Any, what: str, index: int) -> list[str]:
    """Split an RFC 6901 JSON pointer into unescaped reference tokens; 400 on bad syntax."""
    if not isinstance(pointer, str):
        raise ApiError(400, f"json patch operation {index}: {what!r} must be a string, got {pointer!r}")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ApiError(400, f"json patch operation {index}: {what} {pointer!r} is not a JSON pointer")
    tokens = []
    for raw in pointer[1:].split("/"):
        if _BAD_ESCAPE.search(raw):
            raise ApiError(400, f"json patch operation {index}: {what} {pointer!r} has an invalid '~' escape")
        tokens.append(raw.replace("~1", "/").replace("~0", "~"))
    return tokens


def _invalid(message: str) -> ApiError:
    return ApiError(422, message, reason="Invalid")


def _list_index(container: list[Any], token: str, path: str, *, allow_end: bool) -> int:
    """Resolve an array reference token; `-` (and len when `allow_end`) means one past the end."""
    if token == "-":
        if allow_end:
            return len(container)
        raise _invalid(f"doc is missing path: {path!r}: '-' does not name an existing array element")
    if not token.isdigit() or not token.isascii() or (len(token) > 1 and token[0] == "0"):
        raise _invalid(f"doc is missing path: {path!r}: {token!r} is not a valid array index")
    idx = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if idx > limit:
        raise _invalid(f"doc is missing path: {path!r}: array index {idx} out of bounds")
    return idx


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    """The container holding the last token of `tokens`; 422 when it does not exist."""
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise _invalid(f"doc is missing path: {path!r}: missing value")
            node = node[token]
        elif isinstance(node, list):
            node = node[_list_index(node, token, path, allow_end=False)]
        else:
            raise _invalid(f"doc is missing path: {path!r}: cannot traverse a {_kind(node)}")
    if not isinstance(node, (dict, list)):
        raise _invalid(f"doc is missing path: {path!r}: cannot traverse a {_kind(node)}")
    return node


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def _get(doc: Any, tokens: list[str], path: str) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _invalid(f"doc is missing path: {path!r}: missing value")
        return parent[last]
    return parent[_list_index(parent, last, path, allow_end=False)]


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    else:
        parent.insert(_list_index(parent, last, path, allow_end=True), value)
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> tuple[Any, Any]:
    """Remove the value at `tokens`; returns (doc, removed value)."""
    if not tokens:
        raise _invalid('unable to remove the whole document (path "")')
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _invalid(f"unable to remove nonexistent key: {path!r}: missing value")
        return doc, parent.pop(last)
    return doc, parent.pop(_list_index(parent, last, path, allow_end=False))


def _replace(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _invalid(f"replace operation does not apply: doc is missing key: {path!r}: missing value")
        parent[last] = value
    else:
        parent[_list_index(parent, last, path, allow_end=False)] = value
    return doc


_Op = tuple[str, str, list[str], str, list[str], Any]


def _validate_op(op: Any, index: int) -> _Op:
    """Check one operation's shape (400 when malformed): (op, path, tokens, from, from_tokens, value)."""
    if not isinstance(op, dict):
        raise ApiError(400, f"json patch operation {index} must be an object, got {_kind(op)}")
    name = op.get("op")
    if name is None:
        raise ApiError(400, f"json patch operation {index} is missing the 'op' member")
    if name not in _OPS:
        raise ApiError(400, f"json patch operation {index}: unexpected kind of operation {name!r}")
    if "path" not in op:
        raise ApiError(400, f"json patch operation {index} ({name}) is missing the 'path' member")
    path = op["path"]
    tokens = _parse_pointer(path, "path", index)
    from_path, from_tokens = "", []
    if name in ("move", "copy"):
        if "from" not in op:
            raise ApiError(400, f"json patch operation {index} ({name}) is missing the 'from' member")
        from_path = op["from"]
        from_tokens = _parse_pointer(from_path, "from", index)
    if name in ("add", "replace", "test") and "value" not in op:
        raise ApiError(400, f"json patch operation {index} ({name}) is missing the 'value' member")
    return name, path, tokens, from_path, from_tokens, op.get("value")


def json_patch(target: Any, ops: Any) -> Any:
    """Apply an RFC 6902 JSON patch atomically.

    Malformed operations raise ApiError(400); operations that do not apply to the document (missing
    path, out-of-range index, failed `test`) raise ApiError(422, reason="Invalid"). The real server's bounds
    hold: more than 10,000 operations is a 413, `copy` operations adding more than 3 MiB in all a 422
    (see `limits`).
    """
    if not isinstance(ops, list):
        raise ApiError(400, f"json patch must be a list of operations, got {_kind(ops)}")
    check_json_patch_length(ops)
    checked = [_validate_op(op, i) for i, op in enumerate(ops)]
    budget = CopyBudget()
    doc = copy.deepcopy(target)
    for name, path, tokens, from_path, from_tokens, value in checked:
        if name == "add":
            doc = _add(doc, tokens, copy.deepcopy(value), path)
        elif name == "remove":
            doc, _ = _remove(doc, tokens, path)
        elif name == "replace":
            doc = _replace(doc, tokens, copy.deepcopy(value), path)
        elif name == "test":
            current = _get(doc, tokens, path)
            if not json_equal(current, value):
                raise _invalid(f"testing value {path!r} failed: test failed")
        elif name == "move":
            if from_tokens == tokens:
                _get(doc, tokens, path)  # must exist; otherwise a no-op
                continue
            if tokens[: len(from_tokens)] == from_tokens:
                raise _invalid(f"move operation: {path!r} is a child of 'from' {from_path!r}")
            doc, moved = _remove(doc, from_tokens, from_path)
            doc = _add(doc, tokens, moved, path)
        else:
            copied = _get(doc, from_tokens, from_path)
            budget.spend(copied)  # before the copy is made: a refused copy never costs its memory
            doc = _add(doc, tokens, copy.deepcopy(copied), path)
    return doc


# --------------------------------------------------------------------------------------------------
# Kubernetes strategic merge patch
# --------------------------------------------------------------------------------------------------

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"
_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})
_STATUS_LISTS = frozenset({"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"})
_PRIMITIVE_MERGE = object()  # marker: list of scalars merged as a set (e.g. metadata.finalizers)

# Lists keyed by the same field wherever they appear (declared `patchMergeKey` in core/v1 and meta/v1).
_KEYED_ANYWHERE = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "ephemeralContainerStatuses": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
}


def _merge_key(path: tuple[str, ...]) -> str | object | None:
    """The merge key of the list at `path` (field names from the root, list indices omitted).

    Returns a field name for keyed lists, `_PRIMITIVE_MERGE` for merged scalar lists, None when the
    list is atomic (replaced wholesale, e.g. `tolerations`).
    """
    field = path[-1]
    parent = path[-2] if len(path) > 1 else None
    if field == "ports":
        if parent in _CONTAINER_LISTS:
            return "containerPort"
        if path[-2:] == ("spec", "ports") and (len(path) == 2 or path[-3] != "template"):
            return "port"  # Service spec.ports
        return None
    if field == "finalizers" and parent == "metadata":
        return _PRIMITIVE_MERGE
    if field == "ownerReferences" and parent == "metadata":
        return "uid"
    if field == "conditions" and parent == "status":
        return "type"
    if field in ("podIPs", "hostIPs") and parent == "status":
        return "ip"
    if field in _STATUS_LISTS and parent != "status":
        return None
    return _KEYED_ANYWHERE.get(field)


def strategic_merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a Kubernetes strategic merge patch to a Pod-shaped or generic object.

    Lists with a declared merge key (containers by `name`, volumeMounts by `mountPath`, container
    ports by `containerPort`, ...) merge element-wise, `metadata.finalizers` merges as an ordered set,
    other lists are replaced. Supports `null` deletion, `$patch: replace|delete|merge`, `$retainKeys`,
    `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>`. Malformed patches raise
    ApiError(400).
    """
    if not isinstance(patch, dict):
        raise ApiError(400, f"strategic merge patch must be a JSON object, got {_kind(patch)}")
    original = copy.deepcopy(target) if isinstance(target, dict) else {}
    return _smp_map(original, patch, ())


def _field_name(path: tuple[str, ...]) -> str:
    return ".".join(path) if path else "<root>"


def _smp_map(original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    """Merge `patch` into `original` (already a private copy, modified in place and returned)."""
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == "replace":
            return _smp_map({}, {k: v for k, v in patch.items() if k != _DIRECTIVE}, path)
        if directive == "delete":
            return {}
        if directive != "merge":
            raise ApiError(400, f"unknown patch type: {directive!r} in map at {_field_name(path)}")

    if _RETAIN_KEYS in patch:
        retain = patch[_RETAIN_KEYS]
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise ApiError(400, f"$retainKeys at {_field_name(path)} must be a list of strings")
        for key, value in patch.items():
            if not key.startswith("$") and key not in retain and value is not None:
                raise ApiError(
                    400, f"$retainKeys at {_field_name(path)} does not contain patched key {key!r}"
                )
        for key in list(original):
            if key not in retain:
                del original[key]

    # Deletions from primitive lists apply to the original before the patch merges in.
    for key, values in patch.items():
        if not key.startswith(_DELETE_PRIMITIVE):
            continue
        field = key[len(_DELETE_PRIMITIVE) :]
        if not isinstance(values, list):
            raise ApiError(400, f"{key} at {_field_name(path)} must be a list")
        current = original.get(field)
        if isinstance(current, list):
            original[field] = [v for v in current if not any(json_equal(v, d) for d in values)]

    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_DELETE_PRIMITIVE):
            continue
        if key.startswith(_SET_ORDER):
            if not isinstance(value, list):
                raise ApiError(400, f"{key} at {_field_name(path)} must be a list")
            orders[key[len(_SET_ORDER) :]] = value
            continue
        child_path = (*path, key)
        if value is None:
            original.pop(key, None)
        elif isinstance(value, dict):
            current = original.get(key)
            base = current if isinstance(current, dict) else {}
            original[key] = _smp_map(base, value, child_path)
        elif isinstance(value, list):
            current = original.get(key)
            original[key] = _smp_list(current if isinstance(current, list) else [], value, child_path)
        else:
            original[key] = value

    for field, order in orders.items():
        current = original.get(field)
        if isinstance(current, list):
            original[field] = _apply_order(current, order, _merge_key((*path, field)))
    return original


def _smp_list(original: list[Any], patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    key = _merge_key(path)
    if key is None:
        return copy.deepcopy(patch)
    if key is _PRIMITIVE_MERGE:
        return _smp_primitive_list(original, patch, path)
    assert isinstance(key, str)
    return _smp_keyed_list(original, patch, path, key)


def _smp_primitive_list(original: list[Any], patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    items: list[Any] = []
    replace = False
    for item in patch:
        if isinstance(item, dict) and _DIRECTIVE in item:
            if item[_DIRECTIVE] == "replace":
                replace = True
                continue
            if item[_DIRECTIVE] == "merge":
                continue
            raise ApiError(400, f"unknown patch type: {item[_DIRECTIVE]!r} in list {_field_name(path)}")
        if isinstance(item, (dict, list)):
            raise ApiError(400, f"list {_field_name(path)} merges scalars, got {_kind(item)}")
        items.append(item)
    result: list[Any] = [] if replace else list(original)
    for item in items:
        if not any(json_equal(item, existing) for existing in result):
            result.append(item)
    return result


def _smp_keyed_list(original: list[Any], patch: list[Any], path: tuple[str, ...], key: str) -> list[Any]:
    field = _field_name(path)
    for item in patch:
        if not isinstance(item, dict):
            raise ApiError(
                400, f"list {field} is merged by key {key!r}; elements must be objects, got {_kind(item)}"
            )
    if any(item.get(_DIRECTIVE) == "replace" for item in patch):
        original = []
        patch = [item for item in patch if item.get(_DIRECTIVE) != "replace"]
    result = list(original)
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if directive not in (None, "merge", "delete"):
            raise ApiError(400, f"unknown patch type: {directive!r} in list {field}")
        if key not in item:
            raise ApiError(400, f"map: {item!r} does not contain declared merge key: {key} (in list {field})")
        value = item[key]
        if directive == "delete":
            result = [
                e for e in result if not (isinstance(e, dict) and key in e and json_equal(e[key], value))
            ]
            continue
        for i, existing in enumerate(result):
            if isinstance(existing, dict) and key in existing and json_equal(existing[key], value):
                result[i] = _smp_map(existing, item, path)
                break
        else:
            result.append(_smp_map({}, item, path))
    return result


def _apply_order(items: list[Any], order: list[Any], key: str | object | None) -> list[Any]:
    """Reorder the elements named in `order` (by merge key, or by value) within the slots they occupy."""

    def ident(item: Any) -> Any:
        if isinstance(key, str):
            return item.get(key) if isinstance(item, dict) else None
        return item

    wanted = [ident(o) if isinstance(key, str) else o for o in order]
    rank: dict[str, int] = {}
    for i, w in enumerate(wanted):
        rank.setdefault(repr(w), i)
    slots = [i for i, item in enumerate(items) if repr(ident(item)) in rank]
    ordered = sorted((items[i] for i in slots), key=lambda item: rank[repr(ident(item))])
    result = list(items)
    for slot, item in zip(slots, ordered, strict=True):
        result[slot] = item
    return result
