"""Server-side apply and `managedFields`: a tested subset of structured-merge-diff (sigs.k8s.io/structured-
merge-diff/v4) and the API server's field manager (`apiserver/pkg/endpoints/handlers/fieldmanager`).

No maintained Python implementation exists, so this re-implements what `kubectl apply --server-side` and the
clients' `apply` need, from the served schemas (`openapi.py`: `x-kubernetes-list-type`/`-list-map-keys`,
`x-kubernetes-patch-merge-key`, `x-kubernetes-map-type`):

- field sets (`typed.ToFieldSet`): leaves, associative-list items (`k:{...}`), set items (`v:...`); atomic
  lists and maps are leaves; fields the schema does not know are deduced (maps granular, lists atomic);
- `Updater.Apply`: the applied config is merged into the live object (associative lists by key, sets by
  value, the rest replaced), fields the manager applied before and no longer applies are removed unless
  another manager owns them (`prune`), fields changed that other managers own are conflicts (409,
  `FieldManagerConflict` causes) unless `force`, which takes them over;
- `Updater.Update` for every other write: the writer (`fieldManager`, else the User-Agent's prefix) owns what
  it changed, other managers lose it;
- the stripped fields (`stripMeta`: apiVersion, kind, metadata.name/namespace/uid/resourceVersion/...), and
  `status` is not owned through the main resource (`ResetFieldsStrategy`).

- the managedFields a create, update or patch sends replace the live ones before its own change is recorded
  (`FieldManager.Update`: `DecodeManagedFields(newObj)` first, the live object's only when the sent ones are
  empty or do not decode), so a client can move ownership (kubectl >= 1.26 does, with a JSON patch, when an
  object moves from client-side to server-side apply: `csaupgrade`); `[{}]` resets them.

Not modelled: managers per API version (one version per kind here), the status subresource's managers,
`x-kubernetes-unions`.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from . import openapi
from .errors import ApiError
from .resources import Resource
from .store import deep_copy, now_iso

Obj = dict[str, Any]
Path = tuple[str, ...]  # path elements as FieldsV1 keys: "f:name", "k:{...}", "v:...", "i:N"
_ITEM = object()  # the value recorded for an associative-list item (a member with children)
_STRIPPED = {
    ("f:apiVersion",),
    ("f:kind",),
    ("f:metadata", "f:name"),
    ("f:metadata", "f:namespace"),
    ("f:metadata", "f:uid"),
    ("f:metadata", "f:resourceVersion"),
    ("f:metadata", "f:generation"),
    ("f:metadata", "f:creationTimestamp"),
    ("f:metadata", "f:deletionTimestamp"),
    ("f:metadata", "f:deletionGracePeriodSeconds"),
    ("f:metadata", "f:selfLink"),
    ("f:metadata", "f:managedFields"),
}


# -- schemas ------------------------------------------------------------------------------------------------
@lru_cache(maxsize=32)
def _schemas(res: Resource, version: str) -> tuple[Obj, dict[str, Obj]]:
    defs = openapi.definitions_v3(res, version)
    return defs[openapi.definition_name(res, version)], defs


def _resolve(schema: Obj | None, defs: dict[str, Obj]) -> Obj | None:
    for _ in range(8):
        if not isinstance(schema, dict):
            return None
        ref = schema.get("$ref") or next(
            (a.get("$ref") for a in schema.get("allOf") or [] if "$ref" in a), None
        )
        if not ref:
            return schema
        schema = defs.get(ref.rsplit("/", 1)[-1])
    return schema


def _list_kind(schema: Obj) -> tuple[str, list[str]]:
    """("map", keys) | ("set", []) | ("atomic", []) for an array schema."""
    kind = schema.get("x-kubernetes-list-type")
    if kind == "map":
        return "map", list(schema.get("x-kubernetes-list-map-keys") or [])
    if kind == "set":
        return "set", []
    if kind is None and schema.get("x-kubernetes-patch-strategy", "").startswith("merge"):
        key = schema.get("x-kubernetes-patch-merge-key")
        return ("map", [key]) if key else ("set", [])
    return "atomic", []


_CHILDREN: dict[tuple[int, str], Obj | None] = {}  # the cached schemas live as long as the process


def _child(schema: Obj | None, key: str, defs: dict[str, Obj]) -> Obj | None:
    if schema is None:
        return None
    memo = (id(schema), key)
    if memo in _CHILDREN:
        return _CHILDREN[memo]
    props = schema.get("properties") or {}
    if key in props:
        found = _resolve(props[key], defs)
    else:
        extra = schema.get("additionalProperties")
        found = _resolve(extra, defs) if isinstance(extra, dict) else None
    if len(_CHILDREN) < 100_000 and (key in props or not schema.get("additionalProperties")):
        _CHILDREN[memo] = found  # field names of structs only: map keys are the user's (unbounded)
    return found


def _key_element(item: Any, keys: list[str]) -> str | None:
    if not isinstance(item, dict) or not all(k in item for k in keys):
        return None
    return "k:" + json.dumps({k: item[k] for k in sorted(keys)}, separators=(",", ":"))


def _value_element(item: Any) -> str:
    return "v:" + json.dumps(item, separators=(",", ":"), sort_keys=True)


# -- field sets ---------------------------------------------------------------------------------------------
def field_values(obj: Any, schema: Obj | None, defs: dict[str, Obj], path: Path = ()) -> dict[Path, Any]:
    """The members of an object's field set with their values (`_ITEM` for associative-list items)."""
    out: dict[Path, Any] = {}
    _walk(obj, schema, defs, path, out)
    return {p: v for p, v in out.items() if p not in _STRIPPED}


def _walk(value: Any, schema: Obj | None, defs: dict[str, Obj], path: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and (schema is None or schema.get("x-kubernetes-map-type") != "atomic"):
        if (schema is not None and schema.get("type") not in (None, "object")) or not value:
            if path:  # an empty struct or map is a member itself (`f:resources: {}`)
                out[path] = value
            return
        for key, child in value.items():
            if child is None:
                continue
            if not path and key == "status":
                continue  # not owned through the main resource
            _walk(child, _child(schema, key, defs), defs, (*path, f"f:{key}"), out)
        return
    if isinstance(value, list) and schema is not None and schema.get("type") == "array":
        kind, keys = _list_kind(schema)
        items = _resolve(schema.get("items"), defs)
        if kind == "map":
            for item in value:
                element = _key_element(item, keys)
                if element is None:
                    continue
                out[(*path, element)] = _ITEM
                _walk(item, items, defs, (*path, element), out)
            return
        if kind == "set":
            for item in value:
                out[(*path, _value_element(item))] = item
            return
    if path:
        out[path] = value


def to_fields_v1(paths: set[Path]) -> Obj:
    """A set of paths as FieldsV1 (nested `f:`/`k:`/`v:` keys, `.` marking a member that has children)."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = root
        for element in path:
            node = node[element]
        if node:
            node["."] = {}
    return root


def from_fields_v1(fields: Any, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    if not isinstance(fields, dict):
        return out
    for key, child in fields.items():
        if key == ".":
            out.add(prefix)
            continue
        path = (*prefix, key)
        if isinstance(child, dict) and child and set(child) != {"."}:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


def path_string(path: Path) -> str:
    """fieldpath's `Path.String()`: `.spec.containers[name="c"].image`."""
    out = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            out += "." + rest
        elif kind == "k":
            keys = json.loads(rest)
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif kind == "v":
            out += f"[={rest}]"
        else:
            out += f"[{rest}]"
    return out


# -- managedFields ------------------------------------------------------------------------------------------
def _managers(obj: Obj) -> list[Obj]:
    entries = (obj.get("metadata") or {}).get("managedFields")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _entry(manager: str, operation: str, api_version: str, paths: set[Path]) -> Obj:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": api_version,
        "time": now_iso(),
        "fieldsType": "FieldsV1",
        "fieldsV1": to_fields_v1(paths),
    }


def _compare(old: dict[Path, Any], new: dict[Path, Any]) -> tuple[set[Path], set[Path], set[Path]]:
    """(modified, added, removed) between two field-value maps."""
    modified = {p for p in old.keys() & new.keys() if old[p] is not _ITEM and old[p] != new[p]}
    return modified, set(new) - set(old), set(old) - set(new)


def _without(entries: list[Obj], lost: set[Path], keep: tuple[str, str]) -> list[Obj]:
    out = []
    for e in entries:
        if (e.get("manager"), e.get("operation")) == keep:
            out.append(e)
            continue
        owned = from_fields_v1(e.get("fieldsV1"))
        left = owned - lost
        if left == owned:
            out.append(e)
        elif left:
            out.append({**e, "fieldsV1": to_fields_v1(left)})
    return out


def update(res: Resource, version: str, old: Obj | None, new: Obj, manager: str) -> None:
    """`Updater.Update` for a create/update/patch: sets `new`'s managedFields; `manager` owns what changed."""
    root, defs = _schemas(res, version)
    sent = _decoded((new.get("metadata") or {}).get("managedFields"))
    entries = sent if sent is not None else _managers(old) if old is not None else []
    before = field_values(_without_meta(old), root, defs) if old is not None else {}
    after = field_values(_without_meta(new), root, defs)
    modified, added, removed = _compare(before, after)
    changed = modified | added
    if old is not None and not changed and not removed:
        new["metadata"]["managedFields"] = entries or None
        _drop_empty(new)
        return
    key = (manager, "Update")
    entries = _without(entries, changed | removed, key)
    mine = next((e for e in entries if (e.get("manager"), e.get("operation")) == key), None)
    owned = (from_fields_v1(mine.get("fieldsV1")) if mine else set()) | changed
    owned -= removed
    entries = [e for e in entries if e is not mine]
    if owned:
        entries.append(_entry(manager, "Update", res.api_version(version), owned))
    new["metadata"]["managedFields"] = entries or None
    _drop_empty(new)


def _decoded(sent: Any) -> list[Obj] | None:
    """The managedFields a write sends as `DecodeManagedFields` takes them, entries with no fields left out
    (`[{}]` resets); None when there are none or one does not decode (the live ones are kept then)."""
    if not isinstance(sent, list) or not sent:
        return None
    entries = []
    for entry in sent:
        if not isinstance(entry, dict):
            return None
        if not entry:
            continue
        if entry.get("fieldsType") != "FieldsV1" or not isinstance(entry.get("fieldsV1", {}), dict):
            return None
        entries.append(entry)
    return entries


def _without_meta(obj: Obj | None) -> Obj:
    if obj is None:
        return {}
    out = dict(obj)
    out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return out


def _drop_empty(obj: Obj) -> None:
    if not obj["metadata"].get("managedFields"):
        obj["metadata"].pop("managedFields", None)


def apply(res: Resource, version: str, live: Obj | None, config: Obj, manager: str, force: bool) -> Obj:
    """`Updater.Apply`: the object `config` applied by `manager` makes of `live` (None: it is created)."""
    root, defs = _schemas(res, version)
    entries = _managers(live) if live is not None else []
    key = (manager, "Apply")
    previous = next((e for e in entries if (e.get("manager"), e.get("operation")) == key), None)
    last = from_fields_v1(previous.get("fieldsV1")) if previous else set()
    applied = set(field_values(config, root, defs))
    base = _without_meta(live) if live is not None else {}
    merged = _merge(base, config, root, defs)
    appliers = set(applied)
    for e in entries:
        if e is not previous and e.get("operation") == "Apply":
            appliers |= from_fields_v1(e.get("fieldsV1"))
    merged = _prune_unapplied(merged, last, appliers, root, defs)
    before = field_values(base, root, defs)
    modified, added, removed = _compare(before, field_values(merged, root, defs))
    changed = modified | added
    conflicts: list[tuple[Obj, set[Path]]] = []
    for e in entries:
        if e is previous:
            continue
        clash = from_fields_v1(e.get("fieldsV1")) & changed
        if clash:
            conflicts.append((e, clash))
    if conflicts and not force:
        raise _conflict_error(conflicts)
    entries = _without([e for e in entries if e is not previous], changed | removed, key)
    entries = [e for e in entries if from_fields_v1(e.get("fieldsV1"))]
    if applied:
        entries.append(_entry(manager, "Apply", res.api_version(version), applied))
    merged.setdefault("metadata", {})["managedFields"] = entries or None
    _drop_empty(merged)
    if live is not None and "status" in live:
        merged["status"] = deep_copy(live["status"])
    return merged


def _prune_unapplied(
    merged: Obj, last: set[Path], appliers: set[Path], root: Obj, defs: dict[str, Obj]
) -> Obj:
    """`Updater.prune` (merge/update.go): what the manager applied last time and no longer applies
    goes, unless an applier (this one's new config included) owns it; only members of the last applied set go
    (`addBackOwnedItems`, then `addBackDanglingItems`). So `data: {}` then `data: {k: v}` keeps `data`: the
    new set owns `data.k`, which puts `data` back."""
    if not last:
        return merged
    merged_set = set(field_values(merged, root, defs))
    pruned = _remove_items(merged, last)
    pruned_set = set(field_values(pruned, root, defs))
    pruned = _remove_items(merged, merged_set - (pruned_set | appliers))
    pruned_set = set(field_values(pruned, root, defs))
    return _remove_items(merged, (merged_set - pruned_set) & last)


def _remove_items(obj: Obj, paths: set[Path]) -> Obj:
    """`TypedValue.RemoveItems` (typed/remove.go): a copy of `obj` without the members `paths` names; a map or
    list left empty by the removal becomes null, so it is not stored (`removingWalker` sets no `out`)."""
    out = deep_copy(obj)
    for path in sorted(paths, key=len, reverse=True):
        _remove(out, path)
        for depth in range(len(path) - 1, 0, -1):
            if _get(out, path[:depth]) not in ({}, []):
                break
            _remove(out, path[:depth])
    return out


def _get(obj: Any, path: Path) -> Any:
    for element in path:
        obj = _step(obj, element)
        if obj is None:
            return None
    return obj


def _conflict_error(conflicts: list[tuple[Obj, set[Path]]]) -> ApiError:
    causes = []
    for entry, paths in conflicts:
        who = f'conflict with "{entry.get("manager")}"'
        if entry.get("subresource"):
            who += f' with subresource "{entry["subresource"]}"'
        if entry.get("apiVersion"):
            who += f" using {entry['apiVersion']}"
        for path in sorted(paths):
            causes.append({"reason": "FieldManagerConflict", "message": who, "field": path_string(path)})
    n = len(causes)
    if n == 1:
        message = f"Apply failed with 1 conflict: {causes[0]['message']}: {causes[0]['field']}"
    else:
        lines = "\n".join(f"- {c['field']}" for c in causes)
        who = causes[0]["message"].replace("conflict", "conflicts", 1)
        message = f"Apply failed with {n} conflicts: {who}:\n{lines}"
    return ApiError(409, message, reason="Conflict", causes=causes)


def _merge(live: Any, config: Any, schema: Obj | None, defs: dict[str, Obj]) -> Any:
    """structured-merge-diff's merge of an applied config into the live value."""
    if (
        isinstance(config, dict)
        and isinstance(live, dict)
        and (schema is None or schema.get("x-kubernetes-map-type") != "atomic")
    ):
        out = deep_copy(live)
        for key, value in config.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(live.get(key), value, _child(schema, key, defs), defs)
        return out
    if (
        isinstance(config, list)
        and isinstance(live, list)
        and schema is not None
        and schema.get("type") == "array"
    ):
        kind, keys = _list_kind(schema)
        items = _resolve(schema.get("items"), defs)
        if kind == "map":
            out = deep_copy(live)
            index = {_key_element(item, keys): i for i, item in enumerate(out)}
            for item in config:
                element = _key_element(item, keys)
                if element is not None and element in index:
                    out[index[element]] = _merge(out[index[element]], item, items, defs)
                else:
                    out.append(deep_copy(item))
            return out
        if kind == "set":
            out = deep_copy(live)
            present = {_value_element(v) for v in out}
            out += [deep_copy(v) for v in config if _value_element(v) not in present]
            return out
    return deep_copy(config)


def _remove(obj: Any, path: Path) -> None:
    """Remove one member (a field, a map key, a list item) from an object."""
    parent = obj
    for element in path[:-1]:
        parent = _step(parent, element)
        if parent is None:
            return
    last = path[-1]
    kind, _, rest = last.partition(":")
    if kind == "f" and isinstance(parent, dict):
        parent.pop(rest, None)
    elif kind in ("k", "v") and isinstance(parent, list):
        parent[:] = [item for item in parent if not _matches(item, last)]


def _step(value: Any, element: str) -> Any:
    kind, _, rest = element.partition(":")
    if kind == "f":
        return value.get(rest) if isinstance(value, dict) else None
    if isinstance(value, list):
        for item in value:
            if _matches(item, element):
                return item
    return None


def _matches(item: Any, element: str) -> bool:
    kind, _, rest = element.partition(":")
    if kind == "k":
        keys = json.loads(rest)
        return isinstance(item, dict) and all(item.get(k) == v for k, v in keys.items())
    if kind == "v":
        return _value_element(item) == element
    return False


def unknown_fields(res: Resource, version: str, obj: Obj) -> list[str]:
    """Fields of `obj` its kind's schema does not have, as the strict JSON decoder names them
    (`spec.containers[0].imagee`); `status` is the server's own and not checked."""
    root, defs = _schemas(res, version)
    found: list[str] = []
    _unknown(obj, root, defs, "", found)
    return found


def _unknown(value: Any, schema: Obj | None, defs: dict[str, Obj], path: str, found: list[str]) -> None:
    if schema is None or len(found) >= 100 or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            if not path and key == "status":
                continue
            where = f"{path}.{key}" if path else str(key)
            if props is not None and key in props:
                _unknown(child, _resolve(props[key], defs), defs, where, found)
            elif isinstance(extra, dict):
                _unknown(child, _resolve(extra, defs), defs, where, found)
            elif props is not None and extra is None:
                found.append(where)
    elif isinstance(value, list) and schema.get("type") == "array":
        items = _resolve(schema.get("items"), defs)
        for i, item in enumerate(value):
            _unknown(item, items, defs, f"{path}[{i}]", found)


def prune_unknown(res: Resource, version: str, obj: Obj) -> None:
    """Drop, in place, the fields `unknown_fields` names: decoding into a built-in kind's Go type drops them
    (`runtime.DefaultUnstructuredConverter` / the JSON serializer in non-strict mode), and a CRD's structural
    schema prunes them (`apiextensions-apiserver/pkg/apiserver/schema/pruning`), so they are never stored."""
    root, defs = _schemas(res, version)
    _prune(obj, root, defs, top=True)


def _prune(value: Any, schema: Obj | None, defs: dict[str, Obj], *, top: bool = False) -> None:
    if schema is None or schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key in list(value):
            if top and key in ("status", "apiVersion", "kind"):
                continue
            if props is not None and key in props:
                _prune(value[key], _resolve(props[key], defs), defs)
            elif isinstance(extra, dict):
                _prune(value[key], _resolve(extra, defs), defs)
            elif props is not None and extra is None:
                del value[key]
    elif isinstance(value, list) and schema.get("type") == "array":
        items = _resolve(schema.get("items"), defs)
        for item in value:
            _prune(item, items, defs)


def manager_for(query_manager: str | None, user_agent: str | None) -> str:
    """`managerOrUserAgent`: the fieldManager, else the User-Agent up to its first `/`."""
    if query_manager:
        return query_manager
    return (user_agent or "unknown").split("/", 1)[0][:128] or "unknown"
