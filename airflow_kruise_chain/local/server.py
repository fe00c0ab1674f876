"""The HTTP face of the local cluster: a Kubernetes-compatible REST API on aiohttp."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import yaml
from aiohttp import web

from . import fieldmanager, limits, paging, protobuf
from . import resources as R
from .admission import Admission
from .admission_policy import Attributes, PolicyAdmission
from .errors import ApiError
from .events import EventRecorder
from .filters import Filters
from .patch import json_merge_patch, json_patch, strategic_merge_patch
from .rbac import ADMIN_USER, USER_INFO
from .resources import Resource
from .selectors import FieldSelector, LabelSelector
from .store import Obj, Store, deep_copy
from .strategies import Registry

log = logging.getLogger(__name__)


def version_info(version: str) -> dict[str, str]:
    """The `/version` answer for Kubernetes `version` ("1.35.0")."""
    major, minor = version.split(".")[:2]
    return {
        "major": major,
        "minor": minor,
        "gitVersion": f"v{version}+kruise-local",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (Python)",
        "compiler": "cpython",
        "platform": "linux/amd64",
    }


_PATCH_TYPES = {
    "application/strategic-merge-patch+json": "strategic",
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
}
MAX_BODY = 3 * 1024 * 1024
MAX_DEPTH = 100  # nesting levels of a request body (Kubernetes objects nest a dozen or so)
MAX_URL = 1024 * 1024  # the request line and each header, as the real server's MaxHeaderBytes
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json(data: Any, status: int = 200) -> web.Response:
    # bytes, so aiohttp adds no `; charset=utf-8`: the real server's Content-Type is plain `application/json`
    return web.Response(status=status, body=json.dumps(data).encode(), content_type="application/json")


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Every failure leaves as a `Status` object; nothing escapes to crash the server."""
    try:
        return await handler(request)
    except ApiError as e:
        return _json(e.status(), e.code)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _json(ApiError(e.status, e.reason or "request failed").status(), e.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as e:
        log.exception("internal error serving %s %s", request.method, request.path)
        return _json(ApiError(500, f"internal error: {type(e).__name__}: {e}").status(), 500)


def _resource_list(group_version: str, items: list[Resource], hidden: set[str]) -> dict[str, Any]:
    out = []
    for res in items:
        out.append(
            {
                "name": res.plural,
                "singularName": res.singular,
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": list(res.verbs),
                "shortNames": list(res.short_names),
            }
        )
        for sub in res.subresources:
            if f"{res.plural}/{sub}" in hidden:
                continue
            verbs = {"log": ["get"], "eviction": ["create"], "resize": ["get", "patch", "update"]}.get(
                sub, ["get", "patch", "update"]
            )
            kind = {"eviction": "Eviction", "log": "Pod"}.get(sub, res.kind)
            out.append(
                {
                    "name": f"{res.plural}/{sub}",
                    "singularName": "",
                    "namespaced": res.namespaced,
                    "kind": kind,
                    "verbs": verbs,
                }
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def _q_bool(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


def _q_int(request: web.Request, name: str) -> int | None:
    raw = request.query.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ApiError(400, f"invalid value for query parameter {name}: {raw!r}: not an integer") from None


_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)


def _q_time(request: web.Request, name: str) -> datetime | None:
    """An RFC 3339 time query parameter, in UTC; None when absent or before any representable time."""
    raw = request.query.get(name)
    if not raw:
        return None
    try:
        if not _RFC3339.fullmatch(raw):
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


def _dry_run(request: web.Request, options: str, extra: Any = None) -> bool:
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


def _delete_options(opts: Any, grace: int | None) -> tuple[int | None, dict[str, Any], Any]:
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


def _check_preconditions(pre: dict[str, Any], meta: dict[str, Any]) -> None:
    for field in ("uid", "resourceVersion"):
        value = pre.get(field)
        if value is not None and meta.get(field) != value:
            raise ApiError(
                409,
                f"Precondition failed: {field} in precondition: {value}, {field} in object meta: "
                f"{meta.get(field)}",
            )


def _check_resource_version(res: Resource, name: str, old: Obj, new: Obj) -> None:
    """A stale resourceVersion is a 409 Conflict before any validation: `registry/generic/registry/store.go`
    `Update` compares it inside GuaranteedUpdate's try-update function before `rest.BeforeUpdate` (defaulting,
    validation) and admission run, so a stale write that would also be invalid is still a 409."""
    sent = new["metadata"].get("resourceVersion")
    if sent and sent != old["metadata"].get("resourceVersion"):
        raise ApiError(
            409,
            f"Operation cannot be fulfilled on {res.plural}{'.' + res.group if res.group else ''} "
            f'"{name}": the object has been modified; please apply your changes to the latest '
            "version and try again",
            kind=res.plural,
            name=name,
            group=res.group,
        )


def _before_update(old: Obj, new: Obj) -> None:
    """`rest.BeforeUpdate`'s resets, before validation: generation, creationTimestamp and a deletionTimestamp
    already set are the stored ones whatever was sent (so a client that writes times as `+00:00` or drops
    them replaces without a 422), a missing uid or deletionGracePeriodSeconds is the stored one."""
    old_meta, meta = old["metadata"], new["metadata"]
    for key in ("generation", "creationTimestamp", "deletionTimestamp"):
        if key in old_meta:
            meta[key] = old_meta[key]
        elif key == "generation":
            meta.pop(key, None)
    for key in ("uid", "deletionGracePeriodSeconds"):
        if meta.get(key) in (None, "") and old_meta.get(key) is not None:
            meta[key] = old_meta[key]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} is out of range")
    return value


def _clean(value: Any, depth: int = 0) -> Any:
    """Bound the nesting and replace lone UTF-16 surrogates by U+FFFD, as Go's JSON decoder does."""
    if depth > MAX_DEPTH:
        raise ValueError(f"the object is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_clean(k, depth): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, depth + 1) for v in value]
    return value


def parse_json(raw: bytes) -> Any:
    """A request body as the real server decodes JSON: no NaN/Infinity, no out-of-range numbers, bounded
    nesting; anything else is a ValueError."""
    try:
        return _clean(json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float))
    except RecursionError:
        raise ValueError(f"the object is nested more than {MAX_DEPTH} levels deep") from None


async def _read_body(request: web.Request) -> Any:
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


_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)
# kube-openapi's offers for /openapi/v2, in its order; both protobuf spellings answer with the second one
_OPENAPI_V2_MEDIA = (
    "application/json",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)


def _accepts(request: web.Request, offered: tuple[str, ...]) -> str | None:
    """The first offered media type the Accept header allows, clauses in descending q order, as kube-openapi's
    handler negotiates (`goautoneg.ParseAccept`; no Accept header means */*), or None."""
    clauses = []
    for i, raw in enumerate((request.headers.get("Accept") or "*/*").split(",")):
        media, *params = [x.strip() for x in raw.split(";")]
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if media and q > 0:
            clauses.append((-q, i, media))
    for _, _, media in sorted(clauses):
        kind, _, sub = media.partition("/")
        for offer in offered:
            o_kind, _, o_sub = offer.partition("/")
            if kind in ("*", o_kind) and sub in ("*", o_sub):
                return offer
    return None


def _openapi(request: web.Request, rest: list[str]) -> web.Response:
    """`/openapi/v2` and `/openapi/v3[/<group-version>]` (kube-openapi `handler` and `handler3`): generated
    documents (see `openapi.py`); a media type not offered is a 406, as kube-openapi answers it."""
    from . import openapi

    if request.method not in ("GET", "HEAD"):
        raise ApiError(405, f"{request.method} is not allowed on {request.path}")
    if rest == ["v2"]:
        media = _accepts(request, _OPENAPI_V2_MEDIA)
        if media is None:
            raise ApiError(
                406, "the requested media type is not offered for /openapi/v2", reason="NotAcceptable"
            )
        if media == "application/json":
            body, ctype = openapi.v2_document(), media
        else:
            body, ctype = openapi.v2_protobuf(), _OPENAPI_V2_MEDIA[2]
        return web.Response(body=body, content_type=ctype, headers={"Vary": "Accept"})
    if rest == ["v3"]:
        paths = {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={openapi.v3_hash(gv)}"}
            for gv in openapi.v3_paths()
        }
        return _json({"paths": paths})
    if rest[:1] == ["v3"]:
        doc = openapi.v3_document("/".join(rest[1:]))
        if doc is None:
            raise ApiError(404, f"the server could not find the requested resource ({request.path})")
        if _accepts(request, ("application/json",)) is None:
            raise ApiError(406, "only application/json is served for /openapi/v3", reason="NotAcceptable")
        gv = "/".join(rest[1:])
        cache = (
            "public, immutable" if request.query.get("hash") == openapi.v3_hash(gv) else "no-cache, private"
        )
        return web.Response(
            body=doc,
            content_type="application/json",
            headers={"Vary": "Accept", "Cache-Control": cache, "Etag": f'"{openapi.v3_hash(gv)}"'},
        )
    raise ApiError(404, "the server could not find the requested resource")


def _send_initial_events(request: web.Request) -> bool:
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
    if not _q_bool(request, "allowWatchBookmarks"):
        causes.append(
            "allowWatchBookmarks: Required value: sendInitialEvents requires setting allowWatchBookmarks to "
            "true"
        )
    if causes:
        raise ApiError(422, 'ListOptions.meta.k8s.io "" is invalid: ' + ", ".join(causes), reason="Invalid")
    return True


def _escape_warning(text: str) -> str:
    """A warning as a quoted-string header value: quotes, backslashes, control and non-ASCII characters
    escaped (field names are the client's)."""
    return json.dumps(text[:1024])[1:-1]


def _check_fields(request: web.Request, res: Resource, version: str, obj: Obj) -> None:
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
    warnings = _WARNINGS.get()
    if warnings is not None:
        warnings.extend(messages)


def _watch_event(
    request: web.Request, res: Resource, version: str, kind: str, obj: Obj, state: dict[str, bool]
) -> dict[str, Any]:
    """A watch event; its object a one-row Table when the watch asked for Tables (`kubectl get -w`), the
    column definitions only in the first one, as the watch encoder sends them (`NoHeaders` after it); a
    bookmark's Table has only the resourceVersion (and its annotations)."""
    from . import printers

    table_version = printers.wants_table(request.headers.get("Accept"))
    if table_version is None:
        return {"type": kind, "object": obj}
    if kind == "BOOKMARK":
        meta = obj.get("metadata") or {}
        table = {"kind": "Table", "apiVersion": f"meta.k8s.io/{table_version}", "metadata": meta, "rows": []}
        return {"type": kind, "object": table}
    include = request.query.get("includeObject") or "Metadata"
    meta = {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
    table = printers.table(res, version, [obj], table_version, include, meta)
    if state.get("headers_sent"):
        del table["columnDefinitions"]
    state["headers_sent"] = True
    return {"type": kind, "object": table}


def _manager(request: web.Request) -> str:
    return fieldmanager.manager_for(request.query.get("fieldManager"), request.headers.get("User-Agent"))


def _apply_body(raw: bytes, res: Resource, version: str) -> Obj:
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
            body = _clean(yaml.safe_load(raw.decode("utf-8")))
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


def _as_table(
    request: web.Request, res: Resource, version: str, objs: list[Obj], meta: dict[str, Any]
) -> web.Response | None:
    """A `meta.k8s.io` Table when the Accept header asks for one first (`printers.py`), else None: the
    API server's `transformResponseObject` / `asTable` with the resource's table convertor."""
    from . import printers

    table_version = printers.wants_table(request.headers.get("Accept"))
    if table_version is None:
        return None
    include = request.query.get("includeObject") or "Metadata"
    return _json(printers.table(res, version, objs, table_version, include, meta))


class ContainerLog(Protocol):
    """One container instance's log, as a node serves it."""

    def read(self, **kw: Any) -> bytes: ...

    def follow(self, **kw: Any) -> AsyncIterator[bytes]: ...


class NodeClient(Protocol):
    """What the API server asks of the node a pod runs on, as kube-apiserver asks a kubelet through its client
    (`pkg/kubelet/client`): a container's log, and the pod's metrics (metrics-server's scrape)."""

    def log_source(self, pod: Obj, container: str | None, previous: bool) -> ContainerLog: ...

    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None: ...


class ApiServer:
    """Routes Kubernetes REST paths to the store, the admission chain, the nodes and the metrics."""

    def __init__(
        self,
        store: Store,
        admission: Admission,
        policies: PolicyAdmission,
        nodes: NodeClient,
        events: EventRecorder,
        filters: Filters,
        *,
        kubernetes_version: str,
        resize_enabled: bool,
        bookmark_interval: float,
        request_timeout: float,
        max_requests_in_flight: int,
    ) -> None:
        self.store = store
        self.registry = Registry(store, admission, events)
        self.policies = policies
        self.nodes = nodes
        self.filters = filters
        self.kubernetes_version = kubernetes_version
        self.resize_enabled = resize_enabled
        self.bookmark_interval = bookmark_interval
        self.app = web.Application(
            middlewares=[
                _errors,
                limits.request_limits(request_timeout, max_requests_in_flight),
            ],
            client_max_size=MAX_BODY + 1024,
            # as the real server's request contexts: a request whose client hung up is cancelled, so
            # abandoned watches and log follows end at once instead of running on to their timeouts
            handler_args={"max_line_size": MAX_URL, "max_field_size": MAX_URL, "handler_cancellation": True},
        )
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)
        self.requests = 0

    # -- routing -------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.filters.count_request(request)
        code = 500
        warnings: list[str] = []
        _WARNINGS.set(warnings)  # each request runs in its own task, with its own context
        try:
            response = await self.route(request)
            code = response.status
            for warning in warnings:  # unprepared responses only (not watches or logs)
                response.headers.add("Warning", f'299 - "{_escape_warning(warning)}"')
            return response
        except ApiError as e:
            code = e.code
            raise
        finally:
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                self.filters.audit.append((request.method, request.path, code))

    async def route(self, request: web.Request) -> web.StreamResponse:
        await self.filters.authorize(request)
        await self.filters.inject_fault(request)
        parts = [p for p in request.path.split("/") if p]
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        if parts[:1] == ["openapi"]:
            return _openapi(request, parts[1:])
        if parts == ["version"]:
            self._discovery_method(request)
            return _json(version_info(self.kubernetes_version))
        if parts == ["api"]:
            self._discovery_method(request)
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            self._discovery_method(request)
            return _json(self._group_list())
        if parts[:1] == ["api"] and len(parts) >= 2:
            if parts[1] != "v1":
                raise ApiError(404, f"the server could not find the requested resource (version {parts[1]})")
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            group = parts[1]
            if group not in R.groups():
                raise ApiError(404, f"the server could not find the requested resource (group {group})")
            if len(parts) == 2:
                self._discovery_method(request)
                return _json(self._group(group))
            version, rest = parts[2], parts[3:]
            if version not in R.groups()[group]:
                raise ApiError(404, f"the server could not find the requested resource ({group}/{version})")
        else:
            raise ApiError(404, "the server could not find the requested resource")
        if not rest:
            self._discovery_method(request)
            gv = f"{group}/{version}" if group else version
            served = [r for r in (*R.STORED, R.POD_METRICS) if r.group == group and version in r.versions]
            return _json(_resource_list(gv, served, self.hidden_subresources()))
        watch_prefix = rest[0] == "watch"
        if watch_prefix:
            rest = rest[1:]
        namespace: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource")
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        if group == "metrics.k8s.io":
            return self._metrics(request, namespace, plural, name)
        res = R.find(group, version, plural)
        if res is None:
            raise ApiError(404, f"the server could not find the requested resource ({plural})")
        if res.namespaced and name is not None and namespace is None:
            raise ApiError(404, f"the server could not find the requested resource ({plural} is namespaced)")
        if not res.namespaced and namespace is not None:
            raise ApiError(
                404, f"the server could not find the requested resource ({plural} is cluster-scoped)"
            )
        if sub is not None and (
            sub not in res.subresources or f"{plural}/{sub}" in self.hidden_subresources()
        ):
            raise ApiError(404, f"the server could not find the requested resource ({plural}/{sub})")
        ns = namespace or ""
        method = request.method
        if watch_prefix and method != "GET":
            raise ApiError(405, f"{method} is not allowed on a watch")
        if name is not None and (name in (".", "..") or "%" in name):
            raise ApiError(400, f"Name parameter invalid: \"{name}\": may not be '.' or '..' nor contain '%'")
        if name is None:
            if method == "GET":
                if watch_prefix or _q_bool(request, "watch"):
                    return await self._watch(request, res, version, namespace)
                return self._list(request, res, version, namespace)
            if (method == "POST" and namespace is not None) or (method == "POST" and not res.namespaced):
                return await self._create(request, res, version, ns)
            if method == "DELETE":
                return await self._delete_collection(request, res, version, namespace)
            raise ApiError(405, f"{method} is not allowed on the collection {plural}")
        if watch_prefix:
            request_fields = f"metadata.name={name}"
            return await self._watch(request, res, version, namespace, extra_fields=request_fields)
        if sub == "log":
            if method != "GET":
                raise ApiError(405, f"{method} is not allowed on pods/log")
            return await self._log(request, ns, name)
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, f"{method} is not allowed on pods/eviction")
            return await self._evict(request, ns, name)
        if method == "GET":
            obj = self._out(self.store.get(res, ns, name), res, version)
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            return (_as_table(request, res, version, [obj], meta) if sub is None else None) or _json(obj)
        if method == "PUT":
            return await self._replace(request, res, version, ns, name, sub)
        if method == "PATCH":
            return await self._patch(request, res, version, ns, name, sub)
        if method == "DELETE" and sub is None:
            return await self._delete(request, res, version, ns, name)
        raise ApiError(405, f"{method} is not allowed on {plural}{'/' + sub if sub else ''}")

    def hidden_subresources(self) -> set[str]:
        """Subresources not served: `pods/resize` without in-place resize (the InPlacePodVerticalScaling gate
        off, or before 1.33 where it is off by default: the apiserver registers no resize storage)."""
        return set() if self.resize_enabled else {"pods/resize"}

    @staticmethod
    def _discovery_method(request: web.Request) -> None:
        if request.method not in ("GET", "HEAD"):
            raise ApiError(405, f"{request.method} is not allowed on {request.path}")

    def _group(self, group: str) -> dict[str, Any]:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in R.groups()[group]]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def _group_list(self) -> dict[str, Any]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group(g) for g in R.groups()]}

    @staticmethod
    def _out(obj: Obj, res: Resource, version: str) -> Obj:
        obj["apiVersion"] = res.api_version(version)
        obj["kind"] = res.kind
        return obj

    # -- collection verbs ----------------------------------------------------------------------------
    def _selectors(
        self, request: web.Request, res: Resource, extra_fields: str = ""
    ) -> tuple[LabelSelector, FieldSelector]:
        labels = LabelSelector.parse(request.query.get("labelSelector"))
        text = ",".join(x for x in (request.query.get("fieldSelector", ""), extra_fields) if x)
        return labels, FieldSelector.parse(text or None, set(res.field_selectors))

    def _list(self, request: web.Request, res: Resource, version: str, namespace: str | None) -> web.Response:
        labels, fields = self._selectors(request, res)
        items, meta = paging.page(
            [self._out(o, res, version) for o in self.store.list(res, namespace, labels, fields)],
            limit=_q_int(request, "limit"),
            token=request.query.get("continue"),
            resource_version=request.query.get("resourceVersion"),
            current_rv=self.store.resource_version,
            compacted_rv=self.store.compacted(res),
            across_namespaces=res.namespaced and namespace is None,
        )
        table = _as_table(request, res, version, items, meta)
        if table is not None:
            return table
        return _json(
            {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version(version),
                "metadata": meta,
                "items": items,
            }
        )

    async def _watch(
        self, request: web.Request, res: Resource, version: str, namespace: str | None, extra_fields: str = ""
    ) -> web.StreamResponse:
        labels, fields = self._selectors(request, res, extra_fields)
        timeout = _q_int(request, "timeoutSeconds")
        bookmarks = _q_bool(request, "allowWatchBookmarks")
        initial_events = _send_initial_events(request)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            since = None if initial_events else request.query.get("resourceVersion")
            watch = self.store.watch(res, namespace, since, labels, fields)
        except ApiError as e:  # the real server answers 200 and sends the error as a watch event
            await resp.write(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            return resp
        state: dict[str, bool] = {}  # whether Table column definitions went out already
        if initial_events:
            await self._initial_events(request, resp, res, version, watch, state)
        deadline = asyncio.get_running_loop().time() + limits.watch_timeout(timeout)
        interval = self.bookmark_interval
        try:
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watch.queue.get(), timeout=min(remaining, interval))
                except TimeoutError:
                    if bookmarks:
                        mark = {
                            "kind": res.kind,
                            "apiVersion": res.api_version(version),
                            "metadata": {"resourceVersion": str(self.store.resource_version)},
                        }
                        event = _watch_event(request, res, version, "BOOKMARK", mark, state)
                        await limits.write_before(resp, json.dumps(event).encode() + b"\n", deadline)
                    continue
                if item is None:
                    break
                kind, obj = item
                event = _watch_event(
                    request, res, version, kind, self._out(deep_copy(obj), res, version), state
                )
                await limits.write_before(resp, json.dumps(event).encode() + b"\n", deadline)
        except (ConnectionResetError, asyncio.CancelledError, limits.WriteStalled):
            pass
        finally:
            self.store.unwatch(watch)
        return resp

    async def _initial_events(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        res: Resource,
        version: str,
        watch: Any,
        state: dict[str, bool],
    ) -> None:
        """A watch-list stream's start (KEP-3157, the cacher's `sendInitialEvents`): an ADDED event per object
        that exists, then a BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the resourceVersion of
        that state; changes follow. (The store queued exactly the existing objects when the watch opened.)"""
        for _ in range(watch.queue.qsize()):
            kind, obj = watch.queue.get_nowait()
            event = _watch_event(request, res, version, kind, self._out(deep_copy(obj), res, version), state)
            await resp.write(json.dumps(event).encode() + b"\n")
        mark = {
            "kind": res.kind,
            "apiVersion": res.api_version(version),
            "metadata": {
                "resourceVersion": str(watch.last_rv),
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        }
        event = _watch_event(request, res, version, "BOOKMARK", mark, state)
        await resp.write(json.dumps(event).encode() + b"\n")

    async def _create(
        self, request: web.Request, res: Resource, version: str, namespace: str
    ) -> web.Response:
        return self._create_object(request, res, version, namespace, await _read_body(request))

    def _create_object(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        namespace: str,
        body: Any,
        applied: bool = False,
    ) -> web.Response:
        obj = self._check_body(body, res, version)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if not applied:
            _check_fields(request, res, version, obj)
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
            self._require_namespace(namespace)
        if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        for server_owned in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            meta.pop(server_owned, None)
        dry_run = _dry_run(request, "CreateOptions")
        self.registry[res].validate_create(obj)
        if not applied:
            fieldmanager.update(res, version, None, obj, _manager(request))
        self._admit_policies(request, "CREATE", res, version, "", obj, None, dry_run)
        if dry_run:  # checked as a real create is, but not stored
            name = meta.get("name") if isinstance(meta.get("name"), str) else ""
            if self.store.peek(res, namespace, name) is not None:
                raise ApiError(
                    409,
                    f'{res.plural}{"." + res.group if res.group else ""} "{name}" already exists',
                    reason="AlreadyExists",
                    kind=res.plural,
                    name=name,
                    group=res.group,
                )
            return _json(self._out(obj, res, version), 201)
        limits.check_object_size(obj)
        created = self.store.create(res, obj)
        return _json(self._out(created, res, version), 201)

    def _require_namespace(self, namespace: str) -> None:
        ns = self.store.peek(R.NAMESPACES, "", namespace)
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found', kind="namespaces", name=namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f"unable to create new content in namespace {namespace} because it is being terminated",
                reason="Forbidden",
            )

    @staticmethod
    def _check_body(body: Any, res: Resource, version: str) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, f"the body of the request must be a JSON object (a {res.kind})")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind not in (None, res.kind) or api_version not in (None, res.api_version(version)):
            raise ApiError(
                400,
                f"the API version in the data ({api_version}) and kind ({kind}) do not match the expected "
                f"{res.api_version(version)} {res.kind}",
            )
        return body

    async def _delete_collection(
        self, request: web.Request, res: Resource, version: str, namespace: str | None
    ) -> web.Response:
        labels, fields = self._selectors(request, res)
        grace, pre, dry_run = await self._read_delete_options(request)
        chosen = self.store.list(res, namespace, labels, fields)
        for obj in chosen:  # all or nothing: every precondition holds before anything is deleted
            _check_preconditions(pre, obj["metadata"])
        for obj in chosen:
            self._admit_policies(request, "DELETE", res, version, "", None, obj, bool(dry_run))
        gone = []
        for obj in chosen:
            meta = obj["metadata"]
            if not dry_run:
                obj = self.registry[res].delete(meta.get("namespace", ""), meta["name"], grace)
            gone.append(self._out(obj, res, version))
        return _json(
            {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version(version),
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": gone,
            }
        )

    # -- item verbs ----------------------------------------------------------------------------------
    async def _replace(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        body = self._check_body(await _read_body(request), res, version)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("name") not in (None, name):
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        if res.namespaced and meta.get("namespace") not in (None, "", ns):
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        return self._write(request, res, version, ns, name, sub, lambda old: body)

    async def _patch(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        kind = _PATCH_TYPES.get(ctype)
        if kind == "apply":
            return await self._apply(request, res, version, ns, name, sub)
        if request.query.get("force") is not None:
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: '
                "may not be specified for non-apply patch",
                reason="Invalid",
            )
        if kind is None:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(_PATCH_TYPES)}",
                reason="UnsupportedMediaType",
            )
        body = await _read_body(request)

        def apply(old: Obj) -> Obj:
            if kind == "json":
                return json_patch(old, body)
            if not isinstance(body, dict):
                raise ApiError(400, "a merge patch must be a JSON object")
            if kind == "merge":
                return json_merge_patch(old, body)
            return strategic_merge_patch(old, body)

        return self._write(request, res, version, ns, name, sub, apply)

    async def _apply(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        """Server-side apply (`application/apply-patch+yaml`): creates the object or merges the config into
        it, with the field manager's ownership and conflicts (`fieldmanager.py`)."""
        manager = request.query.get("fieldManager")
        if not manager:
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
                reason="Invalid",
            )
        if sub is not None:
            raise ApiError(
                415,
                f"apply is served for {res.plural} only, not {res.plural}/{sub}",
                reason="UnsupportedMediaType",
            )
        force = _q_bool(request, "force")
        config = _apply_body(await request.read(), res, version)
        _check_fields(request, res, version, config)
        meta = config["metadata"]
        if meta.get("name") not in (None, name) or (
            res.namespaced and meta.get("namespace") not in (None, "", ns)
        ):
            raise ApiError(
                400, f"the name or namespace of the applied object does not match the URL ({ns}/{name})"
            )
        meta["name"] = name
        if self.store.peek(res, ns, name) is None:
            created = fieldmanager.apply(res, version, None, config, manager, force)
            return self._create_object(request, res, version, ns, created, applied=True)
        return self._write(
            request,
            res,
            version,
            ns,
            name,
            sub,
            lambda old: fieldmanager.apply(res, version, old, config, manager, force),
            track=False,
        )

    def _write(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        ns: str,
        name: str,
        sub: str | None,
        change: Callable[[Obj], Any],
        track: bool = True,
    ) -> web.Response:
        dry_run = _dry_run(request, "UpdateOptions" if request.method == "PUT" else "PatchOptions")
        old = self.store.get(res, ns, name)
        new = change(deep_copy(old))
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise ApiError(400, f"the result is not a valid {res.kind} object")
        new["metadata"]["name"], new["apiVersion"], new["kind"] = name, old["apiVersion"], old["kind"]
        if res.namespaced:
            new["metadata"]["namespace"] = ns
        _check_resource_version(res, name, old, new)
        _before_update(old, new)
        strategy = self.registry[res]
        if sub is not None:
            new = strategy.update_subresource(sub, old, new)
        else:
            if track:
                _check_fields(request, res, version, new)
            strategy.prepare_for_update(old, new)
            strategy.validate_update(old, new)
            if track:
                fieldmanager.update(res, version, old, new, _manager(request))
        self._admit_policies(request, "UPDATE", res, version, sub or "", new, old, dry_run)
        if dry_run:  # checked as a real update is, but not stored
            new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            return _json(self._out(new, res, version))
        limits.check_object_size(new)
        stored = self.store.update(res, new)
        return _json(self._out(stored, res, version))

    def _admit_policies(
        self,
        request: web.Request,
        operation: str,
        res: Resource,
        version: str,
        sub: str,
        obj: Obj | None,
        old: Obj | None,
        dry_run: bool,
        name: str | None = None,
    ) -> None:
        """ValidatingAdmissionPolicies, after the built-in admission (`admission_policy`)."""
        meta = (obj or old or {}).get("metadata") or {}
        self.policies.admit(
            Attributes(
                operation=operation,
                resource=res,
                version=version,
                subresource=sub,
                namespace=str(meta.get("namespace") or "") if res.namespaced else "",
                name=name if name is not None else str(meta.get("name") or ""),
                obj=obj,
                old=old,
                user=USER_INFO.get() or ADMIN_USER,
                dry_run=dry_run,
                warnings=_WARNINGS.get(),
            )
        )

    async def _delete(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str
    ) -> web.Response:
        grace, pre, dry_run = await self._read_delete_options(request)
        current = self.store.get(res, ns, name)
        _check_preconditions(pre, current["metadata"])
        self._admit_policies(request, "DELETE", res, version, "", None, current, dry_run)
        if dry_run:
            return _json(self._out(current, res, version))
        return _json(self._out(self.registry[res].delete(ns, name, grace), res, version))

    @staticmethod
    async def _read_delete_options(request: web.Request) -> tuple[int | None, dict[str, Any], bool]:
        """The query's and the body's DeleteOptions: (grace period, preconditions, dry run)."""
        grace = _q_int(request, "gracePeriodSeconds")
        raw = await request.read()
        opts = None
        if raw:
            try:
                opts = parse_json(raw)
            except ValueError as e:
                raise ApiError(400, f"invalid DeleteOptions: {e}") from None
        grace, pre, dry = _delete_options(opts, grace)
        return grace, pre, _dry_run(request, "DeleteOptions", dry)

    async def _evict(self, request: web.Request, ns: str, name: str) -> web.Response:
        body = await _read_body(request)
        if (
            not isinstance(body, dict)
            or body.get("kind") not in (None, "Eviction")
            or body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1")
        ):
            raise ApiError(400, "the body must be a policy/v1 Eviction")
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ApiError(400, "Eviction.metadata must be an object")
        if (meta or {}).get("name") not in (None, "", name):
            raise ApiError(400, "name in URL does not match name in Eviction object")
        grace, pre, dry = _delete_options(body.get("deleteOptions"), None)
        dry_run = _dry_run(request, "DeleteOptions", dry)
        pod = self.store.get(R.PODS, ns, name)
        _check_preconditions(pre, pod["metadata"])
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", **body}
        eviction["metadata"] = {**(meta or {}), "name": name, "namespace": ns}
        self._admit_policies(request, "CREATE", R.PODS, "v1", "eviction", eviction, None, dry_run, name=name)
        if dry_run:
            return _json(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        self.registry.pods.evict(ns, name, grace)
        return _json(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
        )

    # -- logs and metrics ----------------------------------------------------------------------------
    async def _log(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        pod = self.store.get(R.PODS, ns, name)
        since_time = _q_time(request, "sinceTime")
        since_seconds = _q_int(request, "sinceSeconds")
        if since_seconds is not None:
            if since_time is not None:
                raise ApiError(
                    422, "at most one of `sinceTime` or `sinceSeconds` may be specified", reason="Invalid"
                )
            if since_seconds <= 0:
                raise ApiError(422, "sinceSeconds: Invalid value: must be greater than 0", reason="Invalid")
            try:
                since_time = datetime.now(UTC) - timedelta(seconds=since_seconds)
            except OverflowError:
                since_time = None  # further back than any log line
        tail, limit = _q_int(request, "tailLines"), _q_int(request, "limitBytes")
        if (tail is not None and tail < 0) or (limit is not None and limit <= 0):
            raise ApiError(422, "tailLines must be >= 0 and limitBytes > 0", reason="Invalid")
        source = self.nodes.log_source(pod, request.query.get("container"), _q_bool(request, "previous"))
        timestamps = _q_bool(request, "timestamps")
        if not _q_bool(request, "follow"):
            data = source.read(
                since_time=since_time, timestamps=timestamps, tail_lines=tail, limit_bytes=limit
            )
            return web.Response(body=data, content_type="text/plain")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        sent = 0
        try:
            async for chunk in source.follow(since_time=since_time, timestamps=timestamps, tail_lines=tail):
                if limit is not None and sent + len(chunk) > limit:
                    await resp.write(chunk[: limit - sent])
                    break
                await resp.write(chunk)
                sent += len(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp

    def _metrics(
        self, request: web.Request, namespace: str | None, plural: str, name: str | None
    ) -> web.Response:
        if plural != "pods" or request.method != "GET":
            raise ApiError(404, f"the server could not find the requested resource ({plural})")
        if name is not None:
            metrics = self.nodes.pod_metrics(self.store.get(R.PODS, namespace or "", name))
            if metrics is None:
                raise ApiError(404, f'podmetrics.metrics.k8s.io "{name}" not found')
            return _json(metrics)
        labels = LabelSelector.parse(request.query.get("labelSelector"))
        pods = self.store.list(R.PODS, namespace, labels)
        items = [m for p in pods if (m := self.nodes.pod_metrics(p)) is not None]
        return _json(
            {"kind": "PodMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": items}
        )
