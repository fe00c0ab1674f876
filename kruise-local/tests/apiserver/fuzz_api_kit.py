"""What the API fuzz tests (test_fuzz_api.py) address and how they talk: the API's paths and the resource
kinds, the reference objects' paths, one HTTP request (`send`) and the checks of its answer."""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings

CORE = "/api/v1"
KR1 = "/apis/apps.kruise.io/v1alpha1"
KR2 = "/apis/apps.kruise.io/v1beta1"
METRICS = "/apis/metrics.k8s.io/v1beta1"
NS = f"fuzz-{uuid.uuid4().hex[:8]}"
NODE = "kruise-local"
STALE_RV = "1"  # the first resourceVersion ever handed out is 2: every object is newer than this
WRONG_UID = "00000000-0000-4000-8000-00000000f022"
GUARD_SELECTOR = "fuzz.example.com/guard-absent"  # a label no object carries

SCALE = float(os.environ.get("KRUISE_FUZZ_SCALE", "1"))
"""Multiplies every test's example budget (e.g. KRUISE_FUZZ_SCALE=20 for a long bug hunt)."""


def budget(examples: int) -> int:
    return max(1, int(examples * SCALE))


FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


# -- the reference objects -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One stored resource type as the fuzzer addresses it."""

    plural: str
    prefixes: tuple[str, ...]
    namespaced: bool
    ref: str  # the name of an existing object of this kind (a reference object, or the node and its image)
    subresources: tuple[str, ...] = ()

    def collection(self, prefix: str, namespace: str | None = NS) -> str:
        if self.namespaced and namespace is not None:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def item(self, prefix: str, name_segment: str, namespace: str = NS) -> str:
        return f"{self.collection(prefix, namespace)}/{name_segment}"


PODS = Kind("pods", (CORE,), True, "ref-pod", ("status", "resize"))
CONFIGMAPS = Kind("configmaps", (CORE,), True, "ref-cm")
EVENTS = Kind("events", (CORE,), True, "ref-ev")
NAMESPACES = Kind("namespaces", (CORE,), False, NS, ("status",))
NODES = Kind("nodes", (CORE,), False, NODE, ("status",))
IPJS = Kind("imagepulljobs", (KR1, KR2), True, "ref-ipj", ("status",))
NODE_IMAGES = Kind("nodeimages", (KR1, KR2), False, NODE, ("status",))
CRRS = Kind("containerrecreaterequests", (KR1,), True, "ref-crr", ("status",))
KINDS = (PODS, CONFIGMAPS, EVENTS, NAMESPACES, NODES, IPJS, NODE_IMAGES, CRRS)

REFERENCE_PATHS = {
    "pod": PODS.item(CORE, PODS.ref),
    "configmap": CONFIGMAPS.item(CORE, CONFIGMAPS.ref),
    "event": EVENTS.item(CORE, EVENTS.ref),
    "namespace": f"{CORE}/namespaces/{NS}",
    "imagepulljob": IPJS.item(KR1, IPJS.ref),
    "crr": CRRS.item(KR1, CRRS.ref),
}


class Reference:
    """The reference objects as first read (`snapshot`: GET bodies) and parsed by kind (`docs`, also the node
    and its NodeImage)."""

    def __init__(self, snapshot: dict[str, bytes], docs: dict[str, dict[str, Any]]) -> None:
        self.snapshot = snapshot
        self.docs = docs

    def __repr__(self) -> str:
        return f"Reference({sorted(self.snapshot)})"


# -- talking HTTP ----------------------------------------------------------------------------------------


@dataclass
class Reply:
    method: str
    target: str
    status: int
    content_type: str
    body: bytes | None  # None: a stream (watch, follow) left unread, or a HEAD

    def __str__(self) -> str:
        shown = "<stream>" if self.body is None else self.body[:600].decode("utf-8", "replace")
        return f"{self.method} {self.target[:300]} -> {self.status} {shown}"


def send(
    cluster: Any,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: bytes | None = None,
    content_type: str | None = None,
    timeout: float = 20.0,
) -> Reply:
    """One request over a fresh connection; streamed 2xx answers are not read (the connection is closed)."""
    url = urllib.parse.urlsplit(cluster.url)
    target = path + ("?" + urllib.parse.urlencode(query, errors="surrogatepass") if query else "")
    headers = {"Accept": "application/json"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers)
        resp = conn.getresponse()
        streamed = (resp.getheader("Transfer-Encoding") or "").lower() == "chunked"
        unread = method == "HEAD" or (streamed and 200 <= resp.status < 300)
        data = None if unread else resp.read()
        return Reply(method, target, resp.status, resp.getheader("Content-Type") or "", data)
    finally:
        conn.close()


def _strict_json(data: bytes) -> Any:
    def no_constant(name: str) -> Any:
        raise AssertionError(f"the server wrote the non-JSON literal {name}")

    return json.loads(data, parse_constant=no_constant)


def check(reply: Reply, *, may_succeed: bool = False) -> Any:
    """A refusal must be a 4xx `Status`; success is allowed only when `may_succeed`. Returns the JSON body."""
    if 200 <= reply.status < 300:
        assert may_succeed, f"a request that must be refused succeeded: {reply}"
        if reply.body is not None and reply.content_type.startswith("application/json"):
            return _strict_json(reply.body)
        return None
    assert 400 <= reply.status < 500, f"not a 4xx refusal: {reply}"
    if reply.body is None:
        return None
    assert reply.content_type.startswith("application/json"), f"error body is not JSON: {reply}"
    status = _strict_json(reply.body)
    assert isinstance(status, dict), f"error body is not an object: {reply}"
    assert status.get("kind") == "Status" and status.get("apiVersion") == "v1", f"not a Status: {reply}"
    assert status.get("code") == reply.status, f"Status.code differs from the HTTP status: {reply}"
    assert status.get("status") == "Failure", f"Status.status is not Failure: {reply}"
    assert isinstance(status.get("message"), str) and isinstance(status.get("reason"), str), str(reply)
    return status


def check_unchanged(cluster: Any, ref: Reference, *names: str) -> None:
    """The reference objects (all, or those named) are byte-for-byte as snapshotted."""
    for name in names or tuple(ref.snapshot):
        reply = send(cluster, "GET", REFERENCE_PATHS[name])
        assert reply.status == 200, f"reference {name} is gone: {reply}"
        if reply.body != ref.snapshot[name]:
            before, after = json.loads(ref.snapshot[name]), json.loads(reply.body or b"{}")
            raise AssertionError(f"reference {name} changed:\nbefore {before}\nafter  {after}")


def check_pristine(cluster: Any, ref: Reference) -> None:
    reply = send(cluster, "GET", "/version")
    assert reply.status == 200 and json.loads(reply.body or b"{}").get("major") == "1", str(reply)
    check_unchanged(cluster, ref)
