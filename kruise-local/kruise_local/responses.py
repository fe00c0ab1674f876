"""What the API server answers (`k8s.io/apiserver/pkg/endpoints`: `handlers/responsewriters` JSON and
`Status` errors, `handlers/negotiation` content negotiation, `discovery` resource lists, `/version`, the
OpenAPI documents, watch events and server-side Table output)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .errors import ApiError, not_served
from .features import Features
from .resources import Resource
from .store import Obj

log = logging.getLogger(__name__)


def version_info(features: Features) -> dict[str, str]:
    """The `/version` answer for the cluster's Kubernetes version."""
    return {
        "major": "1",
        "minor": str(features.minor),
        "gitVersion": features.git_version,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (Python)",
        "compiler": "cpython",
        "platform": "linux/amd64",
    }


async def start_stream(resp: web.StreamResponse, request: web.Request) -> bool:
    """Send a streamed response's status and headers (a watch, a log follow, an exec's upgrade); False when
    the client has gone already. The request then just ends, as kube-apiserver's handler returns once the
    request's context is done; an exception out of the handler would be aiohttp's "Error handling request"."""
    try:
        await resp.prepare(request)
    except ConnectionResetError:
        return False
    return True


def json_response(data: Any, status: int = 200) -> web.Response:
    # bytes, so aiohttp adds no `; charset=utf-8`: the real server's Content-Type is plain `application/json`
    return web.Response(status=status, body=json.dumps(data).encode(), content_type="application/json")


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
):
    """Every failure leaves as a `Status` object; nothing escapes to crash the server."""
    try:
        return await handler(request)
    except ApiError as e:
        return json_response(e.status(), e.code)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_response(ApiError(e.status, e.reason or "request failed").status(), e.status)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as e:
        log.exception("internal error serving %s %s", request.method, request.path)
        return json_response(ApiError(500, f"internal error: {type(e).__name__}: {e}").status(), 500)


def resource_list(group_version: str, items: list[Resource], hidden: set[str]) -> dict[str, Any]:
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
                **({"categories": list(res.categories)} if res.categories else {}),
            }
        )
        for sub in res.subresources:
            if f"{res.plural}/{sub}" in hidden:
                continue
            verbs = {
                "log": ["get"],
                "eviction": ["create"],
                "exec": ["create", "get"],
                "attach": ["create", "get"],
                "resize": ["get", "patch", "update"],
                "token": ["create"],
            }.get(sub, ["get", "patch", "update"])
            kind = {
                "eviction": "Eviction",
                "log": "Pod",
                "exec": "PodExecOptions",
                "attach": "PodAttachOptions",
                "token": "TokenRequest",
            }.get(sub, res.kind)
            entry = {
                "name": f"{res.plural}/{sub}",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
            if sub == "token":  # a kind of another group (`APIResource.Group`/`Version`)
                entry = {**entry, "group": "authentication.k8s.io", "version": "v1"}
            out.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


# kube-openapi's offers for /openapi/v2, in its order; both protobuf spellings answer with the second one
OPENAPI_V2_MEDIA = (
    "application/json",
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
)


def accepts(request: web.Request, offered: tuple[str, ...]) -> str | None:
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


def serve_openapi(request: web.Request, rest: list[str], features: Features) -> web.Response:
    """`/openapi/v2` and `/openapi/v3[/<group-version>]` (kube-openapi `handler` and `handler3`): generated
    documents (see `openapi.py`) of what `features` serves, whose `info.version` is the server's `/version`
    gitVersion; a media type not offered is a 406, as kube-openapi answers it."""
    from . import openapi

    if request.method not in ("GET", "HEAD"):
        raise ApiError(405, f"{request.method} is not allowed on {request.path}")
    if rest == ["v2"]:
        media = accepts(request, OPENAPI_V2_MEDIA)
        if media is None:
            raise ApiError(
                406, "the requested media type is not offered for /openapi/v2", reason="NotAcceptable"
            )
        if media == "application/json":
            body, ctype = openapi.v2_document(features), media
        else:
            body, ctype = openapi.v2_protobuf(features), OPENAPI_V2_MEDIA[2]
        return web.Response(body=body, content_type=ctype, headers={"Vary": "Accept"})
    if rest == ["v3"]:
        paths = {
            gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={openapi.v3_hash(gv, features)}"}
            for gv in openapi.v3_paths()
        }
        return json_response({"paths": paths})
    if rest[:1] == ["v3"]:
        doc = openapi.v3_document("/".join(rest[1:]), features)
        if doc is None:
            raise not_served()
        if accepts(request, ("application/json",)) is None:
            raise ApiError(406, "only application/json is served for /openapi/v3", reason="NotAcceptable")
        digest = openapi.v3_hash("/".join(rest[1:]), features)
        cache = "public, immutable" if request.query.get("hash") == digest else "no-cache, private"
        return web.Response(
            body=doc,
            content_type="application/json",
            headers={"Vary": "Accept", "Cache-Control": cache, "Etag": f'"{digest}"'},
        )
    raise not_served()


def escape_warning(text: str) -> str:
    """A warning as a quoted-string header value: quotes, backslashes, control and non-ASCII characters
    escaped (field names are the client's)."""
    return json.dumps(text[:1024])[1:-1]


def watch_event(
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


def as_table(
    request: web.Request, res: Resource, version: str, objs: list[Obj], meta: dict[str, Any]
) -> web.Response | None:
    """A `meta.k8s.io` Table when the Accept header asks for one first (`printers.py`), else None: the
    API server's `transformResponseObject` / `asTable` with the resource's table convertor."""
    from . import printers

    table_version = printers.wants_table(request.headers.get("Accept"))
    if table_version is None:
        return None
    include = request.query.get("includeObject") or "Metadata"
    return json_response(printers.table(res, version, objs, table_version, include, meta))


def partial_metadata(request: web.Request) -> str | None:
    """The `meta.k8s.io` kind the Accept header asks the object or list to be transformed into
    (`PartialObjectMetadata` / `PartialObjectMetadataList`, what the metadata client and the controllers'
    informers send), or None: the first clause this server can encode decides, as `negotiation`'s
    `NegotiateOutputMediaType` picks for `targetEncodingForTransform` (`handlers/response.go`). A protobuf
    clause is passed over (JSON only here); a Table clause is `as_table`'s."""
    for clause in (request.headers.get("Accept") or "").split(","):
        media, *params = [p.strip() for p in clause.split(";")]
        args = dict(p.split("=", 1) for p in params if "=" in p)
        if media not in ("application/json", "*/*", "application/*"):
            continue
        kind = args.get("as")
        if kind is None or kind == "Table":
            return None
        if (
            kind in ("PartialObjectMetadata", "PartialObjectMetadataList")
            and args.get("g") == "meta.k8s.io"
            and args.get("v") in ("v1", "v1beta1")
        ):
            return f"{kind}/{args['v']}"
    return None


def as_partial(obj: Obj, target: str, *, is_list: bool) -> Obj:
    """`asPartialObjectMetadata` / `asPartialObjectMetadataList` (`handlers/response.go`): the
    object's (or each item's) metadata only; a single object asked as a list or a list asked as one object
    is a 406."""
    kind, version = target.split("/")
    if is_list != kind.endswith("List"):
        what = "a list" if is_list else "not a list"
        raise ApiError(
            406,
            f"you requested {kind}, but the requested object is {what} ({obj.get('kind')})",
            reason="NotAcceptable",
        )
    api_version = f"meta.k8s.io/{version}"

    def one(item: Obj) -> Obj:
        return {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": item.get("metadata")}

    if not is_list:
        return one(obj)
    items = [one(item) for item in obj.get("items") or []]
    return {"kind": kind, "apiVersion": api_version, "metadata": obj.get("metadata"), "items": items}
