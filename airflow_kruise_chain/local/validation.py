"""Admission for the local API server: defaulting and validation as pure functions over dicts.

Core objects follow the Kubernetes API server (`pkg/apis/core/validation`, `pkg/apis/core/v1/defaults.go`, the
DefaultTolerationSeconds admission plugin, the pod strategy); OpenKruise objects follow the v1.9.0 webhooks.
Messages and cause reasons are the real ones:

- `validate_*` raise `ApiError` 422 `Invalid` carrying every cause, as `Kind "name" is invalid: field:
  message`;
- a Kruise webhook denial is an `ApiError` with the webhook's HTTP code and the message `admission webhook
  "<name>" denied the request: <detail>`. Like the real API server relaying a controller-runtime
  `admission.Errored()` answer, its Status `reason` is empty (only `admission.Denied()` answers carry
  `Forbidden`);
- a value the real server could not even decode (an unparseable quantity) raises 400 `BadRequest`.

Field errors are dicts `{"reason", "message", "field"}` (see `required`, `invalid_value`, ...). Functions that
default and then validate work on a copy and write it back only when the object is accepted.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Any

from airflow_kruise_chain.local.errors import ApiError, invalid
from airflow_kruise_chain.local.selectors import LabelSelector, validate_label_key, validate_label_value

__all__ = [
    "CRR_ACTIVE_LABEL",
    "CRR_NODE_NAME_LABEL",
    "CRR_POD_UID_LABEL",
    "CRR_WEBHOOK",
    "DEFAULT_TOLERATION_SECONDS",
    "IMAGE_PULL_JOB_MUTATING_WEBHOOK",
    "IMAGE_PULL_JOB_WEBHOOK",
    "NODE_IMAGE_WEBHOOK",
    "POD_UPDATE_FORBIDDEN",
    "PROTECTION_FINALIZER",
    "QUANTITY_FORMAT_ERROR",
    "Cause",
    "ImageReference",
    "admit_crr",
    "admit_image_pull_job",
    "admit_node_image",
    "cpu_millis",
    "default_event",
    "default_namespace",
    "default_node",
    "default_pod",
    "duplicate",
    "forbidden",
    "format_quantity",
    "invalid_value",
    "is_dns1123_label",
    "is_dns1123_subdomain",
    "memory_bytes",
    "mutate_image_pull_job",
    "not_found_value",
    "not_supported",
    "parse_image_reference",
    "parse_quantity",
    "pod_qos_class",
    "prepare_pod_resize",
    "required",
    "too_long",
    "validate_configmap",
    "validate_crr_update",
    "validate_event",
    "validate_image_pull_job",
    "validate_image_pull_job_update",
    "validate_metadata",
    "validate_metadata_update",
    "validate_namespace",
    "validate_node",
    "validate_pod_create",
    "validate_pod_resize",
    "validate_pod_update",
    "webhook_denial",
]

Cause = dict[str, str]
MAX_INT32 = 2**31 - 1

# --------------------------------------------------------------------------------------------------
# Field errors (k8s.io/apimachinery/pkg/util/validation/field)
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Name formats (k8s.io/apimachinery/pkg/util/validation)
# --------------------------------------------------------------------------------------------------

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_LABEL_RE = re.compile(f"^{_DNS1123_LABEL_FMT}\\Z")
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}\\Z")
_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
_ENV_VAR_NAME_FMT = "[-._a-zA-Z][-._a-zA-Z0-9]*"
_ENV_VAR_NAME_RE = re.compile(f"^{_ENV_VAR_NAME_FMT}\\Z")
_ENV_VAR_NAME_MSG = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and "
    "must not start with a digit"
)
_RELAXED_ENV_VAR_NAME_MSG = (
    "a valid environment variable name must consist only of printable ASCII characters other than '='"
)
_CONFIG_MAP_KEY_FMT = "[-._a-zA-Z0-9]+"
_CONFIG_MAP_KEY_RE = re.compile(f"^{_CONFIG_MAP_KEY_FMT}\\Z")
_CONFIG_MAP_KEY_MSG = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {shown}, regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def is_dns1123_label(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 label (at most 63 characters); [] when it is one."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append(_max_len_error(63))
    if not _DNS1123_LABEL_RE.match(value):
        if _DNS1123_SUBDOMAIN_RE.match(value):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    """Why `value` is not an RFC 1123 subdomain (at most 253 characters); [] when it is one."""
    errs: list[str] = []
    if len(value) > 253:
        errs.append(_max_len_error(253))
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def _has_chdir_prefix(value: str) -> list[str]:
    if value == ".":
        return ["must not be '.'"]
    if value == "..":
        return ["must not be '..'"]
    if value.startswith(".."):
        return ["must not start with '..'"]
    return []


def _is_env_var_name(value: str, relaxed: bool) -> list[str]:
    if relaxed:
        if any(ord(ch) > 126 or ord(ch) < 32 or ch == "=" for ch in value):
            return [_RELAXED_ENV_VAR_NAME_MSG]
        return []
    errs: list[str] = []
    if not _ENV_VAR_NAME_RE.match(value):
        errs.append(
            _regex_error(_ENV_VAR_NAME_MSG, _ENV_VAR_NAME_FMT, "my.env-name", "MY_ENV.NAME", "MyEnvName1")
        )
    return errs + _has_chdir_prefix(value)


def _is_config_map_key(value: str) -> list[str]:
    errs: list[str] = []
    if len(value) > 253:
        errs.append(_max_len_error(253))
    if not _CONFIG_MAP_KEY_RE.match(value):
        errs.append(
            _regex_error(_CONFIG_MAP_KEY_MSG, _CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name")
        )
    return errs + _has_chdir_prefix(value)


def _qualified_name(value: Any, field: str) -> list[Cause]:
    err = validate_label_key(value)
    return [invalid_value(field, value, err)] if err else []


def _mask_trailing_dash(name: str) -> str:
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def _name_is_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def _name_is_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def _inclusive_range(lo: int, hi: int) -> str:
    return f"must be between {lo} and {hi}, inclusive"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# --------------------------------------------------------------------------------------------------
# Object metadata (k8s.io/apimachinery/pkg/api/validation/objectmeta.go)
# --------------------------------------------------------------------------------------------------

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


def validate_metadata(kind: str, obj: Mapping[str, Any], namespaced: bool) -> list[Cause]:
    """The causes against `obj.metadata` on create, as `ValidateObjectMeta` finds them.

    Names are RFC 1123 subdomains (Namespace names: RFC 1123 labels). The caller resolves `generateName` into
    a name first. Namespaced objects need a namespace (an RFC 1123 label); cluster-scoped ones may not have
    one.
    """
    meta = obj.get("metadata") or {}
    name_fn = _name_is_label if kind in _LABEL_NAME_KINDS else _name_is_subdomain
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


# --------------------------------------------------------------------------------------------------
# Quantities (k8s.io/apimachinery/pkg/api/resource)
# --------------------------------------------------------------------------------------------------

QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)\Z")
_NUMBER_RE = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?\Z")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v: k for k, v in _BINARY.items()}


def _parse_quantity(value: Any) -> tuple[Decimal, str]:
    if isinstance(value, bool):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    if isinstance(value, int | float):
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    text = value.strip()
    match = _QUANTITY_RE.match(text)
    if not match:
        raise ValueError(QUANTITY_FORMAT_ERROR)
    number, suffix = match.groups()
    parts = _NUMBER_RE.match(number)
    if not parts or not (parts.group(2) or parts.group(3)):
        raise ValueError(QUANTITY_FORMAT_ERROR)
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError("unable to parse quantity's numeric part") from exc
    if suffix in _BINARY:
        return amount * (2 ** _BINARY[suffix]), "BinarySI"
    if suffix in _DECIMAL:
        return amount.scaleb(_DECIMAL[suffix]), "DecimalSI"
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[-+]?[0-9]+", suffix[1:]):
        return amount.scaleb(int(suffix[1:])), "DecimalExponent"
    raise ValueError("unable to parse quantity's suffix")


def parse_quantity(value: Any) -> Decimal:
    """The amount of a quantity (`100Mi`, `1G`, `500m`, `2`, `1e3`); raises ValueError with the real
    message."""
    return _parse_quantity(value)[0]


def _canonical_decimal(value: Decimal) -> tuple[int, int]:
    """(mantissa, exponent) with the exponent a multiple of 3 in [-9, 18] and the smallest mantissa."""
    nanos = (abs(value) * 10**9).to_integral_value(rounding=ROUND_CEILING)
    mantissa = int(nanos) * (-1 if value < 0 else 1)
    if mantissa == 0:
        return 0, 0
    exponent = -9
    while mantissa % 1000 == 0 and exponent < 18:
        mantissa //= 1000
        exponent += 3
    return mantissa, exponent


def format_quantity(value: Any, fmt: str | None = None) -> str:
    """The canonical form of a quantity, as `Quantity.String()` prints it (`1024Mi` -> `1Gi`, `0.5` ->
    `500m`).
    """
    if isinstance(value, Decimal):
        amount, fmt = value, fmt or "DecimalSI"
    else:
        amount, parsed_fmt = _parse_quantity(value)
        fmt = fmt or parsed_fmt
    if amount == 0:
        return "0"
    if fmt == "BinarySI":
        if -1024 < amount < 1024 or amount != amount.to_integral_value():
            fmt = "DecimalSI"
        else:
            mantissa, exponent = int(amount), 0
            while mantissa % 1024 == 0 and exponent < 60:
                mantissa //= 1024
                exponent += 10
            return f"{mantissa}{_BINARY_SUFFIX.get(exponent, '')}"
    mantissa, exponent = _canonical_decimal(amount)
    if fmt == "DecimalExponent":
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def cpu_millis(value: Any) -> int:
    """A CPU quantity in millicores, rounded up (`500m` -> 500, `2` -> 2000)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def memory_bytes(value: Any) -> int:
    """A memory quantity in bytes, rounded up (`100Mi` -> 104857600, `1G` -> 10**9)."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


# --------------------------------------------------------------------------------------------------
# Image references (github.com/docker/distribution/reference v2.8.2, as Kruise v1.9.0 uses it)
# --------------------------------------------------------------------------------------------------

_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?\Z")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_DIGEST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}\Z")
_IDENTIFIER_RE = re.compile(r"^[a-f0-9]{64}\Z")
_DIGEST_ALGORITHMS = {"sha256": 64, "sha384": 96, "sha512": 128}


@dataclass(frozen=True)
class ImageReference:
    """A parsed, normalized image reference: `domain/path[:tag][@digest]`."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """`domain/path`, e.g. `docker.io/library/busybox`."""
        return f"{self.domain}/{self.path}" if self.domain else self.path

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _validate_digest(digest: str) -> None:
    """As go-digest `Digest.Validate` with sha256/sha384/sha512 available."""
    i = digest.find(":")
    if i <= 0 or i + 1 == len(digest):
        raise ValueError("invalid checksum digest format")
    algorithm, encoded = digest[:i], digest[i + 1 :]
    if algorithm not in _DIGEST_ALGORITHMS:
        if not _DIGEST_RE.match(digest):
            raise ValueError("invalid checksum digest format")
        raise ValueError("unsupported digest algorithm")
    if len(encoded) != _DIGEST_ALGORITHMS[algorithm]:
        raise ValueError("invalid checksum digest length")
    if not re.fullmatch("[a-f0-9]+", encoded):
        raise ValueError("invalid checksum digest format")


def _match_reference(s: str) -> tuple[str, str, str, str] | None:
    """(domain, path, tag, digest) when `s` matches the reference grammar, else None."""
    rest, digest = s, ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            return None
    tag = ""
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.match(tag):
            return None
    components = rest.split("/")
    if len(components) > 1 and _DOMAIN_RE.match(components[0]):
        if all(_PATH_COMPONENT_RE.match(c) for c in components[1:]):
            return components[0], "/".join(components[1:]), tag, digest
    if all(_PATH_COMPONENT_RE.match(c) for c in components):
        return "", rest, tag, digest
    return None


def _parse_reference(s: str) -> ImageReference:
    match = _match_reference(s)
    if match is None:
        if s == "":
            raise ValueError("repository name must have at least one component")
        if s.lower() != s and _match_reference(s.lower()) is not None:
            raise ValueError("repository name must be lowercase")
        raise ValueError("invalid reference format")
    domain, path, tag, digest = match
    if len(f"{domain}/{path}" if domain else path) > 255:
        raise ValueError("repository name must not be more than 255 characters")
    if digest:
        _validate_digest(digest)
    return ImageReference(domain, path, tag, digest)


def _split_docker_domain(name: str) -> tuple[str, str]:
    i = name.find("/")
    if i == -1 or (not any(ch in name[:i] for ch in ".:") and name[:i] != "localhost"):
        domain, remainder = "docker.io", name
    else:
        domain, remainder = name[:i], name[i + 1 :]
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in remainder:
        remainder = "library/" + remainder
    return domain, remainder


def parse_image_reference(ref: str) -> ImageReference:
    """Parse and normalize an image reference like `ParseNormalizedNamed` (`busybox` ->
    docker.io/library/busybox).

    A reference without tag or digest gets no tag here (see `ImageReference.tag`). Raises ValueError with the
    library's message (`invalid reference format`, `invalid reference format: repository name must be
    lowercase`).
    """
    if not isinstance(ref, str):
        raise ValueError("invalid reference format")
    if _IDENTIFIER_RE.match(ref):
        raise ValueError(f"invalid repository name ({ref}), cannot specify 64-byte hexadecimal strings")
    domain, remainder = _split_docker_domain(ref)
    colon = remainder.find(":")
    remote = remainder[:colon] if colon > -1 else remainder
    if remote.lower() != remote:
        raise ValueError("invalid reference format: repository name must be lowercase")
    return _parse_reference(f"{domain}/{remainder}")


def _image_tag_for_pull_policy(image: str) -> str:
    """The tag `SetDefaults_Container` sees: `latest` when neither tag nor digest is given."""
    try:
        parsed = parse_image_reference(image)
    except ValueError:
        return ""
    if not parsed.tag and not parsed.digest:
        return "latest"
    return parsed.tag


# --------------------------------------------------------------------------------------------------
# Pod defaulting (pkg/apis/core/v1/defaults.go, DefaultTolerationSeconds, ServiceAccount/Priority admission)
# --------------------------------------------------------------------------------------------------

_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def _default_handler(handler: Any) -> None:
    if isinstance(handler, dict) and isinstance(handler.get("httpGet"), dict):
        handler["httpGet"].setdefault("path", "/")
        handler["httpGet"].setdefault("scheme", "HTTP")


def _default_container(ctr: dict[str, Any], *, copy_limits: bool) -> None:
    if not ctr.get("imagePullPolicy"):
        tag = _image_tag_for_pull_policy(ctr.get("image") or "")
        ctr["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    ctr.setdefault("terminationMessagePath", "/dev/termination-log")
    ctr.setdefault("terminationMessagePolicy", "File")
    resources = ctr.setdefault("resources", {})
    if copy_limits and isinstance(resources, dict) and resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for key, value in resources["limits"].items():
            requests.setdefault(key, value)
    for port in ctr.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe_key in _PROBES:
        probe = ctr.get(probe_key)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            _default_handler(probe)
    lifecycle = ctr.get("lifecycle")
    if isinstance(lifecycle, dict):
        _default_handler(lifecycle.get("postStart"))
        _default_handler(lifecycle.get("preStop"))
    for env in ctr.get("env") or []:
        value_from = env.get("valueFrom") if isinstance(env, dict) else None
        if isinstance(value_from, dict):
            if isinstance(value_from.get("fieldRef"), dict):
                value_from["fieldRef"].setdefault("apiVersion", "v1")
            if isinstance(value_from.get("resourceFieldRef"), dict):
                value_from["resourceFieldRef"].setdefault("divisor", "0")


def _default_volume(volume: dict[str, Any]) -> None:
    for key in ("configMap", "secret", "downwardAPI", "projected"):
        if isinstance(volume.get(key), dict):
            volume[key].setdefault("defaultMode", 420)
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    for item in (volume.get("downwardAPI") or {}).get("items") or []:
        if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
            item["fieldRef"].setdefault("apiVersion", "v1")


def _add_default_tolerations(spec: dict[str, Any]) -> None:
    """The DefaultTolerationSeconds admission plugin: tolerate not-ready/unreachable NoExecute for 300 s."""
    tolerations = spec.get("tolerations") or []
    not_ready = unreachable = False
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        key, effect = tol.get("key") or "", tol.get("effect") or ""
        if effect in ("", "NoExecute"):
            not_ready = not_ready or key in ("", _NOT_READY_TAINT)
            unreachable = unreachable or key in ("", _UNREACHABLE_TAINT)
    added = []
    if not not_ready:
        added.append(_NOT_READY_TAINT)
    if not unreachable:
        added.append(_UNREACHABLE_TAINT)
    if added:
        spec["tolerations"] = list(tolerations) + [
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }
            for key in added
        ]


def default_pod(pod: dict[str, Any], *, create: bool = True) -> None:
    """Default a pod in place as the API server does when it decodes and admits it.

    Scheme defaults (restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds, securityContext,
    enableServiceLinks; per container imagePullPolicy, terminationMessagePath/Policy, resources with requests
    copied from limits, port protocol, probe timings, fieldRef apiVersion; volume defaultMode) and the
    tolerations of the DefaultTolerationSeconds plugin are applied on create and update. On create
    (`create=True`) the pod also gets serviceAccountName `default`, priority 0 / preemptionPolicy
    PreemptLowerPriority, and a fresh status `{phase: Pending, qosClass}`. (The ServiceAccount plugin's
    `kube-api-access-*` token volume is not added.)
    """
    _check_decodable("Pod", pod)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    if pod.get("metadata") is None:
        pod["metadata"] = {}
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = pod["spec"] = {}
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in _CONTAINER_LISTS:
        for ctr in spec.get(key) or []:
            if isinstance(ctr, dict):
                _default_container(ctr, copy_limits=key != "ephemeralContainers")
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _default_volume(volume)
    _add_default_tolerations(spec)
    if create:
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = account
        spec["serviceAccount"] = account
        if not spec.get("priorityClassName"):
            spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        pod["status"] = {"phase": "Pending", "qosClass": pod_qos_class(pod)}


def _resource_amounts(resources: Any, key: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    values = (resources or {}).get(key) if isinstance(resources, Mapping) else None
    for name, value in (values or {}).items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            continue
    return out


def pod_qos_class(pod: Mapping[str, Any]) -> str:
    """`Guaranteed`, `Burstable` or `BestEffort`, computed from cpu/memory requests and limits
    (`ComputePodQOS`).
    """
    spec = pod.get("spec") or {}
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    for ctr in containers:
        if not isinstance(ctr, Mapping):
            continue
        resources = ctr.get("resources") or {}
        for name, amount in _resource_amounts(resources, "requests").items():
            if name in ("cpu", "memory") and amount > 0:
                requests[name] = requests.get(name, Decimal(0)) + amount
        found: set[str] = set()
        for name, amount in _resource_amounts(resources, "limits").items():
            if name in ("cpu", "memory") and amount > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + amount
        if found != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for name, amount in requests.items():
            if limits.get(name) != amount:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


# --------------------------------------------------------------------------------------------------
# Pod validation (pkg/apis/core/validation/validation.go)
# --------------------------------------------------------------------------------------------------

# Volume sources in the order ValidateVolumes checks them, with the field name its "more than 1" error uses.
_VOLUME_SOURCES = (
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
)
_ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
_VOLUME_FIELD_PATHS = (
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
)
_CONVERTIBLE_FIELD_PATHS = {
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
    "spec.host",
}
_RESOURCE_FIELD_PATHS = (
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
)
_STANDARD_CONTAINER_RESOURCES = {"cpu", "memory", "ephemeral-storage"}
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _split_subscripted(path: str) -> tuple[str, str] | None:
    """`metadata.labels['k']` -> ("metadata.labels", "k"), as fieldpath.SplitMaybeSubscriptedPath."""
    if not path.endswith("']"):
        return None
    head, sep, subscript = path[:-2].partition("['")
    if not sep or not head:
        return None
    return head, subscript


def _object_field_selector(ref: Mapping[str, Any], supported: tuple[str, ...], field: str) -> list[Cause]:
    api_version = ref.get("apiVersion") or ""
    field_path = ref.get("fieldPath") or ""
    if not api_version:
        return [required(f"{field}.apiVersion")]
    if not field_path:
        return [required(f"{field}.fieldPath")]
    if api_version != "v1":
        message = f"error converting fieldPath: unsupported pod version: {api_version}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    sub = _split_subscripted(field_path)
    if sub is not None:
        path, subscript = sub
        if path == "metadata.annotations":
            return _qualified_name(subscript.lower(), field)
        if path == "metadata.labels":
            return _qualified_name(subscript, field)
        message = f"error converting fieldPath: field label does not support subscript: {field_path}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    if field_path not in _CONVERTIBLE_FIELD_PATHS:
        message = f"error converting fieldPath: field label not supported: {field_path}"
        return [invalid_value(f"{field}.fieldPath", field_path, message)]
    internal = "spec.nodeName" if field_path == "spec.host" else field_path
    if internal not in supported:
        return [not_supported(f"{field}.fieldPath", internal, supported)]
    return []


def _env_causes(env: Any, field: str, relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    for i, ev in enumerate(env or []):
        path = f"{field}[{i}]"
        if not isinstance(ev, Mapping):
            causes.append(invalid_value(path, ev, "must be an object"))
            continue
        name = ev.get("name") or ""
        if not name:
            causes.append(required(f"{path}.name"))
        else:
            causes += [invalid_value(f"{path}.name", name, m) for m in _is_env_var_name(str(name), relaxed)]
        value_from = ev.get("valueFrom")
        if value_from is None:
            continue
        vf_path = f"{path}.valueFrom"
        sources = 0
        if isinstance(value_from.get("fieldRef"), Mapping):
            sources += 1
            causes += _object_field_selector(value_from["fieldRef"], _ENV_FIELD_PATHS, f"{vf_path}.fieldRef")
        if isinstance(value_from.get("resourceFieldRef"), Mapping):
            sources += 1
            resource = value_from["resourceFieldRef"].get("resource") or ""
            rpath = f"{vf_path}.resourceFieldRef"
            if not resource:
                causes.append(required(f"{rpath}.resource"))
            elif resource not in _RESOURCE_FIELD_PATHS and not resource.startswith(
                ("requests.hugepages-", "limits.hugepages-")
            ):
                causes.append(not_supported(f"{rpath}.resource", resource, _RESOURCE_FIELD_PATHS))
        for key in ("configMapKeyRef", "secretKeyRef"):
            ref = value_from.get(key)
            if isinstance(ref, Mapping):
                sources += 1
                kpath = f"{vf_path}.{key}"
                ref_name = ref.get("name") or ""
                causes += [
                    invalid_value(f"{kpath}.name", ref_name, m) for m in is_dns1123_subdomain(ref_name)
                ]
                ref_key = ref.get("key") or ""
                if not ref_key:
                    causes.append(required(f"{kpath}.key"))
                else:
                    causes += [invalid_value(f"{kpath}.key", ref_key, m) for m in _is_config_map_key(ref_key)]
        if sources == 0:
            message = (
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
            )
            causes.append(invalid_value(vf_path, "", message))
        elif ev.get("value"):
            causes.append(invalid_value(vf_path, "", "may not be specified when `value` is not empty"))
        elif sources > 1:
            causes.append(invalid_value(vf_path, "", "may not have more than one field specified at a time"))
    return causes


def _volumes_causes(volumes: Any, field: str) -> tuple[set[str], list[Cause]]:
    names: set[str] = set()
    causes: list[Cause] = []
    for i, vol in enumerate(volumes or []):
        path = f"{field}[{i}]"
        if not isinstance(vol, Mapping):
            causes.append(invalid_value(path, vol, "must be an object"))
            continue
        errs: list[Cause] = []
        count = 0
        for key, err_name in _VOLUME_SOURCES:
            source = vol.get(key)
            if source is None:
                continue
            if count > 0:
                errs.append(forbidden(f"{path}.{err_name}", "may not specify more than 1 volume type"))
                continue
            count += 1
            errs += _volume_source_causes(key, source, f"{path}.{key}")
        if count == 0:
            errs.append(required(path, "must specify a volume type"))
        name = vol.get("name") or ""
        if not name:
            errs.append(required(f"{path}.name"))
        else:
            errs += [invalid_value(f"{path}.name", name, m) for m in is_dns1123_label(str(name))]
        if name in names:
            errs.append(duplicate(f"{path}.name", name))
        if errs:
            causes += errs
        else:
            names.add(name)
    return names, causes


def _volume_source_causes(key: str, source: Any, field: str) -> list[Cause]:
    if not isinstance(source, Mapping):
        return []
    if key == "emptyDir" and source.get("sizeLimit") is not None:
        try:
            if parse_quantity(source["sizeLimit"]) < 0:
                return [forbidden(f"{field}.sizeLimit", "SizeLimit field must be a valid resource quantity")]
        except ValueError:
            return []
    if key == "hostPath" and not source.get("path"):
        return [required(f"{field}.path")]
    if key == "secret" and not source.get("secretName"):
        return [required(f"{field}.secretName")]
    if key == "configMap" and not source.get("name"):
        return [required(f"{field}.name")]
    if key == "persistentVolumeClaim" and not source.get("claimName"):
        return [required(f"{field}.claimName")]
    if key == "downwardAPI":
        causes: list[Cause] = []
        for item in source.get("items") or []:
            if not isinstance(item, Mapping):
                continue
            if not item.get("path"):
                causes.append(required(f"{field}.path"))
            if isinstance(item.get("fieldRef"), Mapping):
                causes += _object_field_selector(item["fieldRef"], _VOLUME_FIELD_PATHS, f"{field}.fieldRef")
            elif item.get("resourceFieldRef") is None:
                causes.append(required(field, "one of fieldRef and resourceFieldRef is required"))
        return causes
    return []


def _volume_mounts_causes(mounts: Any, volumes: set[str], field: str) -> list[Cause]:
    causes: list[Cause] = []
    paths: set[str] = set()
    for i, mnt in enumerate(mounts or []):
        path = f"{field}[{i}]"
        if not isinstance(mnt, Mapping):
            causes.append(invalid_value(path, mnt, "must be an object"))
            continue
        name = mnt.get("name") or ""
        if not name:
            causes.append(required(f"{path}.name"))
        if name not in volumes:
            causes.append(not_found_value(f"{path}.name", name))
        mount_path = mnt.get("mountPath") or ""
        if not mount_path:
            causes.append(required(f"{path}.mountPath"))
        if mount_path in paths:
            causes.append(invalid_value(f"{path}.mountPath", mount_path, "must be unique"))
        paths.add(mount_path)
        for key in ("subPath", "subPathExpr"):
            sub = mnt.get(key) or ""
            if sub:
                # The real code reports these under `volumeMounts.subPath` (no index), which is mirrored here.
                if sub.startswith("/"):
                    causes.append(invalid_value(f"{field}.{key}", sub, "must be a relative path"))
                if ".." in sub.split("/"):
                    causes.append(invalid_value(f"{field}.{key}", sub, "must not contain '..'"))
        if mnt.get("subPath") and mnt.get("subPathExpr"):
            causes.append(
                invalid_value(
                    f"{path}.subPathExpr",
                    mnt["subPathExpr"],
                    "subPathExpr and subPath are mutually exclusive",
                )
            )
    return causes


def _port_number_causes(value: Any, field: str) -> list[Cause]:
    number = _int(value)
    if number is None or not 1 <= number <= 65535:
        return [invalid_value(field, value, _inclusive_range(1, 65535))]
    return []


def _ports_causes(ports: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in enumerate(ports or []):
        path = f"{field}[{i}]"
        if not isinstance(port, Mapping):
            causes.append(invalid_value(path, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if name:
            if len(name) > 15 or not re.fullmatch("[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) or "--" in name:
                causes.append(
                    invalid_value(f"{path}.name", name, "must be an IANA_SVC_NAME (at most 15 characters)")
                )
            elif name in names:
                causes.append(duplicate(f"{path}.name", name))
            else:
                names.add(name)
        if not port.get("containerPort"):
            causes.append(required(f"{path}.containerPort"))
        else:
            causes += _port_number_causes(port["containerPort"], f"{path}.containerPort")
        if port.get("hostPort"):
            causes += _port_number_causes(port["hostPort"], f"{path}.hostPort")
        protocol = port.get("protocol") or ""
        if not protocol:
            causes.append(required(f"{path}.protocol"))
        elif protocol not in ("SCTP", "TCP", "UDP"):
            causes.append(not_supported(f"{path}.protocol", protocol, ("SCTP", "TCP", "UDP")))
    return causes


def _is_native_resource(name: str) -> bool:
    return "/" not in name or name.split("/", 1)[0].endswith("kubernetes.io")


def _resources_causes(resources: Any, field: str) -> list[Cause]:
    if not isinstance(resources, Mapping):
        return []
    causes: list[Cause] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    parsed_limits: dict[str, Decimal] = {}
    for kind, values, parsed in (("limits", limits, parsed_limits), ("requests", requests, {})):
        for name, value in (values or {}).items():
            path = f"{field}.{kind}[{name}]"
            if (
                "/" not in name
                and name not in _STANDARD_CONTAINER_RESOURCES
                and not name.startswith("hugepages-")
            ):
                causes.append(invalid_value(path, name, "must be a standard resource for containers"))
            try:
                amount = parse_quantity(value)
            except ValueError:
                continue
            if amount < 0:
                causes.append(
                    invalid_value(path, format_quantity(value), "must be greater than or equal to 0")
                )
            elif not _is_native_resource(name) and amount != amount.to_integral_value():
                causes.append(invalid_value(path, format_quantity(value), "must be an integer"))
            parsed[name] = amount
    for name, value in (requests or {}).items():
        try:
            amount = parse_quantity(value)
        except ValueError:
            continue
        overcommit = _is_native_resource(name) and not name.startswith("hugepages-")
        if name in parsed_limits:
            limit = parsed_limits[name]
            shown_limit = format_quantity(limits[name])
            if amount != limit and not overcommit:
                message = f"must be equal to {name} limit of {shown_limit}"
                causes.append(invalid_value(f"{field}.requests", format_quantity(value), message))
            elif amount > limit:
                message = f"must be less than or equal to {name} limit of {shown_limit}"
                causes.append(invalid_value(f"{field}.requests", format_quantity(value), message))
        elif not overcommit:
            causes.append(required(f"{field}.limits", "Limit must be set for non overcommitable resources"))
    return causes


def _handler_causes(handler: Any, field: str, grace: int | None, allow_sleep: bool) -> list[Cause]:
    if not isinstance(handler, Mapping):
        return []
    causes: list[Cause] = []
    count = 0
    kinds = ("exec", "httpGet", "tcpSocket", "grpc") + (("sleep",) if allow_sleep else ())
    for key in kinds:
        action = handler.get(key)
        if action is None:
            continue
        if count > 0:
            causes.append(forbidden(f"{field}.{key}", "may not specify more than 1 handler type"))
            continue
        count += 1
        path = f"{field}.{key}"
        if key == "exec" and not (action or {}).get("command"):
            causes.append(required(f"{path}.command"))
        elif key == "httpGet":
            if not action.get("path"):
                causes.append(required(f"{path}.path"))
            port = action.get("port")
            if isinstance(port, str):
                if not re.fullmatch("[a-z0-9]([-a-z0-9]*[a-z0-9])?", port) or len(port) > 15:
                    causes.append(
                        invalid_value(f"{path}.port", port, "must contain only alpha-numeric characters")
                    )
            else:
                causes += _port_number_causes(port, f"{path}.port")
            scheme = action.get("scheme") or ""
            if scheme not in ("HTTP", "HTTPS"):
                causes.append(not_supported(f"{path}.scheme", scheme, ("HTTP", "HTTPS")))
        elif key == "tcpSocket":
            port = action.get("port")
            if not isinstance(port, str):
                causes += _port_number_causes(port, f"{path}.port")
        elif key == "grpc":
            causes += _port_number_causes(action.get("port"), f"{path}.port")
        elif key == "sleep" and grace is not None:
            seconds = _int(action.get("seconds"))
            if seconds is None or seconds <= 0 or seconds > grace:
                message = (
                    f"must be greater than 0 and less than terminationGracePeriodSeconds ({grace}). "
                    "Enable AllowPodLifecycleSleepActionZeroValue feature gate for zero sleep."
                )
                causes.append(invalid_value(path, action.get("seconds"), message))
    if count == 0:
        causes.append(required(field, "must specify a handler type"))
    return causes


def _probe_causes(probe: Any, field: str, grace: int | None, kind: str) -> list[Cause]:
    if not isinstance(probe, Mapping):
        return []
    causes = _handler_causes(probe, field, grace, allow_sleep=False)
    for key in (
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ):
        value = _int(probe.get(key))
        if value is not None and value < 0:
            causes.append(invalid_value(f"{field}.{key}", value, "must be greater than or equal to 0"))
    tgps = probe.get("terminationGracePeriodSeconds")
    if tgps is not None and (_int(tgps) or 0) <= 0:
        causes.append(invalid_value(f"{field}.terminationGracePeriodSeconds", tgps, "must be greater than 0"))
    if kind in ("livenessProbe", "startupProbe") and probe.get("successThreshold", 1) != 1:
        causes.append(invalid_value(f"{field}.successThreshold", probe.get("successThreshold"), "must be 1"))
    if kind == "readinessProbe" and tgps is not None:
        causes.append(
            invalid_value(
                f"{field}.terminationGracePeriodSeconds", tgps, "must not be set for readinessProbes"
            )
        )
    return causes


def _container_common_causes(
    ctr: Mapping[str, Any], volumes: set[str], path: str, relaxed: bool
) -> list[Cause]:
    causes: list[Cause] = []
    name = ctr.get("name") or ""
    if not name:
        causes.append(required(f"{path}.name"))
    else:
        causes += [invalid_value(f"{path}.name", name, m) for m in is_dns1123_label(str(name))]
    if not ctr.get("image"):
        causes.append(required(f"{path}.image"))
    policy = ctr.get("terminationMessagePolicy") or ""
    if not policy:
        causes.append(required(f"{path}.terminationMessagePolicy"))
    elif policy not in ("File", "FallbackToLogsOnError"):
        causes.append(
            not_supported(f"{path}.terminationMessagePolicy", policy, ("File", "FallbackToLogsOnError"))
        )
    causes += _ports_causes(ctr.get("ports"), f"{path}.ports")
    causes += _env_causes(ctr.get("env"), f"{path}.env", relaxed)
    for i, source in enumerate(ctr.get("envFrom") or []):
        if isinstance(source, Mapping):
            refs = [k for k in ("configMapRef", "secretRef") if source.get(k) is not None]
            if not refs:
                message = "must specify one of: `configMapRef` or `secretRef`"
                causes.append(invalid_value(f"{path}.envFrom", "", message))
            elif len(refs) > 1:
                message = "may not have more than one field specified at a time"
                causes.append(invalid_value(f"{path}.envFrom", "", message))
            prefix = source.get("prefix") or ""
            if prefix:
                errs = _is_env_var_name(prefix, relaxed)
                causes += [invalid_value(f"{path}.envFrom[{i}].prefix", prefix, m) for m in errs]
    causes += _volume_mounts_causes(ctr.get("volumeMounts"), volumes, f"{path}.volumeMounts")
    pull = ctr.get("imagePullPolicy") or ""
    if not pull:
        causes.append(required(f"{path}.imagePullPolicy"))
    elif pull not in ("Always", "IfNotPresent", "Never"):
        causes.append(not_supported(f"{path}.imagePullPolicy", pull, ("Always", "IfNotPresent", "Never")))
    causes += _resources_causes(ctr.get("resources"), f"{path}.resources")
    return causes


def _containers_causes(spec: Mapping[str, Any], volumes: set[str], relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    grace = _int(spec.get("terminationGracePeriodSeconds"))
    containers = spec.get("containers") or []
    if not containers:
        causes.append(required("spec.containers"))
    names: set[str] = set()
    for i, ctr in enumerate(containers):
        path = f"spec.containers[{i}]"
        if not isinstance(ctr, Mapping):
            causes.append(invalid_value(path, ctr, "must be an object"))
            continue
        causes += _container_common_causes(ctr, volumes, path, relaxed)
        name = ctr.get("name") or ""
        if name in names:
            causes.append(duplicate(f"{path}.name", name))
        else:
            names.add(name)
        lifecycle = ctr.get("lifecycle")
        if isinstance(lifecycle, Mapping):
            for hook in ("postStart", "preStop"):
                if lifecycle.get(hook) is not None:
                    causes += _handler_causes(
                        lifecycle[hook], f"{path}.lifecycle.{hook}", grace, allow_sleep=True
                    )
        for probe in _PROBES:
            causes += _probe_causes(ctr.get(probe), f"{path}.{probe}", grace, probe)
        if ctr.get("restartPolicy") is not None:
            causes.append(forbidden(f"{path}.restartPolicy", "may not be set for non-init containers"))
    all_names = {c.get("name") for c in containers if isinstance(c, Mapping)}
    for i, ctr in enumerate(spec.get("initContainers") or []):
        path = f"spec.initContainers[{i}]"
        if not isinstance(ctr, Mapping):
            causes.append(invalid_value(path, ctr, "must be an object"))
            continue
        causes += _container_common_causes(ctr, volumes, path, relaxed)
        restart_always = False
        if ctr.get("restartPolicy") is not None:
            if ctr["restartPolicy"] != "Always":
                causes.append(not_supported(f"{path}.restartPolicy", ctr["restartPolicy"], ("Always",)))
            restart_always = ctr["restartPolicy"] == "Always"
        name = ctr.get("name") or ""
        if name in all_names:
            causes.append(duplicate(f"{path}.name", name))
        elif name:
            all_names.add(name)
        if restart_always:
            lifecycle = ctr.get("lifecycle")
            if isinstance(lifecycle, Mapping):
                for hook in ("postStart", "preStop"):
                    if lifecycle.get(hook) is not None:
                        causes += _handler_causes(
                            lifecycle[hook], f"{path}.lifecycle.{hook}", grace, allow_sleep=True
                        )
            for probe in _PROBES:
                causes += _probe_causes(ctr.get(probe), f"{path}.{probe}", grace, probe)
        else:
            for key in ("lifecycle", *_PROBES):
                if ctr.get(key) is not None:
                    message = "may not be set for init containers without restartPolicy=Always"
                    causes.append(forbidden(f"{path}.{key}", message))
    return causes


def _tolerations_causes(tolerations: Any, field: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, tol in enumerate(tolerations or []):
        path = f"{field}[{i}]"
        if not isinstance(tol, Mapping):
            causes.append(invalid_value(path, tol, "must be an object"))
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or ""
        effect = tol.get("effect") or ""
        value = tol.get("value") or ""
        if key:
            causes += _qualified_name(key, f"{path}.key")
        if not key and operator != "Exists":
            message = (
                'operator must be Exists when `key` is empty, which means "match all values and all keys"'
            )
            causes.append(invalid_value(f"{path}.operator", operator, message))
        if tol.get("tolerationSeconds") is not None and effect != "NoExecute":
            message = "effect must be 'NoExecute' when `tolerationSeconds` is set"
            causes.append(invalid_value(f"{path}.effect", effect, message))
        if operator in ("Equal", ""):
            if (err := validate_label_value(value)) is not None:
                causes.append(invalid_value(f"{path}.operator", value, err))
        elif operator == "Exists":
            if value:
                causes.append(
                    invalid_value(
                        f"{path}.operator", value, "value must be empty when `operator` is 'Exists'"
                    )
                )
        else:
            causes.append(not_supported(f"{path}.operator", operator, ("Equal", "Exists")))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(
                not_supported(f"{path}.effect", effect, ("NoSchedule", "PreferNoSchedule", "NoExecute"))
            )
    return causes


def _pod_spec_causes(spec: Mapping[str, Any], relaxed: bool) -> list[Cause]:
    causes: list[Cause] = []
    if spec.get("terminationGracePeriodSeconds") is None:
        causes.append(required("spec.terminationGracePeriodSeconds"))
    volumes, volume_causes = _volumes_causes(spec.get("volumes"), "spec.volumes")
    causes += volume_causes
    causes += _containers_causes(spec, volumes, relaxed)
    restart = spec.get("restartPolicy") or ""
    if not restart:
        causes.append(required("spec.restartPolicy"))
    elif restart not in ("Always", "OnFailure", "Never"):
        causes.append(not_supported("spec.restartPolicy", restart, ("Always", "OnFailure", "Never")))
    dns = spec.get("dnsPolicy") or ""
    dns_values = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
    if not dns:
        causes.append(required("spec.dnsPolicy"))
    elif dns not in dns_values:
        causes.append(not_supported("spec.dnsPolicy", dns, dns_values))
    causes += _labels_causes(spec.get("nodeSelector"), "spec.nodeSelector")
    seen_gates: set[str] = set()
    for i, gate in enumerate(spec.get("schedulingGates") or []):
        gate_name = (gate or {}).get("name") if isinstance(gate, Mapping) else gate
        causes += _qualified_name(gate_name, f"spec.schedulingGates[{i}]")
        if gate_name in seen_gates:
            causes.append(duplicate(f"spec.schedulingGates[{i}]", gate_name))
        seen_gates.add(gate_name)
    for key in ("serviceAccountName", "nodeName", "priorityClassName"):
        value = spec.get(key) or ""
        if value:
            causes += [invalid_value(f"spec.{key}", value, m) for m in is_dns1123_subdomain(str(value))]
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None:
        number = _int(deadline)
        if number is None or not 1 <= number <= MAX_INT32:
            causes.append(
                invalid_value("spec.activeDeadlineSeconds", deadline, _inclusive_range(1, MAX_INT32))
            )
    for key in ("hostname", "subdomain"):
        value = spec.get(key) or ""
        if value:
            causes += [invalid_value(f"spec.{key}", value, m) for m in is_dns1123_label(str(value))]
    causes += _tolerations_causes(spec.get("tolerations"), "spec.tolerations")
    return causes


def _pod_metadata_and_spec_causes(pod: Mapping[str, Any], relaxed: bool) -> list[Cause]:
    causes = validate_metadata("Pod", pod, True)
    spec = pod.get("spec") or {}
    causes += _pod_spec_causes(spec, relaxed)
    for key in ("containers", "initContainers"):
        for i, ctr in enumerate(spec.get(key) or []):
            image = ctr.get("image") if isinstance(ctr, Mapping) else None
            if isinstance(image, str) and image != image.strip():
                causes.append(
                    invalid_value(
                        f"spec.{key}[{i}].image", image, "must not have leading or trailing whitespace"
                    )
                )
    return causes


_HANDLER_SHAPE: dict[str, Any] = {
    "exec": {"command": ["str"]},
    "httpGet": {"path": "str", "port": "intstr", "scheme": "str", "host": "str"},
    "tcpSocket": {"port": "intstr"},
    "grpc": {"port": "int"},
    "sleep": {"seconds": "int"},
}
_PROBE_SHAPE: dict[str, Any] = {
    **_HANDLER_SHAPE,
    "initialDelaySeconds": "int",
    "timeoutSeconds": "int",
    "periodSeconds": "int",
    "successThreshold": "int",
    "failureThreshold": "int",
    "terminationGracePeriodSeconds": "int",
}
_KEY_REF_SHAPE: dict[str, Any] = {"name": "str", "key": "str"}
_CONTAINER_SHAPE: dict[str, Any] = {
    "name": "str",
    "image": "str",
    "imagePullPolicy": "str",
    "terminationMessagePath": "str",
    "terminationMessagePolicy": "str",
    "restartPolicy": "str",
    "command": ["str"],
    "args": ["str"],
    "env": [
        {
            "name": "str",
            "value": "str",
            "valueFrom": {
                "fieldRef": {"apiVersion": "str", "fieldPath": "str"},
                "resourceFieldRef": {"containerName": "str", "resource": "str"},
                "configMapKeyRef": _KEY_REF_SHAPE,
                "secretKeyRef": _KEY_REF_SHAPE,
            },
        }
    ],
    "envFrom": [{"prefix": "str", "configMapRef": {"name": "str"}, "secretRef": {"name": "str"}}],
    "ports": [{"name": "str", "containerPort": "int", "hostPort": "int", "protocol": "str"}],
    "volumeMounts": [{"name": "str", "mountPath": "str", "subPath": "str", "subPathExpr": "str"}],
    "resources": {"limits": "map", "requests": "map"},
    "resizePolicy": [{"resourceName": "str", "restartPolicy": "str"}],
    "livenessProbe": _PROBE_SHAPE,
    "readinessProbe": _PROBE_SHAPE,
    "startupProbe": _PROBE_SHAPE,
    "lifecycle": {"postStart": _HANDLER_SHAPE, "preStop": _HANDLER_SHAPE},
}
_POD_SHAPE: dict[str, Any] = {
    "metadata": {
        "name": "str",
        "generateName": "str",
        "namespace": "str",
        "uid": "str",
        "labels": "strmap",
        "annotations": "strmap",
        "finalizers": ["str"],
        "ownerReferences": [
            {"apiVersion": "str", "kind": "str", "name": "str", "uid": "str", "controller": "bool"}
        ],
    },
    "spec": {
        "containers": [_CONTAINER_SHAPE],
        "initContainers": [_CONTAINER_SHAPE],
        "ephemeralContainers": [_CONTAINER_SHAPE],
        "volumes": [
            {
                "name": "str",
                "emptyDir": {"medium": "str"},
                "hostPath": {"path": "str", "type": "str"},
                "secret": {"secretName": "str"},
                "configMap": {"name": "str"},
                "persistentVolumeClaim": {"claimName": "str"},
                "downwardAPI": {
                    "items": [{"path": "str", "fieldRef": {"apiVersion": "str", "fieldPath": "str"}}]
                },
            }
        ],
        "tolerations": [
            {"key": "str", "operator": "str", "value": "str", "effect": "str", "tolerationSeconds": "int"}
        ],
        "schedulingGates": [{"name": "str"}],
        "nodeSelector": "strmap",
        "restartPolicy": "str",
        "dnsPolicy": "str",
        "nodeName": "str",
        "serviceAccountName": "str",
        "serviceAccount": "str",
        "priorityClassName": "str",
        "hostname": "str",
        "subdomain": "str",
        "activeDeadlineSeconds": "int",
        "terminationGracePeriodSeconds": "int",
        "securityContext": "map",
        "os": {"name": "str"},
        "resources": {"limits": "map", "requests": "map"},
    },
}


def _check_decodable(kind: str, obj: Mapping[str, Any]) -> None:
    """Raise 400 BadRequest where the real server could not decode the object (bad shapes or quantities)."""

    def bad(detail: str) -> ApiError:
        version = str(obj.get("apiVersion") or "v1").rpartition("/")[2]
        return ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}')

    problem = _decode_problem(obj, _POD_SHAPE, kind)
    if problem is not None:
        raise bad(problem)
    spec = obj.get("spec")
    if spec is None:
        return
    for key in _CONTAINER_LISTS:
        for ctr in spec.get(key) or []:
            resources = ctr.get("resources") if isinstance(ctr, Mapping) else None
            for part in ("limits", "requests"):
                for value in (
                    ((resources or {}).get(part) or {}).values() if isinstance(resources, Mapping) else ()
                ):
                    try:
                        parse_quantity(value)
                    except ValueError as exc:
                        raise bad(str(exc)) from None
    for vol in spec.get("volumes") or []:
        size = ((vol or {}).get("emptyDir") or {}).get("sizeLimit") if isinstance(vol, Mapping) else None
        if size is not None:
            try:
                parse_quantity(size)
            except ValueError as exc:
                raise bad(str(exc)) from None


def validate_pod_create(pod: Mapping[str, Any], *, relaxed_env_names: bool = False) -> None:
    """Validate a (defaulted) pod on create; raise 422 Invalid naming every cause.

    Covers metadata, volumes, containers and init containers (names, image, ports, env and fieldRef paths,
    volumeMounts, pull policy, resources, probes), restartPolicy, dnsPolicy, activeDeadlineSeconds,
    tolerations. Environment variable names follow the strict C-identifier-like rule unless
    `relaxed_env_names` (the rule of the RelaxedEnvironmentVariableValidation feature). An unparseable
    quantity raises 400 BadRequest as decoding would.
    """
    _check_decodable("Pod", pod)
    causes = _pod_metadata_and_spec_causes(pod, relaxed_env_names)
    spec = pod.get("spec") or {}
    if spec.get("ephemeralContainers"):
        causes.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        causes.append(forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    _raise_invalid("Pod", pod, causes)


# --------------------------------------------------------------------------------------------------
# Pod updates and resizes
# --------------------------------------------------------------------------------------------------

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


def _is_restartable_init(ctr: Any) -> bool:
    return isinstance(ctr, Mapping) and ctr.get("restartPolicy") == "Always"


def _drop_cpu_memory_updates(ctr: dict[str, Any], old_ctr: Mapping[str, Any]) -> None:
    old_resources = old_ctr.get("resources") or {}
    resources = ctr.get("resources") or {}
    out: dict[str, Any] = {}
    for part in ("limits", "requests"):
        old_list = old_resources.get(part)
        if old_list is None:
            continue
        munged = {k: v for k, v in (resources.get(part) or {}).items() if k not in ("cpu", "memory")}
        for key in ("cpu", "memory"):
            if key in old_list:
                munged[key] = old_list[key]
        out[part] = munged
    ctr["resources"] = out


def _container_resize_causes(
    new_ctr: Mapping[str, Any], old_ctr: Mapping[str, Any], field: str, memory_limit_decrease: bool
) -> list[Cause]:
    causes: list[Cause] = []
    new_res, old_res = new_ctr.get("resources") or {}, old_ctr.get("resources") or {}
    for part, what in (("requests", "resource requests"), ("limits", "resource limits")):
        if set(old_res.get(part) or {}) - set(new_res.get(part) or {}):
            causes.append(forbidden(f"{field}.{part}", f"{what} cannot be removed"))
    memory_policy = ""
    for policy in new_ctr.get("resizePolicy") or []:
        if isinstance(policy, Mapping) and policy.get("resourceName") == "memory":
            memory_policy = policy.get("restartPolicy") or ""
            break
    if memory_policy in ("NotRequired", "") and not memory_limit_decrease:
        new_limit = (new_res.get("limits") or {}).get("memory")
        old_limit = (old_res.get("limits") or {}).get("memory")
        path = f"{field}.limits[memory]"
        if new_limit is not None and old_limit is not None:
            try:
                if parse_quantity(new_limit) < parse_quantity(old_limit):
                    causes.append(
                        forbidden(
                            path, "memory limits cannot be decreased unless resizePolicy is RestartContainer"
                        )
                    )
            except ValueError:
                pass
        elif new_limit is not None:
            causes.append(
                forbidden(path, "memory limits cannot be added unless resizePolicy is RestartContainer")
            )
    return causes


def validate_pod_resize(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    relaxed_env_names: bool = False,
    memory_limit_decrease: bool = False,
) -> None:
    """Validate an update through the `resize` subresource (`ValidatePodResize`); raise 422 Invalid.

    Only cpu and memory requests/limits of containers (and of sidecar init containers) may change; requests
    and limits may not be removed; before 1.34 (`memory_limit_decrease` False) a memory limit may not be
    lowered or added unless the container's memory resizePolicy is RestartContainer (1.34+ leaves that to
    the kubelet's usage check, `validateMemoryResizeAction`); the QoS class may not change. Anything else
    is `spec: Forbidden: only cpu and memory resources are mutable`. (The real server also refuses pods
    whose node reports no container resources; that check is not made here.)
    """
    _check_decodable("Pod", new)
    causes = validate_metadata_update("Pod", old, new)
    causes += _pod_metadata_and_spec_causes(new, relaxed_env_names)
    old_spec: Mapping[str, Any] = old.get("spec") or {}
    new_spec: Mapping[str, Any] = new.get("spec") or {}

    def pod_level(spec: Mapping[str, Any]) -> bool:
        res = spec.get("resources") or {}
        return bool(res.get("requests") or res.get("limits"))

    if pod_level(old_spec) or pod_level(new_spec):
        _raise_invalid("Pod", new, [forbidden("", "pods with pod-level resources cannot be resized")])
    if "kubernetes.io/config.mirror" in ((old.get("metadata") or {}).get("annotations") or {}):
        _raise_invalid("Pod", new, [forbidden("", "static pods cannot be resized")])
    if ((old_spec.get("os") or {}).get("name")) == "windows":
        _raise_invalid("Pod", new, [forbidden("", "windows pods cannot be resized")])
    old_qos = (old.get("status") or {}).get("qosClass") or pod_qos_class(old)
    if old_qos != pod_qos_class(new):
        shown = (new.get("status") or {}).get("qosClass") or old_qos
        causes.append(invalid_value("spec", shown, "Pod QOS Class may not change as a result of resizing"))
    old_ctrs = list(old_spec.get("containers") or [])
    new_ctrs = list(new_spec.get("containers") or [])
    old_inits = list(old_spec.get("initContainers") or [])
    new_inits = list(new_spec.get("initContainers") or [])
    if len(old_ctrs) != len(new_ctrs) or len(old_inits) != len(new_inits):
        causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
        _raise_invalid("Pod", new, causes)
    for i, old_ctr in enumerate(old_inits):
        if _is_restartable_init(old_ctr):
            causes += _container_resize_causes(
                new_inits[i], old_ctr, f"spec.initContainers[{i}].resources", memory_limit_decrease
            )
    for i, old_ctr in enumerate(old_ctrs):
        causes += _container_resize_causes(
            new_ctrs[i], old_ctr, f"spec.containers[{i}].resources", memory_limit_decrease
        )
    munged = copy.deepcopy(dict(new_spec))
    for i, ctr in enumerate(munged.get("containers") or []):
        _drop_cpu_memory_updates(ctr, old_ctrs[i])
        if _normalize(ctr) != _normalize(old_ctrs[i]):
            causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
    for i, ctr in enumerate(munged.get("initContainers") or []):
        if _is_restartable_init(ctr):
            _drop_cpu_memory_updates(ctr, old_inits[i])
            if _normalize(ctr) != _normalize(old_inits[i]):
                causes.append(
                    forbidden("spec", "only cpu and memory resources for sidecar containers are mutable")
                )
        elif _normalize(ctr) != _normalize(old_inits[i]):
            causes.append(forbidden("spec", "resources for non-sidecar init containers are immutable"))
    if not causes and _normalize(munged) != _normalize(old_spec):
        causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
    _raise_invalid("Pod", new, causes)


def prepare_pod_resize(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a `resize` request results in: the old pod with only containers' `resources` and `resizePolicy`
    (regular and sidecar init containers, matched by name) taken from `new`; everything else in `new` is
    dropped, as the resize strategy does. Validate the result with `validate_pod_resize(old, result)`.
    """
    result = copy.deepcopy(dict(old))
    new_meta = new.get("metadata") or {}
    if "resourceVersion" in new_meta:
        result.setdefault("metadata", {})["resourceVersion"] = new_meta["resourceVersion"]
    spec = result.get("spec") or {}
    new_spec = new.get("spec") or {}
    for key, only_sidecars in (("containers", False), ("initContainers", True)):
        index = {c.get("name"): c for c in spec.get(key) or [] if isinstance(c, dict)}
        for ctr in new_spec.get(key) or []:
            target = index.get(ctr.get("name")) if isinstance(ctr, Mapping) else None
            if target is None or (only_sidecars and not _is_restartable_init(target)):
                continue
            for field_name in ("resources", "resizePolicy"):
                if field_name in ctr:
                    target[field_name] = copy.deepcopy(ctr[field_name])
                else:
                    target.pop(field_name, None)
    return result


# --------------------------------------------------------------------------------------------------
# Namespace, ConfigMap, Event, Node
# --------------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------------
# OpenKruise v1.9.0 webhooks
# --------------------------------------------------------------------------------------------------

IMAGE_PULL_JOB_WEBHOOK = "vimagepulljob-v1beta1.kb.io"
IMAGE_PULL_JOB_MUTATING_WEBHOOK = "mimagepulljob-v1beta1.kb.io"
CRR_WEBHOOK = "mcontainerrecreaterequest.kb.io"
NODE_IMAGE_WEBHOOK = "vnodeimage.kb.io"
PROTECTION_FINALIZER = "apps.kruise.io/deletion-protection"
CRR_POD_UID_LABEL = "crr.apps.kruise.io/pod-uid"
CRR_NODE_NAME_LABEL = "crr.apps.kruise.io/node-name"
CRR_ACTIVE_LABEL = "crr.apps.kruise.io/active"
CRR_UNREADY_ACQUIRED_ANNOTATION = "crr.apps.kruise.io/unready-acquired"
_CRR_MIN_DEADLINE_SECONDS = 3
_MAX_IMAGES_PER_NODE = 256
_NODE_UNCHECKED: Any = object()


def webhook_denial(webhook: str, code: int, message: str, *, reason: str = "") -> ApiError:
    """The API server's answer when an admission webhook refuses a request.

    Code and reason are the webhook's own: controller-runtime's `admission.Errored(code, err)` sets no reason
    (the Status then has an empty `reason`), `admission.Denied(msg)` sets 403 and `Forbidden`.
    """
    err = ApiError(code, f'admission webhook "{webhook}" denied the request: {message}')
    err.reason = reason
    return err


def _go_parse_int32(text: str) -> int:
    """strconv.ParseInt(text, 10, 32), raising ValueError with Go's message."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not -(2**31) <= value <= MAX_INT32:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _selector_error(selector: Mapping[str, Any]) -> str | None:
    sub = {k: selector[k] for k in ("matchLabels", "matchExpressions") if k in selector}
    try:
        LabelSelector.from_object(sub)
    except ApiError as exc:
        return "; ".join(f"{c['field']}: {c['message']}" for c in exc.causes) or exc.message
    return None


_GO_JSON_TYPES = {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def _go_json_type(value: Any) -> str:
    return next((name for py, name in _GO_JSON_TYPES.items() if type(value) is py), "value")


def _unmarshal_error(value: Any, where: str, go_type: str) -> str:
    return f"json: cannot unmarshal {_go_json_type(value)} into Go struct field {where} of type {go_type}"


def _decode_problem(obj: Any, shape: Mapping[str, Any], path: str) -> str | None:
    """Where `obj` would not decode into the Go type described by `shape`, as encoding/json words it.

    `shape` maps field names to "int", "str", "bool", a nested shape (object), or a one-item list (array of).
    """
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        return _unmarshal_error(obj, path, "object")
    for key, kind in shape.items():
        value = obj.get(key)
        if value is None:
            continue
        where = f"{path}.{key}"
        if isinstance(kind, list):
            if not isinstance(value, list):
                return _unmarshal_error(value, where, "array")
            for item in value:
                sub = kind[0]
                problem = (
                    _decode_problem(item, sub, where)
                    if isinstance(sub, Mapping)
                    else _decode_problem({"_": item}, {"_": sub}, where)
                )
                if problem:
                    return problem.replace(f"{where}._", where)
        elif isinstance(kind, Mapping):
            if (problem := _decode_problem(value, kind, where)) is not None:
                return problem
        else:
            if kind == "strmap":
                if not isinstance(value, Mapping):
                    return _unmarshal_error(value, where, "map[string]string")
                bad = next((v for v in value.values() if v is not None and not isinstance(v, str)), None)
                if bad is not None:
                    return _unmarshal_error(bad, where, "string")
                continue
            if kind == "map":
                if not isinstance(value, Mapping):
                    return _unmarshal_error(value, where, "map")
                continue
            ok = {
                "int": isinstance(value, int) and not isinstance(value, bool),
                "str": isinstance(value, str),
                "bool": isinstance(value, bool),
                "intstr": isinstance(value, int | str) and not isinstance(value, bool),
            }[kind]
            if not ok:
                go_type = {"int": "int64", "str": "string", "bool": "bool", "intstr": "intstr.IntOrString"}[
                    kind
                ]
                return _unmarshal_error(value, where, go_type)
    return None


_SELECTOR_SHAPE: dict[str, Any] = {
    "matchLabels": {},
    "matchExpressions": [{"key": "str", "operator": "str", "values": ["str"]}],
}
_IMAGE_PULL_JOB_SHAPE: dict[str, Any] = {
    "image": "str",
    "imagePullPolicy": "str",
    "parallelism": "intstr",
    "pullSecrets": ["str"],
    "selector": {**_SELECTOR_SHAPE, "names": ["str"]},
    "podSelector": _SELECTOR_SHAPE,
    "completionPolicy": {"type": "str", "activeDeadlineSeconds": "int", "ttlSecondsAfterFinished": "int"},
    "pullPolicy": {"timeoutSeconds": "int", "backoffLimit": "int"},
}
_CRR_SHAPE: dict[str, Any] = {
    "podName": "str",
    "containers": [{"name": "str"}],
    "strategy": {
        "failurePolicy": "str",
        "orderedRecreate": "bool",
        "forceRecreate": "bool",
        "terminationGracePeriodSeconds": "int",
        "unreadyGracePeriodSeconds": "int",
        "minStartedSeconds": "int",
    },
    "activeDeadlineSeconds": "int",
    "ttlSecondsAfterFinished": "int",
}


_OBJECT_META_SHAPE: dict[str, Any] = {
    **_POD_SHAPE["metadata"],
    "resourceVersion": "str",
    "generation": "int",
    "creationTimestamp": "str",
    "deletionTimestamp": "str",
    "deletionGracePeriodSeconds": "int",
}
_OBJECT_SHAPES: dict[str, dict[str, Any]] = {
    "ConfigMap": {"data": "strmap", "binaryData": "strmap", "immutable": "bool"},
    "Event": {
        "involvedObject": {
            "kind": "str",
            "namespace": "str",
            "name": "str",
            "uid": "str",
            "apiVersion": "str",
            "resourceVersion": "str",
            "fieldPath": "str",
        },
        "reason": "str",
        "message": "str",
        "source": {"component": "str", "host": "str"},
        "firstTimestamp": "str",
        "lastTimestamp": "str",
        "eventTime": "str",
        "count": "int",
        "type": "str",
        "action": "str",
        "reportingComponent": "str",
        "reportingInstance": "str",
    },
    "Namespace": {"spec": {"finalizers": ["str"]}, "status": {"phase": "str"}},
    "Node": {
        "spec": {
            "podCIDR": "str",
            "podCIDRs": ["str"],
            "providerID": "str",
            "unschedulable": "bool",
            "taints": [{"key": "str", "value": "str", "effect": "str", "timeAdded": "str"}],
        }
    },
    "ImagePullJob": {"spec": "map"},
    "NodeImage": {"spec": {"images": "map"}},
    "ContainerRecreateRequest": {"spec": "map"},
}


def check_decodable(kind: str, obj: Mapping[str, Any]) -> None:
    """Raise 400 BadRequest where the real server could not decode `obj` into its Go type: metadata, status
    and the fields of the kind that have a fixed JSON type (pods: see `_check_decodable`)."""
    if kind == "Pod":
        _check_decodable(kind, obj)
        shape: dict[str, Any] = {"status": "map"}
    else:
        shape = {"metadata": _OBJECT_META_SHAPE, "status": "map", **_OBJECT_SHAPES.get(kind, {})}
    problem = _decode_problem(obj, shape, kind)
    if problem is not None:
        version = str(obj.get("apiVersion") or "v1").rpartition("/")[2]
        raise ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}')


def mutate_image_pull_job(job: dict[str, Any], *, create: bool = True) -> None:
    """The mutating webhook's defaults, in place (`SetDefaultsImagePullJob`).

    completionPolicy.type Always, pullPolicy {timeoutSeconds: 600, backoffLimit: 3}, imagePullPolicy
    IfNotPresent; a v1alpha1 job being created also gets the `apps.kruise.io/deletion-protection` finalizer
    (which the ImagePullJob controller removes on deletion). parallelism is not defaulted here: the controller
    treats an unset parallelism as 1.
    """
    spec = job.setdefault("spec", {})
    completion = spec.get("completionPolicy")
    if not isinstance(completion, dict):
        completion = spec["completionPolicy"] = {}
    if not completion.get("type"):
        completion["type"] = "Always"
    pull = spec.get("pullPolicy")
    if not isinstance(pull, dict):
        pull = spec["pullPolicy"] = {}
    if pull.get("timeoutSeconds") is None:
        pull["timeoutSeconds"] = 600
    if pull.get("backoffLimit") is None:
        pull["backoffLimit"] = 3
    if not spec.get("imagePullPolicy"):
        spec["imagePullPolicy"] = "IfNotPresent"
    if create and str(job.get("apiVersion", "")).endswith("/v1alpha1"):
        finalizers = job.setdefault("metadata", {}).setdefault("finalizers", [])
        if PROTECTION_FINALIZER not in finalizers:
            finalizers.append(PROTECTION_FINALIZER)


def _image_pull_job_problem(spec: Mapping[str, Any]) -> str | None:
    selector = spec.get("selector")
    pod_selector = spec.get("podSelector")
    if selector is not None:
        if isinstance(selector, Mapping) and (
            selector.get("matchLabels") is not None or selector.get("matchExpressions") is not None
        ):
            if selector.get("names") is not None:
                return "can not set both names and labelSelector in this spec.selector"
            if (err := _selector_error(selector)) is not None:
                return f"invalid selector: {err}"
        names = selector.get("names") if isinstance(selector, Mapping) else None
        if names is not None and len(set(names)) != len(names):
            return "duplicated name in selector names"
    if pod_selector is not None:
        if selector is not None:
            return "can not set both selector and podSelector"
        if isinstance(pod_selector, Mapping) and (err := _selector_error(pod_selector)) is not None:
            return f"invalid podSelector: {err}"
    image = spec.get("image") or ""
    if not image:
        return "image can not be empty"
    try:
        parse_image_reference(image)
    except ValueError as exc:
        return f"invalid image {image}: {exc}"
    parallelism = spec.get("parallelism")
    if parallelism is not None:
        if isinstance(parallelism, str):
            if parallelism.endswith("%"):
                return "parallelism does not support percentage value"
            try:
                value = _go_parse_int32(parallelism)
            except ValueError as exc:
                return f"parallelism must be a valid integer: {exc}"
            if value < 0:
                return "parallelism must be non-negative"
        elif isinstance(parallelism, int) and parallelism < 0:
            return "parallelism must be non-negative"
    timeout = (spec.get("pullPolicy") or {}).get("timeoutSeconds")
    timeout = 600 if timeout is None else timeout
    completion = spec.get("completionPolicy") or {}
    kind = completion.get("type") or ""
    deadline = completion.get("activeDeadlineSeconds")
    if kind == "Always":
        if deadline is not None and timeout > deadline:
            return (
                "completionPolicy.activeDeadlineSeconds must be greater than "
                "pullPolicy.timeoutSeconds(default 600)"
            )
    elif kind == "Never":
        if deadline is not None or completion.get("ttlSecondsAfterFinished") is not None:
            return (
                "activeDeadlineSeconds and ttlSecondsAfterFinished can only work with Always "
                "CompletionPolicyType"
            )
    else:
        return f"unknown type of completionPolicy: {kind}"
    return None


def validate_image_pull_job(
    job: Mapping[str, Any],
    gate_enabled: bool,
    *,
    old: Mapping[str, Any] | None = None,
    kruise_daemon_enabled: bool = True,
) -> None:
    """The validating webhook `vimagepulljob-v1beta1.kb.io` (create, or update when `old` is given).

    Feature gates off -> 403 `feature-gate ImagePullJobGate is not enabled` (KruiseDaemon is checked first); a
    changed spec.pullSecrets on update -> 403 Forbidden `spec.pullSecrets is immutable`; any other problem ->
    400 with the webhook's message (selector names vs labels, selector vs podSelector, image, parallelism,
    completionPolicy). The job is expected to carry the mutating webhook's defaults already.
    """
    if not kruise_daemon_enabled:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "feature-gate KruiseDaemon is not enabled")
    if not gate_enabled:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "feature-gate ImagePullJobGate is not enabled")
    problem = _decode_problem(job.get("spec"), _IMAGE_PULL_JOB_SHAPE, "ImagePullJob.spec")
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 400, problem)
    spec = job.get("spec") or {}
    if old is not None and (spec.get("pullSecrets") or None) != (
        (old.get("spec") or {}).get("pullSecrets") or None
    ):
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "spec.pullSecrets is immutable", reason="Forbidden")
    problem = _image_pull_job_problem(spec)
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 400, problem)


def admit_image_pull_job(
    job: dict[str, Any],
    gate_enabled: bool,
    *,
    old: Mapping[str, Any] | None = None,
    kruise_daemon_enabled: bool = True,
) -> None:
    """Mutating then validating webhooks for an ImagePullJob; `job` is defaulted in place only when accepted.

    The real API server checks the CRD schema and metadata between the two webhooks; call
    `mutate_image_pull_job` and `validate_image_pull_job` separately to reproduce that order exactly.
    """
    problem = _decode_problem(job.get("spec"), _IMAGE_PULL_JOB_SHAPE, "ImagePullJob.spec")
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_MUTATING_WEBHOOK, 400, problem)
    candidate = copy.deepcopy(job)
    mutate_image_pull_job(candidate, create=old is None)
    validate_image_pull_job(candidate, gate_enabled, old=old, kruise_daemon_enabled=kruise_daemon_enabled)
    job.clear()
    job.update(candidate)


def validate_image_pull_job_update(
    old: Mapping[str, Any],
    new: dict[str, Any],
    *,
    gate_enabled: bool = True,
    kruise_daemon_enabled: bool = True,
) -> None:
    """Both ImagePullJob webhooks on an update: `new` gets the defaults (in place, when accepted), then is
    validated against `old` (spec.pullSecrets immutable). Pass the real `gate_enabled`: updates are refused
    too while ImagePullJobGate is off.
    """
    admit_image_pull_job(new, gate_enabled, old=old, kruise_daemon_enabled=kruise_daemon_enabled)


def _crr_deny(code: int, message: str) -> ApiError:
    return webhook_denial(CRR_WEBHOOK, code, message)


def _pod_is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _crr_update(crr: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    if _normalize(crr.get("spec") or {}) != _normalize(old.get("spec") or {}):
        raise _crr_deny(403, "spec of ContainerRecreateRequest is immutable")
    labels = (crr.get("metadata") or {}).get("labels") or {}
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    for key in (CRR_POD_UID_LABEL, CRR_NODE_NAME_LABEL):
        if labels.get(key) != old_labels.get(key):
            raise _crr_deny(403, f"not allowed to update immutable label {key}")
    annotations = (crr.get("metadata") or {}).get("annotations") or {}
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    old_value = old_annotations.get(CRR_UNREADY_ACQUIRED_ANNOTATION)
    if old_value and annotations.get(CRR_UNREADY_ACQUIRED_ANNOTATION) != old_value:
        raise _crr_deny(403, f"not allowed to update immutable annotation {CRR_UNREADY_ACQUIRED_ANNOTATION}")


def admit_crr(
    crr: dict[str, Any],
    pod: Mapping[str, Any] | None,
    *,
    old: Mapping[str, Any] | None = None,
    node: Mapping[str, Any] | None = _NODE_UNCHECKED,
    kruise_daemon_enabled: bool = True,
) -> None:
    """The mutating webhook `mcontainerrecreaterequest.kb.io` (Kruise v1.9.0 has no validating one for CRRs).

    On create it checks the request (podName, containers, activeDeadlineSeconds >= 3, grace periods >= 0,
    failurePolicy Fail|Ignore, defaulting it to Fail) and the target `pod` (None: not found; it must be
    active, i.e. not Succeeded/Failed nor deleting, and scheduled), then fills in place: labels
    `crr.apps.kruise.io/active`, `/node-name`, `/pod-uid`, `strategy.terminationGracePeriodSeconds` from the
    pod, and per container the pod container's preStop (and ports for an httpGet preStop) and `statusContext`
    {containerID, restartCount} from its status; a container unknown to the pod or without a containerID is
    refused. Pass `node` (None: not found) to check the node as the webhook does. On update (`old` given) the
    spec and the pod-uid/node-name labels are immutable (403). Refusals are 400 (403 for the gate and
    immutability) webhook denials. Like the real webhook, duplicate container names are not refused (its check
    never records a name), and no pod-name label nor owner reference is added.
    """
    if not kruise_daemon_enabled:
        raise _crr_deny(403, "feature-gate KruiseDaemon is not enabled")
    problem = _decode_problem(crr.get("spec"), _CRR_SHAPE, "ContainerRecreateRequest.spec")
    if problem is not None:
        raise _crr_deny(400, problem)
    if old is not None:
        _crr_update(crr, old)
        return
    candidate = copy.deepcopy(crr)
    labels = candidate.setdefault("metadata", {}).get("labels")
    if not isinstance(labels, dict):
        labels = candidate["metadata"]["labels"] = {}
    spec = candidate.setdefault("spec", {})
    pod_name = spec.get("podName") or ""
    if not pod_name:
        raise _crr_deny(400, "podName can not be empty")
    strategy = spec.get("strategy")
    if not isinstance(strategy, dict):
        strategy = spec["strategy"] = {}
    if isinstance(spec.get("containers"), list):
        spec["containers"] = [c if isinstance(c, dict) else {} for c in spec["containers"]]
    labels[CRR_ACTIVE_LABEL] = "true"
    if not spec.get("containers"):
        raise _crr_deny(400, "containers list can not be null")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline < _CRR_MIN_DEADLINE_SECONDS:
        raise _crr_deny(400, f"activeDeadlineSeconds can not be less than {_CRR_MIN_DEADLINE_SECONDS}s")
    if (strategy.get("terminationGracePeriodSeconds") or 0) < 0:
        raise _crr_deny(400, "terminationGracePeriodSeconds must be non-negative integer")
    if (strategy.get("unreadyGracePeriodSeconds") or 0) < 0:
        raise _crr_deny(400, "unreadyGracePeriodSeconds must be non-negative integer")
    policy = strategy.get("failurePolicy") or ""
    if not policy:
        strategy["failurePolicy"] = "Fail"
    elif policy not in ("Fail", "Ignore"):
        raise _crr_deny(400, f"unknown failurePolicy {policy}")
    if pod is None:
        raise _crr_deny(400, f"no found Pod named {pod_name}")
    conditions = (pod.get("status") or {}).get("conditions") or []
    sidecar_terminated = any(
        isinstance(c, Mapping) and c.get("type") == "SidecarTerminated" for c in conditions
    )
    node_name = (pod.get("spec") or {}).get("nodeName") or ""
    if not _pod_is_active(pod) and not sidecar_terminated:
        raise _crr_deny(400, "not allowed to recreate containers in an inactive Pod")
    if not node_name:
        raise _crr_deny(400, "not allowed to recreate containers in a pending Pod")
    if node is None:
        raise _crr_deny(400, f'failed to get Node {node_name}: nodes "{node_name}" not found')
    _inject_pod(candidate, pod, None if node is _NODE_UNCHECKED else node)
    crr.clear()
    crr.update(candidate)


def validate_crr_update(
    old: Mapping[str, Any], new: dict[str, Any], *, kruise_daemon_enabled: bool = True
) -> None:
    """The CRR webhook on an update: the spec, the pod-uid and node-name labels and a set unready-acquired
    annotation are immutable (403 denials)."""
    admit_crr(new, None, old=old, kruise_daemon_enabled=kruise_daemon_enabled)


def _inject_pod(crr: dict[str, Any], pod: Mapping[str, Any], node: Mapping[str, Any] | None) -> None:
    labels = crr["metadata"]["labels"]
    spec = crr["spec"]
    pod_spec = pod.get("spec") or {}
    labels[CRR_NODE_NAME_LABEL] = pod_spec.get("nodeName") or ""
    labels[CRR_POD_UID_LABEL] = (pod.get("metadata") or {}).get("uid") or ""
    if (
        node is not None
        and ((node.get("metadata") or {}).get("labels") or {}).get("type") == "virtual-kubelet"
    ):
        labels["type"] = "virtual-kubelet"
    strategy = spec["strategy"]
    if (
        strategy.get("terminationGracePeriodSeconds") is None
        and pod_spec.get("terminationGracePeriodSeconds") is not None
    ):
        strategy["terminationGracePeriodSeconds"] = pod_spec["terminationGracePeriodSeconds"]
    pod_containers = {c.get("name"): c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping)}
    statuses = {
        s.get("name"): s
        for s in (pod.get("status") or {}).get("containerStatuses") or []
        if isinstance(s, Mapping)
    }
    for ctr in spec["containers"]:
        name = ctr.get("name")
        if (
            ctr.get("preStop") is not None
            or ctr.get("ports") is not None
            or ctr.get("statusContext") is not None
        ):
            raise _crr_deny(400, "preStop, ports, statusContext in container are ready-only fields")
        pod_ctr = pod_containers.get(name)
        if pod_ctr is None:
            raise _crr_deny(400, f"container {name} not found in Pod")
        status = statuses.get(name)
        if status is None:
            raise _crr_deny(400, f"not found {name} containerStatus in Pod Status")
        if not status.get("containerID"):
            raise _crr_deny(
                400, f"no containerID in {name} containerStatus, maybe the container has not been initialized"
            )
        pre_stop = (pod_ctr.get("lifecycle") or {}).get("preStop")
        if isinstance(pre_stop, Mapping):
            handler = {
                k: copy.deepcopy(pre_stop[k]) for k in ("exec", "httpGet", "tcpSocket") if pre_stop.get(k)
            }
            ctr["preStop"] = handler
            if handler.get("httpGet") is not None and pod_ctr.get("ports") is not None:
                ctr["ports"] = copy.deepcopy(pod_ctr["ports"])
        ctr["statusContext"] = {
            "containerID": status["containerID"],
            "restartCount": status.get("restartCount", 0),
        }


def _now_rfc3339() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def admit_node_image(
    obj: dict[str, Any], *, kruise_daemon_enabled: bool = True, now: Callable[[], str] = _now_rfc3339
) -> None:
    """NodeImage webhooks: default each tag (createdAt now, pullPolicy timeoutSeconds 600 / backoffLimit 3),
    sort tags, then validate (at most 256 images; image names and tags non-empty; no duplicate tag; version >=
    0; `pullPolicy.ttlSecondsAfterFinished` set). Refusals are 400 denials of `vnodeimage.kb.io` (403 for the
    gate). A NodeImage is named after its node; that is a convention of the controllers, not checked by the
    webhooks.
    """
    if not kruise_daemon_enabled:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 403, "feature-gate KruiseDaemon is not enabled")
    candidate = copy.deepcopy(obj)
    images = candidate.setdefault("spec", {}).get("images")
    if images is None:
        images = {}
    problem = _node_image_decode_problem(images)
    if problem is not None:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 400, problem)
    stamp = now()
    for spec in images.values():
        tags = spec.get("tags") or [] if isinstance(spec, dict) else []
        for tag in tags:
            if not isinstance(tag, dict):
                continue
            tag.setdefault("createdAt", stamp)
            policy = tag.get("pullPolicy")
            if not isinstance(policy, dict):
                policy = tag["pullPolicy"] = {}
            policy.setdefault("timeoutSeconds", 600)
            policy.setdefault("backoffLimit", 3)
        if isinstance(spec, dict) and tags:
            spec["tags"] = sorted(tags, key=lambda t: str((t or {}).get("tag", "")))
    for status in ((candidate.get("status") or {}).get("imageStatuses") or {}).values():
        if isinstance(status, dict) and status.get("tags"):
            status["tags"] = sorted(status["tags"], key=lambda t: str((t or {}).get("tag", "")))
    problem = _node_image_problem(images)
    if problem is not None:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 400, problem)
    obj.clear()
    obj.update(candidate)


def _node_image_decode_problem(images: Any) -> str | None:
    """Where `spec.images` would not decode into the webhook's Go types (an object of ImageSpec)."""
    if not isinstance(images, dict):
        return _unmarshal_error(images, "NodeImage.spec.images", "map[string]v1alpha1.ImageSpec")
    for name, spec in images.items():
        if spec is not None and not isinstance(spec, dict):
            return _unmarshal_error(spec, f"NodeImage.spec.images.{name}", "v1alpha1.ImageSpec")
        tags = (spec or {}).get("tags")
        if tags is not None and (
            not isinstance(tags, list) or not all(isinstance(t, dict | None) for t in tags)
        ):
            return _unmarshal_error(tags, f"NodeImage.spec.images.{name}.tags", "[]v1alpha1.ImageTagSpec")
    return None


def _node_image_problem(images: Mapping[str, Any]) -> str | None:
    if len(images) > _MAX_IMAGES_PER_NODE:
        return f"spec images length {len(images)} can not be more than {_MAX_IMAGES_PER_NODE}"
    for name, spec in images.items():
        if not name:
            return "image name can not be empty"
        seen: set[str] = set()
        for tag in (spec or {}).get("tags") or []:
            value = (tag or {}).get("tag") or ""
            if not value:
                return f"tag for image {name} can not be empty"
            if value in seen:
                return f"duplicated tag {value} for image {name}"
            seen.add(value)
            full = f"{name}/{value}"
            if not tag.get("createdAt"):
                return f"createAt field for {full} can not be empty"
            if (tag.get("version") or 0) < 0:
                return f"version for {full} can not be less than 0"
            if tag.get("pullPolicy") is None:
                return f"pullPolicy field for {full} must set"
            if tag["pullPolicy"].get("ttlSecondsAfterFinished") is None:
                return f"pullPolicy.ttlSecondsAfterFinished for {full} must set"
    return None
