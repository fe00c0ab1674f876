"""What a request to the API server carries, decoded as its handlers decode it
(`k8s.io/apiserver/pkg/endpoints/handlers`: `rest.go` query options, `create.go`/`update.go`/`patch.go` bodies
and `fieldValidation`, `delete.go` DeleteOptions and preconditions; Go's `encoding/json` limits), and the
warnings a request collects for its answer."""

from __future__ import annotations

import contextvars
import json
import re
from datetime import UTC, datetime
from typing import Any

import yaml
from aiohttp import web

from . import fieldmanager, protobuf
from .errors import ApiError
from .resources import Resource
from .store import Obj

RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)
PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}


MAX_BODY = 3 * 1024 * 1024


MAX_DEPTH = 100  # nesting levels of a request body (Kubernetes objects nest a dozen or so)


MAX_URL = 1024 * 1024  # the request line and each header, as the real server's MaxHeaderBytes


SURROGATE = re.compile("[\ud800-\udfff]")


def query_bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


def query_int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"invalid value for query parameter {name}: {raw!r}: not an integer") from None


def query_time(request: web.Request, name: str) -> datetime | None:
    """An RFC 3339 time query parameter, in UTC; None when absent or before any representable time."""
    raw = request.query.get(name)
    if not raw:
        return None
    try:
        if not RFC3339.fullmatch(raw):
            raise ValueError(raw)
        parsed = datetime.fromisoformat(raw.upper().replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(
            400, f"invalid value for query parameter {name}: {raw!r}: not an RFC 3339 time"
        ) from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # within a day of the ends of the calendar
        return None if parsed.year == 1 else datetime.max.replace(tzinfo=UTC)


def is_dry_run(request: web.Request, options: str, extra: Any = None) -> bool:
    """Whether the request is a dry run (`dryRun=All`, or `dryRun: [All]` in DeleteOptions); other values
    are refused as the real server does."""
    values = list(request.query.getall("dryRun", []))
    if extra is not None:
        if not isinstance(extra, list) or not all(isinstance(v, str) for v in extra):
            raise ApiError(400, f"{options}.dryRun must be a list of strings")
        values += extra
    for value in values:
        if value != "All":
            raise ApiError(
                422,
                f'{options}.meta.k8s.io "" is invalid: dryRun: Unsupported value: "{value}": '
                'supported values: "All"',
                reason="Invalid",
            )
    return bool(values)


def delete_options(opts: Any, grace: int | None) -> tuple[int | None, dict[str, Any], Any]:
    """Check DeleteOptions: returns (grace period, preconditions, dryRun) or refuses them with a 400/422."""
    if opts is None:
        opts = {}
    if not isinstance(opts, dict):
        raise ApiError(400, "DeleteOptions must be an object")
    if opts.get("gracePeriodSeconds") is not None:
        if not isinstance(opts["gracePeriodSeconds"], int) or isinstance(opts["gracePeriodSeconds"], bool):
            raise ApiError(400, "DeleteOptions.gracePeriodSeconds must be an integer")
        grace = opts["gracePeriodSeconds"]
    pre = opts.get("preconditions")
    if pre is None:
        pre = {}
    if not isinstance(pre, dict):
        raise ApiError(400, "DeleteOptions.preconditions must be an object")
    for field in ("uid", "resourceVersion"):
        if pre.get(field) is not None and not isinstance(pre[field], str):
            raise ApiError(400, f"DeleteOptions.preconditions.{field} must be a string")
    if grace is not None and grace < 0:
        raise ApiError(422, "DeleteOptions.gracePeriodSeconds must be >= 0", reason="Invalid")
    return grace, pre, opts.get("dryRun")


def check_preconditions(pre: dict[str, Any], meta: dict[str, Any]) -> None:
    for field in ("uid", "resourceVersion"):
        value = pre.get(field)
        if value is not None and meta.get(field) != value:
            raise ApiError(
                409,
                f"Precondition failed: {field} in precondition: {value}, {field} in object meta: "
                f"{meta.get(field)}",
            )


def reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} is out of range")
    return value


def clean(value: Any, depth: int = 0) -> Any:
    """Bound the nesting and replace lone UTF-16 surrogates by U+FFFD, as Go's JSON decoder does."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the object is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        return SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {clean(k, depth): clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v, depth + 1) for v in value]
    return value


def parse_json(raw: bytes) -> Any:
    """A request body as the real server decodes JSON: no NaN/Infinity, no out-of-range numbers, bounded
    nesting; anything else is a ValueError."""
    try:
        return clean(json.loads(raw, parse_constant=reject_constant, parse_float=finite_float))
    except RecursionError:
        raise ValueError(f"the object is nested more than {MAX_DEPTH} levels deep") from None


async def read_body(request: web.Request) -> Any:
    raw = await request.read()
    if len(raw) > MAX_BODY:
        raise ApiError(413, "Request entity too large: limit is 3145728", reason="RequestEntityTooLarge")
    if not raw:
        raise ApiError(400, "the request body is empty")
    if request.headers.get("Content-Type", "").split(";")[0].strip().lower() == protobuf.MEDIA_TYPE:
        return protobuf.decode(raw)
    try:
        return parse_json(raw)
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ApiError(400, f"the body of the request was in an unknown format: {e}") from None


WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)


def send_initial_events(request: web.Request) -> bool:
    """Whether a watch asks for a watch-list stream (`sendInitialEvents=true`), checked as apimachinery's
    `ValidateListOptions` does: it needs resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true."""
    if request.query.get("sendInitialEvents", "").lower() != "true":
        return False
    causes = []
    if request.query.get("resourceVersionMatch") != "NotOlderThan":
        causes.append(
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
            "NotOlderThan"
        )
    if not query_bool(request, "allowWatchBookmarks"):
        causes.append(
            "allowWatchBookmarks: Required value: sendInitialEvents requires setting allowWatchBookmarks to "
            "true"
        )
    if causes:
        raise ApiError(422, 'ListOptions.meta.k8s.io "" is invalid: ' + ", ".join(causes), reason="Invalid")
    return True


def check_fields(request: web.Request, res: Resource, version: str, obj: Obj) -> None:
    """`fieldValidation` (apiserver `handlers/rest.go` `fieldValidation`; default Warn): fields the schema
    does not know are a 400 `strict decoding error` under Strict, a `Warning` header under Warn; under Warn
    and Ignore they are then dropped, as decoding (built-in kinds) and pruning (CRDs) drop them."""
    directive = request.query.get("fieldValidation") or "Warn"
    if directive not in ("Ignore", "Warn", "Strict"):
        raise ApiError(
            400,
            f'fieldValidation: Invalid value: "{directive[:64]}": fieldValidation must be one of "Ignore", '
            '"Warn", or "Strict"',
        )
    if directive == "Ignore":
        fieldmanager.prune_unknown(res, version, obj)
        return
    unknown = fieldmanager.unknown_fields(res, version, obj)
    if not unknown:
        return
    fieldmanager.prune_unknown(res, version, obj)
    messages = [f'unknown field "{path}"' for path in unknown]
    if directive == "Strict":
        raise ApiError(400, "strict decoding error: " + ", ".join(messages))
    warnings = WARNINGS.get()
    if warnings is not None:
        warnings.extend(messages)


def manager_of(request: web.Request) -> str:
    return fieldmanager.manager_for(request.query.get("fieldManager"), request.headers.get("User-Agent"))


def apply_body(raw: bytes, res: Resource, version: str) -> Obj:
    """An apply patch: a YAML (or JSON) object naming its apiVersion and kind; anchors and aliases are refused
    (an alias bomb would expand without bound)."""
    if len(raw) > MAX_BODY:
        raise ApiError(413, "Request entity too large: limit is 3145728", reason="RequestEntityTooLarge")
    try:
        body = parse_json(raw)
    except ValueError:
        try:
            if any(isinstance(ev, yaml.AliasEvent) for ev in yaml.parse(raw.decode("utf-8"))):
                raise ApiError(400, "the apply patch may not use YAML aliases")
            body = clean(yaml.safe_load(raw.decode("utf-8")))
        except (yaml.YAMLError, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise ApiError(400, f"the body of the request was in an unknown format: {e}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the apply patch must be an object")
    if not body.get("apiVersion") or not body.get("kind"):
        raise ApiError(400, "the apply patch must set apiVersion and kind")
    if body.get("apiVersion") != res.api_version(version) or body.get("kind") != res.kind:
        raise ApiError(
            400,
            f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) do not "
            f"match the expected {res.api_version(version)} {res.kind}",
        )
    if not isinstance(body.setdefault("metadata", {}), dict):
        raise ApiError(400, "metadata must be an object")
    return body
