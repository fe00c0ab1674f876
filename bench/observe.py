"""What the pipelines benchmark records of the cluster while a scenario runs, through the API as any client
would: every version of every pod of the benchmark's namespaces (a pod watch: the memory the pods reserve
and their containers in back-off follow from the specs, resizes and statuses, no metrics needed) and the
metrics API's PodMetrics readings (sampled every `SAMPLE` seconds: what metrics-server served, with each
reading's time and window)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from typing import Any

from bench import figures

SAMPLE = 0.1  # metrics API sampling period
PREFIX = "bench-"  # the benchmark's namespaces
UA = "kruise-chain-bench-sampler"  # excluded from the scenario's request counts


def reserved_memory(pod: dict[str, Any]) -> int:
    """The memory a pod reserves on its node, in bytes: its requests as the scheduler counts them (the
    local cluster's `scheduling.pod_requests`: the largest init container or the sum of the containers;
    during an in-place resize the largest of desired, allocated and actual) while it is bound and not
    Succeeded/Failed, else 0."""
    from kruise_local.scheduling import active, pod_requests

    if not (pod.get("spec") or {}).get("nodeName") or not active(pod):
        return 0
    return pod_requests(pod).get("memory", 0)


def parse_memory(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1000, "M": 10**6, "G": 10**9}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


class Sampler:
    """Records, from `start` to `stop`, the pod watch's events and the metrics API's readings.

    - `events`: (time received, ADDED / MODIFIED / DELETED, pod) of the benchmark's pods, every version (a
      re-list after a lost watch adds what changed meanwhile, at the re-list's time);
    - `samples`: (time, {(namespace, pod, container): bytes}) per metrics read, {} when metrics-server had
      no reading; `readings`: (namespace, pod, container) -> the distinct (taken, window, bytes) seen."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.events: list[tuple[float, str, dict[str, Any]]] = []
        self.samples: list[tuple[float, dict[tuple[str, str, str], int]]] = []
        self.readings: dict[tuple[str, str, str], set[tuple[float, float, int]]] = {}
        self.relists = 0
        self.stop_event = threading.Event()
        self._pods: dict[str, dict[str, Any]] = {}
        self._watch_conn: http.client.HTTPConnection | None = None
        self._threads = [
            threading.Thread(target=self._watch, name="bench-pod-watch", daemon=True),
            threading.Thread(target=self._metrics, name="bench-metrics", daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self.stop_event.set()
        conn = self._watch_conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=30)

    def _get(self, conn: http.client.HTTPConnection, path: str) -> tuple[int, Any]:
        conn.request("GET", path, headers={"User-Agent": UA})
        resp = conn.getresponse()
        body = resp.read()
        return resp.status, json.loads(body) if body else None

    def _record(self, t: float, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        if not (meta.get("namespace") or "").startswith(PREFIX):
            return
        uid = meta.get("uid") or ""
        if kind == "DELETED":
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = pod
        self.events.append((t, kind, pod))

    def _relist(self, conn: http.client.HTTPConnection) -> str:
        """List the pods (at start, or after a watch too old to resume): record what changed meanwhile."""
        status, body = self._get(conn, "/api/v1/pods")
        if status != 200:
            raise OSError(f"listing pods: HTTP {status}")
        t = time.time()
        items = {p["metadata"].get("uid", ""): p for p in body.get("items", [])}
        for uid, pod in list(self._pods.items()):
            if uid not in items:
                self._record(t, "DELETED", pod)
        for uid, pod in items.items():
            old = self._pods.get(uid)
            version = pod["metadata"].get("resourceVersion")
            if old is None or old["metadata"].get("resourceVersion") != version:
                self._record(t, "MODIFIED" if old else "ADDED", pod)
        self.relists += 1
        return str(body["metadata"]["resourceVersion"])

    def _watch(self) -> None:
        rv: str | None = None
        while not self.stop_event.is_set():
            conn = http.client.HTTPConnection(*self.address, timeout=30)
            self._watch_conn = conn
            try:
                if rv is None:
                    rv = self._relist(conn)
                conn.request(
                    "GET",
                    f"/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}",
                    headers={"User-Agent": UA},
                )
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    rv = None
                    continue
                while not self.stop_event.is_set():
                    line = resp.readline()
                    if not line:
                        break  # the watch ended (timeout): resume from rv
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        rv = None  # 410 Gone: too old to resume, list again
                        break
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._record(time.time(), event["type"], obj)
            except (OSError, http.client.HTTPException, ValueError):
                if not self.stop_event.is_set():
                    time.sleep(0.05)
            finally:
                conn.close()

    def _metrics(self) -> None:
        conn = http.client.HTTPConnection(*self.address, timeout=10)
        while not self.stop_event.is_set():
            t = time.time()
            try:
                status, body = self._get(conn, "/apis/metrics.k8s.io/v1beta1/pods")
                self.samples.append((t, self._usage(body.get("items", []) if status == 200 else [])))
            except (OSError, http.client.HTTPException, ValueError):
                conn.close()
            self.stop_event.wait(max(0.0, SAMPLE - (time.time() - t)))
        conn.close()

    def _usage(self, items: list[dict[str, Any]]) -> dict[tuple[str, str, str], int]:
        out = {}
        for item in items:
            meta = item["metadata"]
            ns = meta.get("namespace") or ""
            when = figures.reading_time(item)
            if not ns.startswith(PREFIX):
                continue
            for c in item.get("containers", []):
                key = (ns, meta["name"], c["name"])
                out[key] = parse_memory(c["usage"]["memory"])
                if when is not None:
                    self.readings.setdefault(key, set()).add((*when, out[key]))
        return out

    def backoff_events(self) -> int:
        """BackOff events (the kubelet refused a start in back-off) in the benchmark's namespaces."""
        conn = http.client.HTTPConnection(*self.address, timeout=10)
        try:
            status, body = self._get(conn, "/api/v1/events")
        finally:
            conn.close()
        items = body.get("items", []) if status == 200 else []
        return sum(
            int(e.get("count") or 1)
            for e in items
            if e.get("reason") == "BackOff" and (e["metadata"].get("namespace") or "").startswith(PREFIX)
        )
