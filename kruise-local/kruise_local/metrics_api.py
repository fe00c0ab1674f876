"""The `metrics.k8s.io/v1beta1` API as metrics-server serves it (`pkg/api/pod.go`, `pkg/api/node.go`):
PodMetrics from the nodes (`NodeClient.pod_metrics`: live in the fast profile, the modelled metrics-server's
scrapes in the realistic one) and NodeMetrics for `kubectl top node`."""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from . import resources as R
from .errors import ApiError, not_served
from .responses import json_response
from .selectors import LabelSelector
from .store import Obj, Store, now_iso
from .validation import memory_bytes, parse_quantity

API_VERSION = "metrics.k8s.io/v1beta1"


class PodMetricsSource(Protocol):
    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None: ...


def serve(
    request: web.Request,
    store: Store,
    nodes: PodMetricsSource,
    namespace: str | None,
    plural: str,
    name: str | None,
) -> web.Response:
    """GET of `pods` (namespaced or across namespaces) or `nodes` (cluster-scoped), one or a list."""
    if plural not in ("pods", "nodes") or request.method != "GET" or (plural == "nodes" and namespace):
        raise not_served()
    if plural == "nodes":
        return json_response(node_metrics(store, nodes, name))
    if name is not None:
        metrics = nodes.pod_metrics(store.get(R.PODS, namespace or "", name))
        if metrics is None:
            raise ApiError(404, f'podmetrics.metrics.k8s.io "{name}" not found')
        return json_response(metrics)
    labels = LabelSelector.parse(request.query.get("labelSelector"))
    pods = store.list(R.PODS, namespace, labels)
    items = [m for p in pods if (m := nodes.pod_metrics(p)) is not None]
    return json_response(
        {"kind": "PodMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}
    )


def node_metrics(store: Store, nodes: PodMetricsSource, name: str | None) -> dict[str, Any]:
    """NodeMetrics: a node's usage is the sum of its pods' PodMetrics (the local node runs nothing else: no
    system daemons, no kernel overhead), at their latest timestamp; a node without pod metrics reads 0."""
    chosen = [store.get(R.NODES, "", name)] if name is not None else store.list(R.NODES, None)
    items = []
    for node in chosen:
        node_name = node["metadata"]["name"]
        pods = [p for p in store.items(R.PODS) if (p.get("spec") or {}).get("nodeName") == node_name]
        metrics = [m for p in pods if (m := nodes.pod_metrics(p)) is not None]
        usages = [c["usage"] for m in metrics for c in m["containers"]]
        memory = sum(memory_bytes(u["memory"]) for u in usages)
        cpu = sum(int(parse_quantity(u["cpu"]) * 10**9) for u in usages)
        meta = {
            "name": node_name,
            "labels": node["metadata"].get("labels", {}),
            "creationTimestamp": now_iso(),
        }
        items.append(
            {
                "kind": "NodeMetrics",
                "apiVersion": API_VERSION,
                "metadata": meta,
                "timestamp": max((m["timestamp"] for m in metrics), default=now_iso()),
                "window": metrics[0]["window"] if metrics else "1s",
                "usage": {"cpu": f"{cpu}n" if cpu else "0", "memory": f"{memory // 1024}Ki"},
            }
        )
    if name is not None:
        return items[0]
    return {"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items}
