"""Hostile input at every endpoint of the local API server, over real HTTP (property-based, with hypothesis).

Every fuzzed request must be refused with a 4xx `Status` whose `code` is the HTTP status, except reads (GET,
HEAD), which may also succeed; the server must keep answering, and the reference objects set up first (a pod,
a ConfigMap, an Event, an ImagePullJob, a ContainerRecreateRequest and their namespace) must stay
byte-for-byte unchanged, resourceVersion included.

Writes carry a guard that a real API server also refuses, and only after every other check, so a request
that gets through parsing, patching, defaulting and validation still cannot change anything: creates reuse
the name of an existing object (409 AlreadyExists), updates and patches carry a stale
`metadata.resourceVersion` (409 Conflict), deletes and evictions carry a `preconditions.uid` that does not
match (409 Conflict) and, against collections, a label selector that matches nothing.
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import os
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# -- the module's reference objects ----------------------------------------------------------------------


def _create(cluster: Any, path: str, body: dict[str, Any]) -> None:
    reply = send(cluster, "POST", path, body=json.dumps(body).encode(), content_type="application/json")
    assert reply.status == 201, str(reply)


def _get(cluster: Any, path: str) -> dict[str, Any]:
    reply = send(cluster, "GET", path)
    assert reply.status == 200, str(reply)
    return json.loads(reply.body or b"{}")


def _wait(what: str, fn: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not fn():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _pod_ready(cluster: Any) -> bool:
    conditions = (_get(cluster, REFERENCE_PATHS["pod"]).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@pytest.fixture(scope="module")
def ref(cluster: Any) -> Iterator[Reference]:
    _create(cluster, f"{CORE}/namespaces", {"metadata": {"name": NS}})
    _create(
        cluster,
        PODS.collection(CORE),
        {
            "metadata": {"name": PODS.ref, "labels": {"app": "ref"}, "annotations": {"note": "reference"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
            },
        },
    )
    _create(cluster, CONFIGMAPS.collection(CORE), {"metadata": {"name": CONFIGMAPS.ref}, "data": {"k": "v"}})
    _create(
        cluster,
        EVENTS.collection(CORE),
        {
            "metadata": {"name": EVENTS.ref},
            "involvedObject": {"kind": "ConfigMap", "name": CONFIGMAPS.ref, "namespace": NS},
            "reason": "Reference",
            "message": "a reference event",
            "type": "Normal",
        },
    )
    _create(
        cluster,
        IPJS.collection(KR1),
        {
            "metadata": {"name": IPJS.ref},
            "spec": {"image": "busybox:1.36", "selector": {"names": [NODE]}},
        },
    )
    _wait("the reference pod to be ready", lambda: _pod_ready(cluster))
    _create(
        cluster,
        CRRS.collection(KR1),
        {
            "metadata": {"name": CRRS.ref},
            "spec": {
                "podName": PODS.ref,
                "containers": [{"name": "c"}],
                "activeDeadlineSeconds": 60,
                "ttlSecondsAfterFinished": 3600,
            },
        },
    )
    crr_path, ipj_path = REFERENCE_PATHS["crr"], REFERENCE_PATHS["imagepulljob"]
    _wait("the CRR", lambda: (_get(cluster, crr_path).get("status") or {}).get("phase") == "Completed")
    _wait(
        "the ImagePullJob", lambda: bool((_get(cluster, ipj_path).get("status") or {}).get("completionTime"))
    )
    _wait("the reference pod to be ready again", lambda: _pod_ready(cluster))

    def snap() -> dict[str, bytes]:
        return {name: send(cluster, "GET", path).body or b"" for name, path in REFERENCE_PATHS.items()}

    snapshot = snap()
    for _ in range(100):  # settled: two snapshots a moment apart agree
        time.sleep(0.2)
        again = snap()
        if again == snapshot:
            break
        snapshot = again
    else:
        pytest.fail("the reference objects never settled")
    docs = {kind: json.loads(snapshot[name]) for kind, name in _DOC_OF.items()}
    docs[NODES.plural] = _get(cluster, NODES.item(CORE, NODE))
    docs[NODE_IMAGES.plural] = _get(cluster, NODE_IMAGES.item(KR1, NODE))
    yield Reference(snapshot, docs)
    send(cluster, "DELETE", f"{CORE}/namespaces/{NS}")


@pytest.fixture(autouse=True)
def _pristine_after(cluster: Any, ref: Reference) -> Iterator[None]:
    """After each test's whole hypothesis run: /version answers and every reference object is unchanged."""
    yield
    check_pristine(cluster, ref)


AFFECTED = {
    "pods": ("pod",),
    "configmaps": ("configmap",),
    "events": ("event",),
    "namespaces": ("namespace", "pod"),
    "nodes": ("pod",),
    "imagepulljobs": ("imagepulljob",),
    "nodeimages": ("imagepulljob",),
    "containerrecreaterequests": ("crr", "pod"),
}
"""The reference objects a write to a kind could change, checked after each example (all are checked after
each test)."""

_DOC_OF = {
    PODS.plural: "pod",
    CONFIGMAPS.plural: "configmap",
    EVENTS.plural: "event",
    NAMESPACES.plural: "namespace",
    IPJS.plural: "imagepulljob",
    CRRS.plural: "crr",
}


# -- strategies: values --------------------------------------------------------------------------------

HOSTILE_STRINGS = [
    "",
    " ",
    ".",
    "..",
    "../",
    "../../etc/passwd",
    "%2F",
    "a%2Fb",
    "%00",
    "%",
    "/",
    "a/b",
    "\x00",
    "\n",
    "\t",
    "\u202e",
    "\ud800",
    "\ufeff",
    "ünïcödé",
    "名前",
    "😀",
    "-a",
    "a-",
    "A",
    "a..b",
    "a" * 63,
    "a" * 64,
    "a" * 253,
    "a" * 254,
    "a" * 5000,
    "x" * (256 * 1024 + 1),
    "y" * (1024 * 1024 + 7),
    "1Gi",
    "-1",
    "1e999",
    "NaN",
    "0x10",
    "true",
    "null",
    "$patch",
    "~1",
    "*",
    "{}",
    "[]",
    "'; DROP TABLE pods; --",
    "${HOME}",
    "$(id)",
    "metadata.annotations['x']",
]
KEYS = st.one_of(
    st.sampled_from(
        [
            "metadata",
            "spec",
            "status",
            "kind",
            "apiVersion",
            "name",
            "namespace",
            "generateName",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "containers",
            "initContainers",
            "image",
            "command",
            "env",
            "value",
            "valueFrom",
            "fieldRef",
            "fieldPath",
            "resources",
            "limits",
            "requests",
            "cpu",
            "memory",
            "volumes",
            "volumeMounts",
            "mountPath",
            "tolerations",
            "activeDeadlineSeconds",
            "data",
            "binaryData",
            "selector",
            "names",
            "matchLabels",
            "matchExpressions",
            "podName",
            "strategy",
            "images",
            "tags",
            "tag",
            "preconditions",
            "gracePeriodSeconds",
            "deleteOptions",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$deleteFromPrimitiveList/finalizers",
            "",
        ]
    ),
    st.text(max_size=8),
)
STRINGS = st.one_of(st.text(max_size=16), st.sampled_from(HOSTILE_STRINGS))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
JSON = st.recursive(
    SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(KEYS, kids, max_size=4)),
    max_leaves=12,
)
WRONG = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            2**31,
            2**63,
            -(2**63) - 1,
            10**30,
            0.5,
            -0.0,
            1e308,
            "",
            "x",
            [],
            {},
            [None],
        ]
    ).map(copy.deepcopy),  # fresh containers: the fuzzer edits what it draws
    st.sampled_from(HOSTILE_STRINGS),
    JSON,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _at(doc, path[:-1])[path[-1]] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_changes: int = 3) -> Any:
    """`base` with one to `max_changes` values replaced by wrong types, deleted, added to or wrapped."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_changes))):
        path = draw(st.sampled_from(_paths(doc)))
        how = draw(st.sampled_from(("replace", "replace", "delete", "add", "wrap")))
        target = _at(doc, path)
        if how == "delete" and path:
            del _at(doc, path[:-1])[path[-1]]
        elif how == "add" and isinstance(target, dict):
            target[draw(KEYS)] = draw(WRONG)
        elif how == "add" and isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(WRONG))
        elif how == "wrap":
            doc = _put(doc, path, draw(st.sampled_from(([target], {"x": target}, json.dumps(target)))))
        else:
            doc = _put(doc, path, draw(WRONG))
    return doc


# -- strategies: names, selectors, query parameters ------------------------------------------------------

NAME_STRINGS = [s for s in HOSTILE_STRINGS if len(s) < 6000]
REF_LOOKALIKES = [
    "ref-cm/",
    "ref-cm%2F",
    "ref-cm/status",
    "ref-cm%2Fstatus",
    "ref-pod/log",
    "ref-pod/eviction",
    "ref-pod/resize",
    "ref-pod%2F..%2Fref-cm",
    "ref-pod/../ref-cm",
    "REF-CM",
    "ref-cm ",
    " ref-cm",
    "ref-cm\x00",
    "ref-c%6D",
    "ref-cm?x=1",
    "ref-cm#frag",
]
NAMES = st.one_of(st.sampled_from(NAME_STRINGS + REF_LOOKALIKES), st.text(max_size=20))


def _quote(name: str, safe: str = "") -> str:
    return urllib.parse.quote(name, safe=safe, errors="surrogatepass")


def segment(name: str, raw: bool) -> str:
    """A path segment for `name`: percent-quoted as a client does, or raw (when sendable and harmless)."""
    sendable = name.isascii() and all(0x20 < ord(ch) < 0x7F for ch in name)
    if raw and sendable and "?" not in name and "#" not in name:
        return name
    return _quote(name)


SELECTOR_PIECES = [
    "a=b",
    "a!=b",
    "a==b",
    "a in (b,c)",
    "a notin (b)",
    "!a",
    "a",
    "a>1",
    "a<-3",
    "a>x",
    "app=ref",
    "app",
    "a in ()",
    "a in (",
    "a in (b,,c)",
    "a in b",
    "=",
    "!",
    "!=",
    ",",
    "(",
    ")",
    "a=(b)",
    "a==",
    "a=b=c",
    "x/y=z",
    "x//y=z",
    "-a=b",
    "a" * 300 + "=b",
    "a=" + "b" * 64,
    "é=ü",
    "\x00",
    "a=\n",
    "in",
    "notin",
    "in in (in)",
    "metadata.name=x",
    "metadata.name=ref-cm",
    "metadata.name!=x",
    "metadata.name==ref-pod",
    "metadata.namespace=" + NS,
    "spec.nodeName=" + NODE,
    "status.phase=Running",
    "spec.restartPolicy=Always",
    "involvedObject.name=ref-cm",
    "reason=Reference",
    "data.k=v",
    "metadata.labels=x",
    "metadata.name",
    "metadata.name=a\\,b",
    "metadata.name=a\\",
    "metadata.name=\\x",
    "metadata.name=x,,",
    " metadata.name = ref-cm ",
    "\\=",
]
SELECTORS = st.one_of(
    st.sampled_from(SELECTOR_PIECES),
    st.lists(st.sampled_from(SELECTOR_PIECES), min_size=1, max_size=4).map(",".join),
    st.text(alphabet=st.sampled_from("ab=!(),<> \\/.-_é\x00in"), max_size=24),
    st.text(max_size=12),
)
INTISH = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "1",
            "-1",
            "3",
            "abc",
            "1.5",
            "1e3",
            "0x10",
            " 1",
            "+5",
            "1_000",
            "١٢",
            "99999999999999999999",
            "-99999999999999999999",
            "9" * 400,
            "9" * 5000,
            "true",
            "null",
        ]
    ),
    st.integers().map(str),
    st.text(max_size=6),
)
BOOLISH = st.sampled_from(["", "true", "false", "1", "0", "True", "TRUE", "yes", "x", "null"])
TIMES = st.one_of(
    st.sampled_from(
        [
            "",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00.123456789Z",
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59-14:00",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-13-45T99:99:99Z",
            "2024-01-01T00:00:00+25:00",
            "yesterday",
            "-1",
            "0",
            "\x00",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
    st.text(max_size=12),
)
QUERY_STRINGS = st.one_of(
    st.text(max_size=16), st.sampled_from([h for h in HOSTILE_STRINGS if len(h) < 300_000])
)
"""Hostile strings that fit a request line (the real server, like this one, refuses lines over 1 MiB as bad
HTTP, before any handler sees them)."""
COMMON_QUERY = {
    "pretty": BOOLISH,
    "resourceVersion": st.one_of(INTISH, st.sampled_from([STALE_RV, "0"])),
    "resourceVersionMatch": st.sampled_from(["", "Exact", "NotOlderThan", "bogus"]),
    "timeoutSeconds": INTISH,
    "dryRun": st.sampled_from(["All", "all", "None", "", "x", "All,All"]),
    "fieldManager": QUERY_STRINGS,
    "fieldValidation": st.sampled_from(["Strict", "Warn", "Ignore", "", "bogus"]),
    "gracePeriodSeconds": INTISH,
    "propagationPolicy": st.sampled_from(["Foreground", "Background", "Orphan", "", "x"]),
}
LIST_QUERY = {
    "labelSelector": SELECTORS,
    "fieldSelector": SELECTORS,
    "limit": INTISH,
    "continue": st.one_of(
        st.sampled_from(["", "MQ==", "LTE=", "YWJj", "!!!", "MTAwMDAwMDAwMDA="]), QUERY_STRINGS
    ),
    "watch": BOOLISH,
    "allowWatchBookmarks": BOOLISH,
    "sendInitialEvents": BOOLISH,
}
LOG_QUERY = {
    "container": st.one_of(st.sampled_from(["c", "C", "", "nope", "c ", "c,c"]), NAMES),
    "tailLines": INTISH,
    "sinceTime": TIMES,
    "sinceSeconds": INTISH,
    "limitBytes": INTISH,
    "follow": BOOLISH,
    "previous": BOOLISH,
    "timestamps": BOOLISH,
    "insecureSkipTLSVerifyBackend": BOOLISH,
}


@st.composite
def query(draw: st.DrawFn, *families: dict[str, st.SearchStrategy[str]]) -> list[tuple[str, str]]:
    params = {k: v for family in families for k, v in family.items()}
    keys = draw(st.lists(st.sampled_from(sorted(params)), max_size=4, unique=True))
    out = [(k, draw(params[k])) for k in keys]
    if draw(st.booleans()):
        out.append((draw(KEYS), draw(QUERY_STRINGS)))  # an unknown parameter
    return out


# -- strategies: bodies ------------------------------------------------------------------------------------

GARBAGE = st.one_of(
    st.sampled_from(
        [
            b"",
            b"null",
            b"true",
            b"1",
            b'"x"',
            b"[]",
            b"{",
            b"}",
            b'{"a":}',
            b"NaN",
            b"Infinity",
            b"-Infinity",
            b'{"metadata": {"name": NaN}}',
            b'{"spec": Infinity, "metadata": {}}',
            b'{"metadata": {"name": "x", "labels": {"a": -Infinity}}}',
            b"1e999",
            b'{"metadata": {}, "spec": 1e999}',
            b'{"metadata": {"annotations": {"a": 1e999}}}',
            b"\xff\xfe{\x00}\x00",
            b"\xef\xbb\xbf{}",
            b'{"metadata": {"name": "\xff"}}',
            b'{"metadata": {"name": "\\ud800"}}',
            b'{"a": 1, "a": 2}',
            b"apiVersion: v1\nkind: Pod\n",
            b"\x00" * 16,
            b"[" * 100_000,
            b"[" * 900 + b"]" * 900,
            b'{"metadata": {}, "spec": ' + b'{"a": ' * 400 + b"1" + b"}" * 400 + b"}",
            b'{"metadata": ' + b'{"a": ' * 3000 + b"1" + b"}" * 3001,
            b'{"metadata": {"name": "' + b"a" * (3 * 1024 * 1024) + b'"}}',
            b'{"metadata": {"annotations": {"a": "' + b"a" * (2 * 1024 * 1024) + b'"}}}',
            b"9" * 5000,
        ]
    ),
    st.binary(max_size=64),
    st.text(max_size=32).map(lambda s: s.encode("utf-8", "surrogatepass")),
)


def encode(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8", "surrogatepass")


def guard_update(body: Any) -> Any:
    """Make an update or a merge patch carry a stale resourceVersion (409 Conflict after all else passes)."""
    if isinstance(body, dict) and ("metadata" not in body or isinstance(body["metadata"], dict)):
        meta = dict(body.get("metadata") or {})
        if meta.get("$patch") == "delete":  # a strategic `$patch: delete` would drop the guard with it
            del meta["$patch"]
        meta["resourceVersion"] = STALE_RV
        body["metadata"] = meta
    elif isinstance(body, list):
        return guard_json_patch(body)
    return body


def guard_json_patch(ops: Any) -> Any:
    """Make a JSON patch end by setting a stale resourceVersion; any other object is guarded as an update
    (a patch body may be sent under another patch type)."""
    if isinstance(ops, list):
        return [*ops, {"op": "add", "path": "/metadata/resourceVersion", "value": STALE_RV}]
    return guard_update(ops)


def _guard_preconditions(opts: dict[str, Any]) -> None:
    pre = opts.get("preconditions")
    if isinstance(pre, dict):
        opts["preconditions"] = {**pre, "uid": WRONG_UID}
    elif not pre:  # a truthy non-object must be refused as it is
        opts["preconditions"] = {"uid": WRONG_UID}


def guard_delete(body: Any) -> Any:
    """Make DeleteOptions, and an Eviction's deleteOptions, carry a uid precondition that does not match."""
    if body is None:  # `null` DeleteOptions are no options at all
        body = {}
    if isinstance(body, dict):
        _guard_preconditions(body)
        opts = body.get("deleteOptions")
        if isinstance(opts, dict):
            _guard_preconditions(opts)
        elif not opts:
            body["deleteOptions"] = {"preconditions": {"uid": WRONG_UID}}
    return body


def _decodes_to_object(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except (ValueError, RecursionError):
        return False


def _unguardable(raw: bytes) -> bool:
    """Cannot be read as anything a write could act on: not an object, an empty JSON patch, nor `null`
    (which real DeleteOptions decoding takes for no options)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return bool(raw)
    return not isinstance(value, dict) and value not in (None, [])


UNGUARDABLE = GARBAGE.filter(_unguardable)
"""Garbage bodies that cannot carry a guard: only those that cannot be read as an object at all."""


def create_templates() -> dict[str, dict[str, Any]]:
    """Plausible create bodies per kind (the fuzzer mutates them and renames them onto an existing object)."""
    meta = {"name": "x", "labels": {"app": "fuzz"}, "annotations": {"a": "b"}}
    return {
        PODS.plural: {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 1,
                "activeDeadlineSeconds": 100,
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox:1.36",
                        "command": ["sleep", "1"],
                        "args": ["x"],
                        "env": [
                            {"name": "E", "value": "v"},
                            {
                                "name": "F",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a']"}},
                            },
                        ],
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "resources": {
                            "requests": {"cpu": "10m", "memory": "16Mi"},
                            "limits": {"cpu": "100m", "memory": "32Mi"},
                        },
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
                        "lifecycle": {"preStop": {"exec": {"command": ["true"]}}},
                    }
                ],
                "initContainers": [{"name": "i", "image": "busybox:1.36", "command": ["true"]}],
                "volumes": [
                    {"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
                    {"name": "cfg", "configMap": {"name": CONFIGMAPS.ref}},
                    {
                        "name": "dapi",
                        "downwardAPI": {"items": [{"path": "a", "fieldRef": {"fieldPath": "a"}}]},
                    },
                ],
            },
        },
        CONFIGMAPS.plural: {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"k": "v", "script.sh": "echo hi"},
            "binaryData": {"b": "AAEC"},
            "immutable": False,
        },
        EVENTS.plural: {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": meta,
            "involvedObject": {"kind": "Pod", "name": PODS.ref, "namespace": NS, "uid": WRONG_UID},
            "reason": "Fuzz",
            "message": "m",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": "2024-01-01T00:00:00Z",
            "lastTimestamp": "2024-01-01T00:00:00Z",
            "source": {"component": "fuzz"},
        },
        NAMESPACES.plural: {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": meta,
            "spec": {"finalizers": ["kubernetes"]},
        },
        NODES.plural: {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": meta,
            "spec": {
                "unschedulable": False,
                "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}],
            },
        },
        IPJS.plural: {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": meta,
            "spec": {
                "image": "busybox:1.36",
                "parallelism": 1,
                "selector": {
                    "names": [NODE],
                    "matchLabels": {"a": "b"},
                    "matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}],
                },
                "podSelector": {"matchLabels": {"app": "ref"}},
                "completionPolicy": {
                    "type": "Always",
                    "activeDeadlineSeconds": 1200,
                    "ttlSecondsAfterFinished": 60,
                },
                "pullPolicy": {"timeoutSeconds": 600, "backoffLimit": 3},
                "pullSecrets": ["secret"],
                "imagePullPolicy": "IfNotPresent",
                "sandboxConfig": {"labels": {"a": "b"}},
            },
        },
        NODE_IMAGES.plural: {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": meta,
            "spec": {
                "images": {
                    "busybox": {
                        "tags": [
                            {
                                "tag": "1.36",
                                "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 3},
                                "createdAt": "2024-01-01T00:00:00Z",
                            }
                        ]
                    }
                }
            },
        },
        CRRS.plural: {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ContainerRecreateRequest",
            "metadata": meta,
            "spec": {
                "podName": PODS.ref,
                "containers": [{"name": "c"}],
                "strategy": {
                    "failurePolicy": "Fail",
                    "orderedRecreate": False,
                    "forceRecreate": False,
                    "terminationGracePeriodSeconds": 1,
                    "unreadyGracePeriodSeconds": 0,
                    "minStartedSeconds": 1,
                },
                "activeDeadlineSeconds": 30,
                "ttlSecondsAfterFinished": 60,
            },
        },
    }


TEMPLATES = create_templates()
DELETE_OPTIONS = {
    "apiVersion": "v1",
    "kind": "DeleteOptions",
    "gracePeriodSeconds": 0,
    "preconditions": {"uid": WRONG_UID, "resourceVersion": STALE_RV},
    "propagationPolicy": "Background",
    "orphanDependents": False,
    "dryRun": ["All"],
}
EVICTION = {
    "apiVersion": "policy/v1",
    "kind": "Eviction",
    "metadata": {"name": PODS.ref, "namespace": NS},
    "deleteOptions": DELETE_OPTIONS,
}
METHODS_OTHER = st.sampled_from(["OPTIONS", "HEAD", "TRACE", "PROPFIND", "PURGE", "LINK", "MERGE"])
PATCH_TYPES = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
OTHER_TYPES = [
    "application/json",
    "application/apply-patch+yaml",
    "application/apply-patch+cbor",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
    "text/plain",
    "",
    "*/*",
    ";",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "APPLICATION/MERGE-PATCH+JSON",
    "application/merge-patch+json, application/json-patch+json",
]


def content_type_for(kind: str) -> st.SearchStrategy[str]:
    exact = PATCH_TYPES[kind]
    return st.one_of(
        st.just(exact),
        st.sampled_from([f"{exact}; charset=utf-8", f"{exact};q=0.5", f" {exact} "]),
        st.sampled_from(sorted(PATCH_TYPES.values())),
        st.sampled_from(OTHER_TYPES),
    )


HOSTILE_POINTERS = [
    "",
    "/",
    "//",
    "a",
    "metadata",
    "/~",
    "/~2",
    "/~01",
    "/metadata/~",
    "/metadata/labels/a~1b",
    "/spec/containers/-",
    "/spec/containers/-/image",
    "/spec/containers/01",
    "/spec/containers/-1",
    "/spec/containers/1",
    "/spec/containers/99999999999999999999",
    "/spec/containers/\u0661",
    "/spec/containers/0/image/x",
    "/metadata/name",
    "/metadata/namespace",
    "/metadata/uid",
    "/metadata/resourceVersion",
    "/metadata/finalizers/-",
    "/status/phase",
    "/kind",
    "/apiVersion",
    "/ü/ö",
    "/\x00",
]


@st.composite
def json_patch(draw: st.DrawFn, doc: dict[str, Any]) -> Any:
    pointers = [
        "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path) for path in _paths(doc)
    ]
    pointer = st.one_of(
        st.sampled_from(pointers[1:]),
        st.sampled_from(HOSTILE_POINTERS),
        st.text(max_size=10).map(lambda s: "/" + s),
        SCALARS,
        st.just([]),
    )
    op = st.fixed_dictionaries(
        {"op": st.one_of(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]), WRONG)},
        optional={"path": pointer, "from": pointer, "value": WRONG},
    )
    ops = draw(st.one_of(st.lists(op, max_size=5), st.lists(JSON, max_size=3), JSON))
    return guard_json_patch(ops)


def _subtree(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A patch that sets `path` of `doc` to `value`; list elements keep their merge key."""
    if not path:
        return value
    child = doc[path[0]]
    inner = _subtree(child, path[1:], value)
    if isinstance(doc, dict):
        return {path[0]: inner}
    if isinstance(child, dict) and isinstance(inner, dict):
        for key in ("name", "mountPath", "containerPort", "type", "ip", "key"):
            if key in child:
                return [{key: child[key], **inner}]
    return [inner]


DIRECTIVE_PATCHES = [
    {"$patch": "delete"},
    {"$patch": "replace"},
    {"$patch": "bogus"},
    {"$patch": None},
    {"metadata": {"$patch": "replace"}},
    {"metadata": {"$retainKeys": ["name"]}},
    {"$retainKeys": "x"},
    {"$retainKeys": ["metadata"], "spec": {}},
    {"metadata": {"finalizers": [{"a": 1}]}},
    {"metadata": {"finalizers": [{"$patch": "bogus"}]}},
    {"metadata": {"$deleteFromPrimitiveList/finalizers": "x"}},
    {"metadata": {"$setElementOrder/finalizers": 5}},
    {"spec": {"containers": [{"$patch": "delete", "name": "c"}]}},
    {"spec": {"containers": [{"$patch": "replace"}]}},
    {"spec": {"containers": [{"image": "x"}]}},
    {"spec": {"containers": ["c"]}},
    {"spec": {"containers": [{"name": "c", "$patch": "bogus"}]}},
    {"spec": {"$setElementOrder/containers": [{"name": "zzz"}, 5]}},
    {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "-1"}}}]}},
    {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "eighty"}]}]}},
    {"spec": {"containers": [{"name": "new", "image": "busybox:1.36"}]}},
    {"spec": {"tolerations": {"key": "k"}}},
    {"status": {"conditions": [{"type": None}]}},
    {"status": {"containerStatuses": [{"name": "c", "ready": "yes"}]}},
]


@st.composite
def merge_patch(draw: st.DrawFn, doc: dict[str, Any]) -> Any:
    choice = draw(st.integers(0, 4))
    if choice == 0:
        patch = draw(st.dictionaries(KEYS, JSON, max_size=4))
    elif choice == 1:
        patch = draw(mutated(doc))
    elif choice == 2:
        patch = _subtree(doc, draw(st.sampled_from(_paths(doc)[1:])), draw(WRONG))
    elif choice == 3:
        patch = copy.deepcopy(draw(st.sampled_from(DIRECTIVE_PATCHES)))
    else:
        patch = draw(JSON)
    return guard_update(patch)


# -- the tests -----------------------------------------------------------------------------------------

DISCOVERY = [
    "/api",
    "/api/v1",
    "/apis",
    "/apis/apps.kruise.io",
    KR1,
    KR2,
    "/apis/metrics.k8s.io",
    METRICS,
    "/version",
]
HEALTH = ["/healthz", "/readyz", "/livez"]
UNKNOWN = [
    "/",
    "/api/v2",
    "/api/v1/nopes",
    "/apis/nope.example.com",
    "/apis/apps.kruise.io/v9",
    "/apis/apps.kruise.io/v1alpha1/nopes",
    "/apis/apps/v1/deployments",
    "/openapi/v2",
    "/openapi/v3",
    "/metrics",
    "/api/v1/namespaces/default/pods/x/y/z",
    "/api/v1/namespaces/default/configmaps/x/status",
    "/api/v1/nodes/" + NODE + "/proxy",
    "/api/v1/namespaces/" + NS + "/finalize",
    "/api/v1/namespaces/" + NS + "/pods/ref-pod/exec",
    "/api/v1/namespaces/" + NS + "/pods/ref-pod/attach",
    "/api/v1/namespaces/" + NS + "/pods/ref-pod/binding",
    "/api/v1/namespaces/" + NS + "/pods/ref-pod/ephemeralcontainers",
    METRICS + "/nodes",
    METRICS + "/nodes/" + NODE,
    "/apis/apps.kruise.io/v1beta1/containerrecreaterequests",
]


@settings(FUZZ, max_examples=budget(250))
@given(
    path=st.one_of(
        st.sampled_from(DISCOVERY + HEALTH + UNKNOWN),
        st.sampled_from(DISCOVERY + HEALTH + UNKNOWN).flatmap(
            lambda p: NAMES.map(lambda n: f"{p.rstrip('/')}/{_quote(n)}")
        ),
    ),
    method=st.one_of(st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]), METHODS_OTHER),
    body=st.one_of(st.none(), GARBAGE, JSON.map(encode)),
    params=query(COMMON_QUERY),
)
def test_discovery_and_unknown_paths(cluster, ref, path, method, body, params):
    if method == "DELETE":  # should a random name ever spell a collection: match nothing there
        params = [("labelSelector", GUARD_SELECTOR), *params]
    reply = send(cluster, method, path, query=params, body=body, content_type="application/json")
    segments = [p for p in urllib.parse.unquote(path).split("/") if p]
    health = "/" + "/".join(segments) in HEALTH  # plain handlers: any method, as the real server's healthz
    check(reply, may_succeed=health or method in ("GET", "HEAD"))
    if (path in DISCOVERY and method == "GET") or health:
        assert reply.status == 200, str(reply)
    elif path in DISCOVERY and method not in ("HEAD",):
        assert reply.status == 405, f"discovery only serves GET: {reply}"


COLLECTIONS = [(kind, prefix) for kind in KINDS for prefix in kind.prefixes]


@settings(FUZZ, max_examples=budget(500))
@given(
    target=st.sampled_from(COLLECTIONS),
    scope=st.sampled_from(["here", "here", "all", "watch", "hostile"]),
    hostile_ns=NAMES,
    method=st.one_of(
        st.sampled_from(["GET", "GET", "POST", "POST", "PUT", "PATCH", "DELETE"]), METHODS_OTHER
    ),
    params=query(COMMON_QUERY, LIST_QUERY),
    data=st.data(),
)
def test_collections(cluster, ref, target, scope, hostile_ns, method, params, data):
    kind, prefix = target
    if scope == "hostile" and kind.namespaced:
        path = kind.collection(prefix, _quote(hostile_ns))
    elif scope == "all":
        path = kind.collection(prefix, None)
    elif scope == "watch":
        path = kind.collection(prefix.replace("/v1", "/v1/watch", 1) if prefix == CORE else f"{prefix}/watch")
    else:
        path = kind.collection(prefix)
    body: bytes | None = None
    if method == "POST":  # any object body is renamed onto the existing object: AlreadyExists at worst
        choice = data.draw(st.integers(0, 3))
        doc: Any = data.draw(mutated(TEMPLATES[kind.plural])) if choice <= 1 else data.draw(JSON)
        if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict):
            doc["metadata"]["name"] = kind.ref
            if choice == 1:
                doc["metadata"]["generateName"] = data.draw(NAMES)
        body = encode(doc)
        if choice == 3:
            body = data.draw(GARBAGE)
            if _decodes_to_object(body) and kind.namespaced and scope != "watch":
                path = kind.collection(prefix, "fuzz-missing-namespace")  # cannot be renamed: 404 at worst
            elif _decodes_to_object(body):
                body = b"{" + body  # nothing to aim it at: keep it unreadable
    elif method == "DELETE":  # a selector nothing matches, and a uid precondition nothing meets
        params = [("labelSelector", GUARD_SELECTOR), *params]
        body = encode(guard_delete(copy.deepcopy(DELETE_OPTIONS)))
    elif method in ("PUT", "PATCH"):
        body = encode(guard_update(data.draw(mutated(TEMPLATES[kind.plural]))))
    content_type = PATCH_TYPES["merge"] if method == "PATCH" else "application/json"
    reply = send(cluster, method, path, query=params, body=body, content_type=content_type)
    out = check(reply, may_succeed=method in ("GET", "HEAD", "DELETE"))
    if scope == "watch" and method not in ("GET", "HEAD"):
        assert reply.status == 405, f"a watch path only serves GET: {reply}"
    if method == "DELETE" and 200 <= reply.status < 300:
        assert out is not None and out.get("items") == [], f"a guarded delete removed something: {reply}"
    if method not in ("GET", "HEAD"):
        check_unchanged(cluster, ref, *AFFECTED[kind.plural])


def _body_for_write(data: st.DataObject, kind: Kind, doc: dict[str, Any], sub: str | None) -> bytes:
    choice = data.draw(st.integers(0, 5))
    if choice <= 2:
        base = doc
        if sub == "status" and data.draw(st.booleans()):
            base = {**doc, "status": data.draw(JSON)}
        return encode(guard_update(data.draw(mutated(base))))
    if choice == 3:
        return encode(guard_update(data.draw(JSON)))
    if choice == 4:
        return encode(guard_update(data.draw(mutated(TEMPLATES[kind.plural]))))
    return data.draw(UNGUARDABLE)


ITEM_TARGETS = [
    (kind, prefix, sub) for kind in KINDS for prefix in kind.prefixes for sub in (None, *kind.subresources)
]


@settings(FUZZ, max_examples=budget(500))
@given(target=st.sampled_from(ITEM_TARGETS), params=query(COMMON_QUERY), data=st.data())
def test_put_items_and_subresources(cluster, ref, target, params, data):
    kind, prefix, sub = target
    doc = ref.docs[kind.plural]
    path = kind.item(prefix, kind.ref) + (f"/{sub}" if sub else "")
    body = _body_for_write(data, kind, doc, sub)
    reply = send(cluster, "PUT", path, query=params, body=body, content_type="application/json")
    check(reply)
    check_unchanged(cluster, ref, *AFFECTED[kind.plural])


@settings(FUZZ, max_examples=budget(700))
@given(
    target=st.sampled_from(ITEM_TARGETS),
    patch_kind=st.sampled_from(sorted(PATCH_TYPES)),
    params=query(COMMON_QUERY),
    data=st.data(),
)
def test_patch_items_and_subresources(cluster, ref, target, patch_kind, params, data):
    kind, prefix, sub = target
    doc = ref.docs[kind.plural]
    path = kind.item(prefix, kind.ref) + (f"/{sub}" if sub else "")
    if data.draw(st.integers(0, 9)) == 0:
        body = data.draw(UNGUARDABLE)
    elif patch_kind == "json":
        body = encode(data.draw(json_patch(doc)))
    else:
        body = encode(data.draw(merge_patch(doc)))
    content_type = data.draw(content_type_for(patch_kind))
    reply = send(cluster, "PATCH", path, query=params, body=body, content_type=content_type)
    check(reply)
    check_unchanged(cluster, ref, *AFFECTED[kind.plural])


@settings(FUZZ, max_examples=budget(300))
@given(
    target=st.sampled_from(ITEM_TARGETS),
    params=query(COMMON_QUERY),
    body=st.one_of(
        mutated(DELETE_OPTIONS).map(guard_delete).map(encode),
        JSON.map(guard_delete).map(encode),
        UNGUARDABLE,
    ),
)
def test_delete_items(cluster, ref, target, params, body):
    kind, prefix, sub = target
    path = kind.item(prefix, kind.ref) + (f"/{sub}" if sub else "")
    reply = send(cluster, "DELETE", path, query=params, body=body, content_type="application/json")
    check(reply)
    check_unchanged(cluster, ref, *AFFECTED[kind.plural])


@settings(FUZZ, max_examples=budget(250))
@given(
    name=st.one_of(st.just(PODS.ref), NAMES),
    method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT", "PATCH", "DELETE"]),
    params=query(COMMON_QUERY),
    body=st.one_of(
        mutated(EVICTION).map(guard_delete).map(encode),
        JSON.map(guard_delete).map(encode),
        UNGUARDABLE,
    ),
)
def test_pod_eviction(cluster, ref, name, method, params, body):
    path = PODS.item(CORE, _quote(name)) + "/eviction"
    reply = send(cluster, method, path, query=params, body=body, content_type="application/json")
    check(reply)
    check_unchanged(cluster, ref, "pod")


@settings(FUZZ, max_examples=budget(350))
@given(
    target=st.sampled_from(KINDS),
    name=NAMES,
    raw=st.booleans(),
    sub=st.sampled_from([None, None, "status", "resize", "log", "eviction", "scale", "", "..", "%2F"]),
    method=st.one_of(st.sampled_from(["GET", "PUT", "PATCH", "DELETE", "POST"]), METHODS_OTHER),
    params=query(COMMON_QUERY),
    data=st.data(),
)
def test_hostile_names(cluster, ref, target, name, raw, sub, method, params, data):
    kind = target
    prefix = data.draw(st.sampled_from(kind.prefixes))
    path = kind.item(prefix, segment(name, raw)) + (f"/{segment(sub, raw)}" if sub is not None else "")
    body: Any = {
        "metadata": {"name": name, "namespace": NS, "resourceVersion": STALE_RV},
        "preconditions": {"uid": WRONG_UID},
        "deleteOptions": {"preconditions": {"uid": WRONG_UID}},
    }
    content_type = "application/json"
    if method == "PATCH":
        patch_kind = data.draw(st.sampled_from(sorted(PATCH_TYPES)))
        content_type = PATCH_TYPES[patch_kind]
        if patch_kind == "json":
            body = guard_json_patch([{"op": "add", "path": "/metadata/labels", "value": {"fuzz": "x"}}])
    if method == "DELETE":  # an empty name, or a raw "%2F", reaches the collection: match nothing there
        params = [("labelSelector", GUARD_SELECTOR), *params]
    reply = send(cluster, method, path, query=params, body=encode(body), content_type=content_type)
    out = check(reply, may_succeed=method in ("GET", "HEAD", "DELETE"))
    if method == "DELETE" and 200 <= reply.status < 300:
        assert out is not None and out.get("items") == [], f"a guarded delete removed something: {reply}"
    if method not in ("GET", "HEAD"):
        check_unchanged(cluster, ref, *AFFECTED[kind.plural])


@settings(FUZZ, max_examples=budget(300))
@given(
    name=st.one_of(st.just(PODS.ref), st.just(PODS.ref), NAMES),
    method=st.sampled_from(["GET", "GET", "GET", "GET", "POST", "PUT", "PATCH", "DELETE"]),
    params=query(LOG_QUERY, COMMON_QUERY),
    body=st.one_of(st.none(), GARBAGE),
)
def test_pod_log(cluster, ref, name, method, params, body):
    path = PODS.item(CORE, _quote(name)) + "/log"
    reply = send(cluster, method, path, query=params, body=body, content_type="application/json")
    check(reply, may_succeed=method == "GET")
    if method != "GET":
        check_unchanged(cluster, ref, "pod")


@settings(FUZZ, max_examples=budget(200))
@given(
    path=st.one_of(
        st.sampled_from(
            [
                f"{METRICS}/pods",
                f"{METRICS}/namespaces/{NS}/pods",
                f"{METRICS}/namespaces/{NS}/pods/{PODS.ref}",
                f"{METRICS}/namespaces/{NS}/pods/{PODS.ref}/status",
                f"{METRICS}/namespaces/{NS}/nodes",
                f"{METRICS}/nodes/{NODE}",
            ]
        ),
        NAMES.map(lambda n: f"{METRICS}/namespaces/{NS}/pods/{_quote(n)}"),
        NAMES.map(lambda n: f"{METRICS}/namespaces/{_quote(n)}/pods"),
    ),
    method=st.one_of(st.sampled_from(["GET", "GET", "POST", "PUT", "PATCH", "DELETE"]), METHODS_OTHER),
    params=query(LIST_QUERY, COMMON_QUERY),
    body=st.one_of(st.none(), GARBAGE, JSON.map(encode)),
)
def test_metrics(cluster, ref, path, method, params, body):
    if method == "DELETE":
        params = [("labelSelector", GUARD_SELECTOR), *params]
    reply = send(cluster, method, path, query=params, body=body, content_type="application/json")
    check(reply, may_succeed=method in ("GET", "HEAD"))


def _request_handlers(cluster: Any) -> int:
    """How many HTTP requests the server is still serving (its request handler tasks)."""

    def count() -> int:
        return sum(
            1 for t in asyncio.all_tasks() if "_handle_request" in getattr(t.get_coro(), "__qualname__", "")
        )

    return cluster.call(count)


@settings(FUZZ, max_examples=budget(15))
@given(
    streams=st.lists(
        st.one_of(
            query(LOG_QUERY).map(lambda q: (f"{PODS.item(CORE, PODS.ref)}/log", [("follow", "true"), *q])),
            query(LIST_QUERY).map(lambda q: (CONFIGMAPS.collection(CORE), [("watch", "true"), *q])),
            query(LIST_QUERY).map(lambda q: (f"{CORE}/watch/namespaces/{NS}/pods", q)),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_abandoned_streams_end(cluster, ref, streams):
    """A client that hangs up on a watch or a log follow (valid or not) leaves nothing running behind."""
    before = _request_handlers(cluster)
    for path, params in streams:
        check(send(cluster, "GET", path, query=params), may_succeed=True)  # streams are closed unread
    deadline = time.monotonic() + 5
    while _request_handlers(cluster) > before:
        assert time.monotonic() < deadline, (
            f"{_request_handlers(cluster) - before} abandoned requests still run"
        )
        time.sleep(0.02)


def test_valid_requests_still_work_and_references_are_intact(cluster, ref):
    """After all the fuzzing: the reference objects are unchanged and ordinary requests answer as before."""
    check_pristine(cluster, ref)
    assert send(cluster, "GET", f"{PODS.item(CORE, PODS.ref)}/log", query=[("container", "c")]).status == 200
    listed = _get(cluster, CONFIGMAPS.collection(CORE) + "?labelSelector=app!%3Dnone")
    assert [i["metadata"]["name"] for i in listed["items"]] == [CONFIGMAPS.ref]
    metrics = _get(cluster, f"{METRICS}/namespaces/{NS}/pods/{PODS.ref}")
    assert metrics["kind"] == "PodMetrics"
    patched = send(
        cluster,
        "PATCH",
        CONFIGMAPS.item(CORE, CONFIGMAPS.ref),
        query=[("dryRun", "All")],
        body=encode({"data": {"k": "w"}}),
        content_type=PATCH_TYPES["merge"],
    )
    assert patched.status == 200 and json.loads(patched.body or b"{}")["data"] == {"k": "w"}, str(patched)
    check_pristine(cluster, ref)
