"""OpenKruise CRD schemas: load them and check objects against them.

`load_crd_schemas()` reads the `openAPIV3Schema` of every served version of every CustomResourceDefinition in
a folder (by default the `kruise-crds` reference folder, preferring its `v1.9.0/` copies, which model the
released API). `validate_against_crd()` checks an object the way a structural schema is checked by the API
server, close enough for tests: `x-kubernetes-int-or-string` accepts an integer or a string, `nullable: true`
accepts null, other `x-kubernetes-*` markers and `format` (int32, int64, date-time) are ignored, and
`metadata` is only checked loosely. Unknown fields are not errors (the API server prunes them) unless
`unknown_fields=True`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

__all__ = [
    "CrdKey",
    "NoSchemaError",
    "apply_crd_defaults",
    "default_crd_folder",
    "load_crd_schemas",
    "validate_against_crd",
]

CrdKey = tuple[str, str, str]  # (group, version, kind)

_RELEASED = "v1.9.0"


class NoSchemaError(LookupError):
    """No CRD schema is known for an object's apiVersion and kind."""


def default_crd_folder() -> Path | None:
    """The first existing of `$KRUISE_CRDS_DIR` and `<repo>/../shared/reference/kruise-crds`, or None."""
    candidates: list[Path] = []
    env = os.environ.get("KRUISE_CRDS_DIR")
    if env:
        candidates.append(Path(env))
    repo = Path(__file__).resolve().parents[2]
    candidates.append(repo.parent / "shared" / "reference" / "kruise-crds")
    for folder in candidates:
        if folder.is_dir():
            return folder
    return None


def _crd_files(folder: Path) -> list[Path]:
    """The folder's `*.yaml` files, each replaced by its `v1.9.0/` copy when there is one."""
    released = folder / _RELEASED
    files: dict[str, Path] = {p.name: p for p in sorted(folder.glob("*.yaml"))}
    if released.is_dir():
        for p in sorted(released.glob("*.yaml")):
            files[p.name] = p
    return [files[name] for name in sorted(files)]


def _schemas_from_documents(docs: Iterable[Any]) -> dict[CrdKey, dict[str, Any]]:
    out: dict[CrdKey, dict[str, Any]] = {}
    for doc in docs:
        if not isinstance(doc, Mapping) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec") or {}
        group = spec.get("group", "")
        kind = (spec.get("names") or {}).get("kind", "")
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
            out[(group, version["name"], kind)] = schema
    return out


def load_crd_schemas(folder: Path | str | None = None) -> dict[CrdKey, dict[str, Any]]:
    """Map `(group, version, kind)` to the `openAPIV3Schema` of each served CRD version in `folder`.

    With no folder, `default_crd_folder()` is used (cached); raises FileNotFoundError when none exists.
    """
    if folder is None:
        default = default_crd_folder()
        if default is None:
            raise FileNotFoundError(
                "no CRD folder: set KRUISE_CRDS_DIR or provide ../shared/reference/kruise-crds"
            )
        return _load_cached(str(default))
    return _load(Path(folder))


@lru_cache(maxsize=8)
def _load_cached(folder: str) -> dict[CrdKey, dict[str, Any]]:
    return _load(Path(folder))


def _load(folder: Path) -> dict[CrdKey, dict[str, Any]]:
    if not folder.is_dir():
        raise FileNotFoundError(f"CRD folder {folder} does not exist")
    out: dict[CrdKey, dict[str, Any]] = {}
    for path in _crd_files(folder):
        with path.open(encoding="utf-8") as fh:
            out.update(_schemas_from_documents(yaml.safe_load_all(fh)))
    return out


def _translate(schema: Any, *, strict: bool, top: bool = True) -> Any:
    """A JSON-Schema (Draft 7) equivalent of a Kubernetes structural schema."""
    if isinstance(schema, list):
        return [_translate(s, strict=strict, top=False) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in (
            "description",
            "format",
            "nullable",
            "default",
            "example",
        ):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _translate(v, strict=strict, top=False) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, Mapping | list):
            out[key] = _translate(value, strict=strict, top=False)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = _translate(value, strict=strict, top=False)
        else:
            out[key] = copy.deepcopy(value)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("anyOf", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable"):
        if "type" in out:
            types = out["type"] if isinstance(out["type"], list) else [out["type"]]
            out["type"] = [*types, "null"]
        elif "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
    if (
        strict
        and "properties" in out
        and "additionalProperties" not in out
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if top and isinstance(out.get("properties"), dict) and "metadata" in out["properties"]:
        out["properties"]["metadata"] = _METADATA_SCHEMA
    return out


_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_METADATA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
    },
}

_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    for py, name in _JSON_TYPES.items():
        if type(value) is py:
            return name
    return type(value).__name__


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe(error: jsonschema.ValidationError) -> str:
    """An API-server-like one-line description of a schema violation."""
    where = _path(error.absolute_path)
    shown = where or "<root>"
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        field = f"{where}.{missing}" if where else missing
        return f"{field}: Required value"
    if error.validator in ("type", "anyOf") and error.validator_value is not None:
        if error.validator == "type":
            wanted = error.validator_value
            wanted_s = ",".join(wanted) if isinstance(wanted, list) else wanted
        else:
            wanted_s = ",".join(
                str(s.get("type")) for s in error.validator_value if isinstance(s, Mapping) and "type" in s
            )
        got = _json_type(error.instance)
        return f'{shown}: Invalid value: "{got}": {shown} in body must be of type {wanted_s}: "{got}"'
    if error.validator == "enum":
        supported = ", ".join(f'"{v}"' for v in error.validator_value)
        return f'{shown}: Unsupported value: "{error.instance}": supported values: {supported}'
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        known = set((error.schema.get("properties") or {}).keys())
        extra = sorted(str(k) for k in error.instance if k not in known)
        return "; ".join(f'unknown field "{where + "." if where else ""}{name}"' for name in extra)
    return f"{shown}: Invalid value: {error.message}"


def _schema_for(
    obj: Mapping[str, Any], schemas: Mapping[CrdKey, dict[str, Any]]
) -> tuple[CrdKey, dict[str, Any]]:
    api_version = obj.get("apiVersion") or ""
    kind = obj.get("kind") or ""
    group, _, version = api_version.rpartition("/")
    key = (group, version, kind)
    if key not in schemas:
        known = ", ".join(f"{g}/{v} {k}" for g, v, k in sorted(schemas))
        raise NoSchemaError(f"no CRD schema for apiVersion {api_version!r} kind {kind!r}; known: {known}")
    return key, schemas[key]


def validate_against_crd(
    obj: Mapping[str, Any],
    schemas: Mapping[CrdKey, dict[str, Any]] | None = None,
    *,
    unknown_fields: bool = False,
) -> list[str]:
    """Check `obj` against its CRD schema (found by apiVersion and kind); the problems found, [] when valid.

    Raises NoSchemaError when no schema is known for the object's apiVersion/kind. With `unknown_fields=True`,
    fields the schema does not declare are reported too (the API server would silently prune them).
    """
    if schemas is None:
        schemas = load_crd_schemas()
    _, schema = _schema_for(obj, schemas)
    translated = _translate(schema, strict=unknown_fields)
    validator = jsonschema.Draft7Validator(translated)
    errors = sorted(
        validator.iter_errors(dict(obj)), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    return [_describe(e) for e in errors]


def apply_crd_defaults(obj: dict[str, Any], schemas: Mapping[CrdKey, dict[str, Any]] | None = None) -> None:
    """Fill in place the `default:` values the CRD schema declares, as the API server does on decode."""
    if schemas is None:
        schemas = load_crd_schemas()
    _, schema = _schema_for(obj, schemas)
    _default(obj, schema)


def _default(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in value and isinstance(sub, Mapping) and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value and isinstance(sub, Mapping):
                _default(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name, item in value.items():
                if name not in props:
                    _default(item, extra)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _default(item, items)
