"""Serving watches as kube-apiserver's cacher does (`apiserver/pkg/storage/cacher`, `handlers/watch.go`).

What bounds a watch's memory, as upstream bounds it:

- an event is serialized once for all the watchers that receive it in the same form (`cachingObject`,
  `caching_object.go`: the object caches its encoding per encoder), kept in the store's `Shared` for as long
  as a watch still has the event to send;
- a watcher's queue holds references to shared events; one that falls `WATCH_CHANNEL_SIZE` events behind is
  closed (`cache_watcher.go`: a watcher whose channel stays full is terminated) and its client re-watches from
  the last resourceVersion it saw;
- the bytes on the way to a client that does not read are bounded per connection: `limits.write_streamed`
  writes in slices and waits for the socket to drain (Go's HTTP server blocks the watch's goroutine in `Write`
  the same way), so a stalled client holds at most about `WATCH_WRITE_BUFFER` bytes of its own.

A watch ends after `timeoutSeconds` (a negative one ends it at once, as `ListResource`'s timer does), or after
a random 30 to 60 minutes without it (`limits.watch_timeout`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from . import limits, printers
from .decoding import query_bool, query_int, send_initial_events
from .errors import ApiError
from .resources import Resource
from .responses import as_partial, partial_metadata, start_stream, watch_event
from .selectors import FieldSelector, LabelSelector
from .store import Obj, Shared, Store, Watch


def _typed(obj: Obj, res: Resource, version: str) -> Obj:
    """The object as served at `version` (a shallow copy: the stored object is shared, never changed)."""
    return {**obj, "apiVersion": res.api_version(version), "kind": res.kind}


class WatchServer:
    """The watch endpoint of the API server over the store's watches."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.encoded = 0
        """how many events were serialized for watches (once per object version and form)"""

    async def serve(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        bookmark_interval: float,
    ) -> web.StreamResponse:
        timeout = query_int(request, "timeoutSeconds")
        bookmarks = query_bool(request, "allowWatchBookmarks")
        initial_events = send_initial_events(request)
        form = partial_metadata(request)
        if form is not None and form.startswith("PartialObjectMetadataList"):
            as_partial({}, form, is_list=False)  # the 406 a list form of a watch's objects gets
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        if not await start_stream(resp, request):
            return resp
        if request.transport is not None:
            request.transport.set_write_buffer_limits(high=limits.WATCH_WRITE_BUFFER)
        try:
            since = None if initial_events else request.query.get("resourceVersion")
            watch = self.store.watch(res, namespace, since, labels, fields)
        except ApiError as e:  # the real server answers 200 and sends the error as a watch event
            await resp.write(json.dumps({"type": "ERROR", "object": e.status()}).encode() + b"\n")
            return resp
        state: dict[str, bool] = {}  # whether Table column definitions went out already
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limits.watch_timeout(timeout)
        try:
            if initial_events:
                await self._initial_events(request, resp, res, version, watch, state, form, deadline)
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(
                        watch.queue.get(), timeout=min(remaining, bookmark_interval)
                    )
                except TimeoutError:
                    if bookmarks:
                        mark = self._bookmark(res, version, str(self.store.resource_version))
                        line = self._line(request, res, version, "BOOKMARK", mark, state, form)
                        await limits.write_streamed(resp, request, line, deadline)
                    continue
                if item is None:
                    break
                kind, obj, shared = item
                data = self._encode(request, res, version, kind, obj, shared, state, form)
                await limits.write_streamed(resp, request, data, deadline)
        except (ConnectionResetError, asyncio.CancelledError, limits.WriteStalled):
            pass
        finally:
            self.store.unwatch(watch)
        return resp

    def _encode(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        kind: str,
        obj: Obj,
        shared: Shared,
        state: dict[str, bool],
        form: str | None,
    ) -> bytes:
        """One event's line. Tables are per watcher (column definitions in the first event only); the JSON
        and metadata-only forms are encoded once per object version and shared."""
        typed = _typed(obj, res, version)
        if printers.wants_table(request.headers.get("Accept")) is not None:
            return self._line(request, res, version, kind, typed, state, form)
        key = (kind, version, form or "")
        data = shared.encodings.get(key)
        if data is None:
            data = shared.encodings[key] = self._line(request, res, version, kind, typed, state, form)
            self.encoded += 1
        return data

    @staticmethod
    def _line(
        request: web.Request,
        res: Resource,
        version: str,
        kind: str,
        obj: Obj,
        state: dict[str, bool],
        form: str | None,
    ) -> bytes:
        if form is not None:
            return json.dumps({"type": kind, "object": as_partial(obj, form, is_list=False)}).encode() + b"\n"
        return json.dumps(watch_event(request, res, version, kind, obj, state)).encode() + b"\n"

    @staticmethod
    def _bookmark(res: Resource, version: str, rv: str, annotations: dict[str, str] | None = None) -> Obj:
        meta: dict[str, Any] = {"resourceVersion": rv}
        if annotations:
            meta["annotations"] = annotations
        return {"kind": res.kind, "apiVersion": res.api_version(version), "metadata": meta}

    async def _initial_events(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        res: Resource,
        version: str,
        watch: Watch,
        state: dict[str, bool],
        form: str | None,
        deadline: float,
    ) -> None:
        """A watch-list stream's start (KEP-3157, the cacher's `sendInitialEvents`): an ADDED event per object
        that exists, then a BOOKMARK annotated `k8s.io/initial-events-end: "true"` at the resourceVersion of
        that state; changes follow. (The store queued exactly the existing objects when the watch opened.)"""
        for _ in range(watch.queue.qsize()):
            item = watch.queue.get_nowait()
            if item is None:
                return
            kind, obj, shared = item
            data = self._encode(request, res, version, kind, obj, shared, state, form)
            await limits.write_streamed(resp, request, data, deadline)
        mark = self._bookmark(res, version, str(watch.last_rv), {"k8s.io/initial-events-end": "true"})
        line = self._line(request, res, version, "BOOKMARK", mark, state, form)
        await limits.write_streamed(resp, request, line, deadline)
