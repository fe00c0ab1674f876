"""The event recorder every part of the local cluster writes Events through (client-go `tools/record`)."""

from __future__ import annotations

import time

from . import resources as R
from .store import Obj, Store, now_iso


class EventRecorder:
    """Writes Events about objects into the store, as client-go's recorder does for each component."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._event_seq = 0

    def record(
        self,
        obj: Obj,
        etype: str,
        reason: str,
        message: str,
        component: str,
        host: str | None = None,
        field_path: str = "",
    ) -> None:
        """Write (or bump the count of) an Event about `obj`, or about the part of it `field_path` names (the
        kubelet's container events: `spec.containers{name}`, `kubecontainer.GenerateContainerRef`). Events
        that differ only in that part are distinct, as the part is in client-go's aggregation key
        (`tools/record/events_cache.go` `getEventKey`)."""
        meta = obj["metadata"]
        ns = meta.get("namespace") or "default"
        involved = {
            "kind": obj.get("kind"),
            "namespace": meta.get("namespace"),
            "name": meta["name"],
            "uid": meta.get("uid"),
            "apiVersion": obj.get("apiVersion"),
            "resourceVersion": meta.get("resourceVersion"),
            **({"fieldPath": field_path} if field_path else {}),
        }
        for ev in self.store.items(R.EVENTS, ns):
            io = ev.get("involvedObject") or {}
            if (
                io.get("uid") == meta.get("uid")
                and io.get("fieldPath", "") == field_path
                and ev.get("reason") == reason
                and ev.get("message") == message
            ):
                updated = dict(ev)
                updated["count"] = ev.get("count", 1) + 1
                updated["lastTimestamp"] = now_iso()
                self.store.update(R.EVENTS, updated, check_rv=False)
                return
        # named `<object>.<hex UnixNano>` as client-go's recorder (`tools/record` `makeEvent`) names them, so
        # listing by name lists in time order (kubectl describe keeps that order for same-second events)
        self._event_seq = max(self._event_seq + 1, time.time_ns())
        source = {"component": component, **({"host": host} if host else {})}
        self.store.create(
            R.EVENTS,
            {
                "metadata": {"name": f"{meta['name']}.{self._event_seq:x}", "namespace": ns},
                "involvedObject": involved,
                "reason": reason,
                "message": message,
                "type": etype,
                "count": 1,
                "firstTimestamp": now_iso(),
                "lastTimestamp": now_iso(),
                "source": source,
                "reportingComponent": component,
                "reportingInstance": host or "",
            },
        )
