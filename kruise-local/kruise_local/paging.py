"""List paging (`limit` / `continue`) with the real server's continue tokens.

A token is what `storage/continue.go` `EncodeContinue` makes: base64url (unpadded) of
`{"v": "meta.k8s.io/v1", "rv": <resourceVersion>, "start": <key after the last item sent>}`, where keys are
`<name>` within a namespace and `<namespace>/<name>` across namespaces. `DecodeContinue` refuses anything
else with a 400 (`invalid continue token: continue key is not valid...`, as `storage/etcd3/store.go`
`GetList` wraps it); a token whose resourceVersion etcd has compacted away is a 410 Expired. The local store
keeps no snapshots: a page lists the objects as they are now, from the token's key on.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
from typing import Any

from .errors import ApiError
from .store import Obj

TOKEN_VERSION = "meta.k8s.io/v1"
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


def _invalid(detail: str = "") -> ApiError:
    return ApiError(400, f"invalid continue token: continue key is not valid{detail}")


def encode_continue(start: str, resource_version: int) -> str:
    raw = json.dumps({"v": TOKEN_VERSION, "rv": resource_version, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[str, int]:
    """The (start key, resourceVersion) of a continue token; 400 when it is not one the server made."""
    try:
        data = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        if base64.urlsafe_b64encode(data).decode().rstrip("=") != token:  # RawURLEncoding is strict
            raise ValueError("illegal base64 data")
        parsed: Any = json.loads(data)
    except (ValueError, binascii.Error) as e:
        raise _invalid(f": {e}") from None
    if not isinstance(parsed, dict):
        raise _invalid(": not a JSON object")
    version, rv, start = parsed.get("v"), parsed.get("rv"), parsed.get("start")
    if version != TOKEN_VERSION:
        raise _invalid(f": server does not recognize this encoded version {version}")
    if not isinstance(rv, int) or isinstance(rv, bool) or rv <= 0:
        raise _invalid(": incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise _invalid(": encoded start key empty (version meta.k8s.io/v1)")
    if start != "/" and (posixpath.normpath(start) != start or start == ".." or start.startswith("../")):
        raise _invalid(f": {start}")
    return start, rv


def _key(obj: Obj, across_namespaces: bool) -> str:
    meta = obj["metadata"]
    if across_namespaces and meta.get("namespace"):
        return f"{meta['namespace']}/{meta['name']}"
    return str(meta["name"])


def page(
    items: list[Obj],
    *,
    limit: int | None,
    token: str | None,
    resource_version: str | None,
    current_rv: int,
    compacted_rv: int,
    across_namespaces: bool,
) -> tuple[list[Obj], dict[str, Any]]:
    """One page of `items` (sorted by key) and the list metadata to send with it."""
    meta: dict[str, Any] = {"resourceVersion": str(current_rv)}
    rv = current_rv
    if token:
        if resource_version not in (None, "", "0"):
            raise ApiError(400, "specifying resource version is not allowed when using continue")
        start, rv = decode_continue(token)
        if rv < compacted_rv:
            raise ApiError(410, EXPIRED_MESSAGE, reason="Expired")
        items = [o for o in items if _key(o, across_namespaces) >= start]
    if limit and limit > 0 and len(items) > limit:
        last = _key(items[limit - 1], across_namespaces)
        meta["continue"] = encode_continue(last + "\x00", rv)
        meta["remainingItemCount"] = len(items) - limit
        items = items[:limit]
    return items, meta
