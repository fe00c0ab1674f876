"""In-memory object store with resourceVersions, watch history and change listeners.

Everything runs on one asyncio event loop: the API server, the kubelet and the Kruise controllers call the
store from that loop only, so no locking is needed.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import ApiError
from .history import History, approx_size
from .limits import WATCH_CHANNEL_SIZE
from .resources import Resource
from .selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
Listener = Callable[[str, Resource, Obj, Obj | None], None]


def now_iso(offset: float = 0) -> str:
    """The current time (plus `offset` seconds) as the API server writes it (RFC 3339, seconds, UTC)."""
    return iso(datetime.now(UTC) + timedelta(seconds=offset))


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    """An RFC 3339 time the store wrote."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


_ATOMIC = frozenset({str, int, float, bool, type(None)})


def deep_copy(obj: Any) -> Any:
    """A deep copy of JSON-like data (dicts, lists, scalars), ~5x faster than `copy.deepcopy`.

    Other types are handed to `copy.deepcopy`. Unlike it, a sub-object referenced twice is copied twice
    (stored objects are trees, as JSON decodes them).
    """
    t = type(obj)
    if t is dict:
        return {k: v if type(v) in _ATOMIC else deep_copy(v) for k, v in obj.items()}
    if t is list:
        return [v if type(v) in _ATOMIC else deep_copy(v) for v in obj]
    if t in _ATOMIC:
        return obj
    return copy.deepcopy(obj)


def _ns_name(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


@dataclass
class Event:
    """One change, as a watch sends it."""

    rv: int
    type: str
    resource: Resource
    obj: Obj
    old: Obj | None


class Shared:
    """One object version's encodings, shared by every watch that sends it (the cacher's `cachingObject`:
    an event is serialized once per form, not once per watcher); it lives while a watch still holds it."""

    __slots__ = ("__weakref__", "encodings")

    def __init__(self) -> None:
        self.encodings: dict[tuple[str, ...], bytes] = {}


Item = tuple[str, "Obj", Shared]
"""what a watch queues: (event type, object as stored, its shared encodings)"""


class Watch:
    """A running watch: an async iterator of (type, object) pairs, filtered by namespace and selectors."""

    def __init__(
        self,
        store: Store,
        resource: Resource,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> None:
        self.store = store
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.queue: asyncio.Queue[Item | None] = asyncio.Queue()
        self.last_rv = 0
        self.capacity = WATCH_CHANNEL_SIZE
        """events the watcher may fall behind by before it is closed (cacher's watch channel size)"""
        self.terminated = False

    def _matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        ns, _ = _ns_name(obj)
        if self.namespace and ns != self.namespace:
            return False
        return self.labels.matches((obj.get("metadata") or {}).get("labels")) and self.fields.matches(obj)

    def offer(self, ev: Event, shared: Shared | None = None) -> None:
        if ev.resource.key != self.resource.key:
            return
        now_in, was_in = self._matches(ev.obj), self._matches(ev.old)
        kind = ev.type
        if kind == "MODIFIED":
            if now_in and not was_in:
                kind = "ADDED"
            elif was_in and not now_in:
                kind = "DELETED"
            elif not now_in:
                return
        elif not now_in:
            return
        if self.terminated:
            return
        if self.queue.qsize() >= self.capacity:
            # as the watch cache does with a watcher whose channel stays full: close it; the client
            # re-watches from the last resourceVersion it saw
            self.terminated = True
            self.queue.put_nowait(None)
            return
        self.last_rv = ev.rv
        self.queue.put_nowait((kind, ev.obj, shared or self.store.shared(ev.resource, ev.obj)))

    def close(self) -> None:
        self.queue.put_nowait(None)

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> tuple[str, Obj]:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        return item[0], item[1]


class Store:
    """Objects by resource, namespace and name; every write bumps the global resourceVersion."""

    def __init__(self, history: int = 5000) -> None:
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._rv = 1
        self._history_limit = history
        # the watch cache, per resource as in kube-apiserver: a flood of one kind's writes (thousands of
        # NodeImages) must not expire the resourceVersion a watch of another kind resumes from
        self._history: dict[str, History] = {}
        self._watches: dict[str, set[Watch]] = {}
        self._shared: weakref.WeakValueDictionary[tuple[str, ...], Shared] = weakref.WeakValueDictionary()
        self._listeners: list[Listener] = []

    # -- reading -------------------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    def _bucket(self, res: Resource) -> dict[tuple[str, str], Obj]:
        return self._objects.setdefault(res.key, {})

    def get(self, res: Resource, namespace: str, name: str) -> Obj:
        """A deep copy of one object, or 404."""
        obj = self._bucket(res).get((namespace if res.namespaced else "", name))
        if obj is None:
            raise ApiError(
                404,
                f'{res.plural}{"." + res.group if res.group else ""} "{name}" not found',
                kind=res.plural,
                name=name,
                group=res.group,
            )
        return deep_copy(obj)

    def peek(self, res: Resource, namespace: str, name: str) -> Obj | None:
        """The stored object itself (no copy; callers must not mutate it), or None."""
        return self._bucket(res).get((namespace if res.namespaced else "", name))

    def items(self, res: Resource, namespace: str | None = None) -> Iterable[Obj]:
        """Stored objects (no copies), optionally of one namespace."""
        for (ns, _), obj in list(self._bucket(res).items()):
            if not namespace or ns == namespace:
                yield obj

    def list(
        self,
        res: Resource,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> list[Obj]:
        out = []
        for obj in self.items(res, namespace):
            if labels and not labels.matches(obj["metadata"].get("labels")):
                continue
            if fields and not fields.matches(obj):
                continue
            out.append(deep_copy(obj))
        out.sort(key=lambda o: _ns_name(o))
        return out

    # -- writing -------------------------------------------------------------------------------------
    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _emit(self, kind: str, res: Resource, obj: Obj, old: Obj | None) -> None:
        ev = Event(int(obj["metadata"]["resourceVersion"]), kind, res, obj, old)
        history = self._history.get(res.key)
        if history is None:
            history = self._history[res.key] = History(self._history_limit)
        history.append(ev, approx_size(obj))
        watches = self._watches.get(res.key)
        if watches:
            shared = self.shared(res, obj)
            for w in list(watches):
                w.offer(ev, shared)
        for listener in list(self._listeners):
            listener(kind, res, obj, old)

    def create(self, res: Resource, obj: Obj, *, owned: bool = False) -> Obj:
        """Store a new object (409 AlreadyExists if the name is taken); returns a copy as stored.

        `owned=True` (controllers' hot paths): `obj` is a fresh object the store takes over, uncopied, and the
        stored object itself is returned; the caller must not touch either afterwards (as with `peek`).
        """
        if not owned:
            obj = deep_copy(obj)
        meta = obj.setdefault("metadata", {})
        if not res.namespaced:
            meta.pop("namespace", None)
        key = _ns_name(obj)
        bucket = self._bucket(res)
        if key in bucket:
            raise ApiError(
                409,
                f'{res.plural}{"." + res.group if res.group else ""} "{key[1]}" already exists',
                reason="AlreadyExists",
                kind=res.plural,
                name=key[1],
                group=res.group,
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["resourceVersion"] = str(self._bump())
        if res.group:
            meta["generation"] = 1
        meta.pop("deletionTimestamp", None)
        obj["apiVersion"] = res.api_version()
        obj["kind"] = res.kind
        bucket[key] = obj
        self._emit("ADDED", res, obj, None)
        return obj if owned else deep_copy(obj)

    def update(self, res: Resource, obj: Obj, *, check_rv: bool = True, owned: bool = False) -> Obj:
        """Replace an object. A stale `metadata.resourceVersion` is a 409 Conflict (when `check_rv`).

        Removes the object when it is being deleted and its last finalizer is gone. `owned=True`: as for
        `create` (the store keeps `obj` itself and returns the stored object, not copies).
        """
        if not owned:
            obj = deep_copy(obj)
        meta = obj.setdefault("metadata", {})
        key = (meta.get("namespace") or "" if res.namespaced else "", meta.get("name") or "")
        bucket = self._bucket(res)
        old = bucket.get(key)
        if old is None:
            raise ApiError(
                404, f'{res.plural} "{key[1]}" not found', kind=res.plural, name=key[1], group=res.group
            )
        sent_rv = meta.get("resourceVersion")
        if check_rv and sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                f"Operation cannot be fulfilled on {res.plural}{'.' + res.group if res.group else ''} "
                f'"{key[1]}": '
                "the object has been modified; please apply your changes to the latest version and try again",
                kind=res.plural,
                name=key[1],
                group=res.group,
            )
        for immutable in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if immutable in old["metadata"]:
                meta[immutable] = old["metadata"][immutable]
            else:
                meta.pop(immutable, None)
        if not res.namespaced:
            meta.pop("namespace", None)
        if res.group and old.get("spec") != obj.get("spec"):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        elif "generation" in old["metadata"]:
            meta["generation"] = old["metadata"]["generation"]
        obj["apiVersion"], obj["kind"] = old["apiVersion"], old["kind"]
        if _strip(obj) == _strip(old):
            return old if owned else deep_copy(old)  # a no-op update does not bump the resourceVersion
        meta["resourceVersion"] = str(self._bump())
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not self._held(res, obj):
            del bucket[key]
            self._emit("DELETED", res, obj, old)
            return obj if owned else deep_copy(obj)
        bucket[key] = obj
        self._emit("MODIFIED", res, obj, old)
        return obj if owned else deep_copy(obj)

    def _held(self, res: Resource, obj: Obj) -> bool:
        """Pods being deleted stay until the kubelet confirms their containers are gone."""
        return (
            res.kind == "Pod"
            and bool(obj["metadata"].get("deletionGracePeriodSeconds"))
            and bool((obj.get("spec") or {}).get("nodeName"))
        )

    def mark_deleted(self, res: Resource, namespace: str, name: str, grace: int | None) -> Obj:
        """Start a deletion: set deletionTimestamp (and grace), or remove at once when nothing holds it.

        As `rest.BeforeDelete`: deletionTimestamp = request time + grace period; a deletion already under way
        may only be shortened (the timestamp moves to its request time + the new grace period).
        """
        bucket = self._bucket(res)
        key = (namespace if res.namespaced else "", name)
        old = bucket.get(key)
        if old is None:
            raise ApiError(
                404, f'{res.plural} "{name}" not found', kind=res.plural, name=name, group=res.group
            )
        obj = deep_copy(old)
        meta = obj["metadata"]
        current = meta.get("deletionGracePeriodSeconds")
        if not meta.get("deletionTimestamp"):
            meta["deletionTimestamp"] = now_iso(grace or 0)
            if grace is not None:
                meta["deletionGracePeriodSeconds"] = grace
        elif grace is not None and (current is None or grace < current):
            requested = parse_iso(meta["deletionTimestamp"]) - timedelta(seconds=current or 0)
            meta["deletionTimestamp"] = iso(requested + timedelta(seconds=grace))
            meta["deletionGracePeriodSeconds"] = grace
        meta["resourceVersion"] = str(self._bump())
        if meta.get("finalizers") or self._held(res, obj):
            bucket[key] = obj
            self._emit("MODIFIED", res, obj, old)
        else:
            del bucket[key]
            self._emit("DELETED", res, obj, old)
        return deep_copy(obj)

    def remove(self, res: Resource, namespace: str, name: str, *, force: bool = False) -> Obj | None:
        """The final delete (the kubelet's grace-0 delete of a terminated pod, garbage collection).

        An object with finalizers stays, being deleted with grace 0, until its last finalizer is removed
        (`registry.Store` `Delete` -> `updateForGracefulDeletionAndFinalizers`); `force` removes it anyway
        (the namespace controller's purge here).
        """
        key = (namespace if res.namespaced else "", name)
        bucket = self._bucket(res)
        current = bucket.get(key)
        if current is not None and current["metadata"].get("finalizers") and not force:
            meta = current["metadata"]
            if meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0:
                return deep_copy(current)  # already waiting for its finalizers
            return self.mark_deleted(res, namespace, name, 0)
        old = bucket.pop(key, None)
        if old is None:
            return None
        obj = deep_copy(old)
        obj["metadata"]["resourceVersion"] = str(self._bump())
        self._emit("DELETED", res, obj, old)
        return obj

    # -- watching ------------------------------------------------------------------------------------
    def shared(self, res: Resource, obj: Obj) -> Shared:
        """The encodings shared by the watches that send this version of `obj`."""
        meta = obj.get("metadata") or {}
        key = (res.key, *_ns_name(obj), str(meta.get("uid")), str(meta.get("resourceVersion")))
        found = self._shared.get(key)
        if found is None:
            found = self._shared[key] = Shared()
        return found

    def listen(self, listener: Listener) -> None:
        """Call `listener(type, resource, obj, old)` on every change (controllers)."""
        self._listeners.append(listener)

    def watch(
        self,
        res: Resource,
        namespace: str | None,
        resource_version: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
    ) -> Watch:
        """Open a watch. No resourceVersion (or "0"): synthetic ADDED for what exists, then changes.

        An older resourceVersion replays the kept history after it, or is 410 Gone when the history no longer
        reaches back that far.
        """
        w = Watch(self, res, namespace, labels, fields)
        w.capacity = 2**62  # the initial state and a replay come from the cache, outside the channel
        if resource_version in (None, "", "0"):
            for obj in self.list(res, namespace, labels, fields):
                w.queue.put_nowait(("ADDED", obj, self.shared(res, obj)))
            w.last_rv = self._rv
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise ApiError(400, f"invalid resource version: {resource_version!r}") from None
            kept = self._history.get(res.key)
            expired = kept.expired if kept else 0
            if since < self._rv and since < expired:  # `getAllEventsSinceLocked`
                raise ApiError(410, f"too old resource version: {since} ({expired})", reason="Expired")
            history = kept.events if kept else deque()
            if history and history[-1].rv > since:
                start = _first_after(history, since)
                for i in range(start, len(history)):
                    w.offer(history[i])
            w.last_rv = max(since, w.last_rv)
        w.capacity = w.queue.qsize() + WATCH_CHANNEL_SIZE
        self._watches.setdefault(res.key, set()).add(w)
        return w

    def watchers(self, res: Resource) -> list[Watch]:
        """The open watches of `res`."""
        return list(self._watches.get(res.key, ()))

    def compacted(self, res: Resource) -> int:
        """The oldest resourceVersion of `res` still in the history: anything older is compacted (410)."""
        kept = self._history.get(res.key)
        return kept.expired if kept else 0

    def set_history_limit(self, events: int) -> None:
        """Keep at most the last `events` changes of each resource for watches to resume from (the watch
        cache's upper bound of capacity; older: 410 Gone)."""
        self._history_limit = events
        for history in self._history.values():
            history.set_upper(events)

    def unwatch(self, w: Watch) -> None:
        watches = self._watches.get(w.resource.key)
        if watches is not None:
            watches.discard(w)
            if not watches:
                del self._watches[w.resource.key]

    def close_watches(self) -> None:
        for watches in list(self._watches.values()):
            for w in list(watches):
                w.close()
        self._watches.clear()


def _first_after(history: deque[Event], rv: int) -> int:
    """Index of the first event in `history` (ordered by rv) newer than `rv` (binary search)."""
    lo, hi = 0, len(history)
    while lo < hi:
        mid = (lo + hi) // 2
        if history[mid].rv > rv:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _strip(obj: Obj) -> Obj:
    o = copy.copy(obj)
    o["metadata"] = {
        k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "generation")
    }
    return o
