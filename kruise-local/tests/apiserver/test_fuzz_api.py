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
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fuzz_api_bodies import (
    DELETE_OPTIONS,
    EVICTION,
    GARBAGE,
    METHODS_OTHER,
    PATCH_TYPES,
    TEMPLATES,
    UNGUARDABLE,
    content_type_for,
    decodes_to_object,
    encode,
    guard_delete,
    guard_json_patch,
    guard_update,
    json_patch,
    merge_patch,
)
from fuzz_api_kit import (
    CONFIGMAPS,
    CORE,
    CRRS,
    EVENTS,
    FUZZ,
    GUARD_SELECTOR,
    IPJS,
    KINDS,
    KR1,
    KR2,
    METRICS,
    NAMESPACES,
    NODE,
    NODE_IMAGES,
    NODES,
    NS,
    PODS,
    REFERENCE_PATHS,
    STALE_RV,
    WRONG_UID,
    Kind,
    Reference,
    budget,
    check,
    check_pristine,
    check_unchanged,
    send,
)
from fuzz_api_values import COMMON_QUERY, JSON, LIST_QUERY, LOG_QUERY, NAMES, mutated, query, quote, segment
from hypothesis import given, settings
from hypothesis import strategies as st

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
            lambda p: NAMES.map(lambda n: f"{p.rstrip('/')}/{quote(n)}")
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
        path = kind.collection(prefix, quote(hostile_ns))
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
            if decodes_to_object(body) and kind.namespaced and scope != "watch":
                path = kind.collection(prefix, "fuzz-missing-namespace")  # cannot be renamed: 404 at worst
            elif decodes_to_object(body):
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
    path = PODS.item(CORE, quote(name)) + "/eviction"
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
    path = PODS.item(CORE, quote(name)) + "/log"
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
        NAMES.map(lambda n: f"{METRICS}/namespaces/{NS}/pods/{quote(n)}"),
        NAMES.map(lambda n: f"{METRICS}/namespaces/{quote(n)}/pods"),
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
