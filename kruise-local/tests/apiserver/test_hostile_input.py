"""Hostile requests against the local API server: each is bounded as kube-apiserver bounds it.

JSON patch amplification (`endpoints/handlers/patch.go` `maxJSONPatchOperations`, evanphx/json-patch
`AccumulatedCopySizeLimit` = `server/config.go` `JSONPatchMaxCopyBytes`), etcd's object size limit, names and
label values with a trailing newline (Go's regexp `$` never matches before a final newline), continue tokens
(`storage/continue.go` `DecodeContinue`), watchers that fall behind (`storage/cacher/cache_watcher.go`),
request timeouts and in-flight limits (`server/filters/timeout.go`, `maxinflight.go`) and idle or half-sent
connections (`server/secure_serving.go` `IdleTimeout`).
"""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
from kruise_local import ClusterConfig, LocalCluster, limits
from kruise_local import resources as R
from kruise_local.limits import WATCH_CHANNEL_SIZE
from kruise_local.testing import wait_for
from kubernetes.client import ApiException


def cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def raw(cluster: LocalCluster, method: str, path: str, body: bytes | None = None, ctype: str = "") -> tuple:
    req = urllib.request.Request(f"{cluster.url}{path}", data=body, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# -- JSON patch amplification (CVE-2019-1002100) ---------------------------------------------------------


def test_doubling_copy_patch_is_refused_at_the_copy_limit(core, namespace):
    core.create_namespaced_config_map(namespace, cm("amp", a="x"))
    # 3 KB of patch: each copy appends the whole list to itself, doubling it (2^45 elements unbounded)
    ops = [{"op": "add", "path": "/data/l", "value": ["A" * 64]}]
    ops += [{"op": "copy", "from": "/data/l", "path": "/data/l/-"}] * 45
    assert len(json.dumps(ops)) < 3000
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("amp", namespace, ops)  # a list body: application/json-patch+json
    assert err.value.status == 422
    message = json.loads(err.value.body)["message"]
    assert "accumulated size increase of copy" in message and "exceeding the limit 3145728" in message
    after = core.read_namespaced_config_map("amp", namespace)
    assert after.data == {"a": "x"}


def test_copies_within_the_limit_still_apply(core, namespace):
    core.create_namespaced_config_map(namespace, cm("copies", a="y" * 1000))
    ops = [{"op": "copy", "from": "/data/a", "path": f"/data/k{i}"} for i in range(100)]
    out = core.patch_namespaced_config_map("copies", namespace, ops)
    assert len(out.data) == 101 and out.data["k99"] == "y" * 1000


def test_more_than_10000_json_patch_operations_is_413(core, namespace, cluster):
    core.create_namespaced_config_map(namespace, cm("ops", a="1"))
    path = f"/api/v1/namespaces/{namespace}/configmaps/ops"
    test_op = {"op": "test", "path": "/data/a", "value": "1"}
    code, status = raw(
        cluster, "PATCH", path, json.dumps([test_op] * 10_001).encode(), "application/json-patch+json"
    )
    assert code == 413 and status["reason"] == "RequestEntityTooLarge"
    assert status["message"] == "The allowed maximum operations in a JSON patch is 10000, got 10001"
    code, _ = raw(
        cluster, "PATCH", path, json.dumps([test_op] * 10_000).encode(), "application/json-patch+json"
    )
    assert code == 200


def test_an_object_larger_than_etcd_accepts_is_not_stored(core, namespace, cluster):
    # an Event's message has no length limit of its own: etcd's 1.5 MiB request limit is what stops it
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "big"},
        "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": namespace},
        "reason": "Big",
        "message": "m" * (2 * 1024 * 1024),
    }
    code, status = raw(
        cluster,
        "POST",
        f"/api/v1/namespaces/{namespace}/events",
        json.dumps(event).encode(),
        "application/json",
    )
    assert code == 500 and status["message"] == "etcdserver: request is too large"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_event("big", namespace)
    assert err.value.status == 404


def test_unknown_fields_are_dropped_not_stored(core, custom, namespace, cluster):
    body = cm("unknown", a="1")
    body["metadata"]["bogus"] = "x" * 1000
    body["junk"] = {"deep": ["y" * 1000]}
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    code, created = raw(cluster, "POST", path, json.dumps(body).encode(), "application/json")
    assert code == 201 and "junk" not in created and "bogus" not in created["metadata"]
    ops = [{"op": "add", "path": "/junk", "value": "z"}, {"op": "add", "path": "/data/b", "value": "2"}]
    code, patched = raw(
        cluster, "PATCH", f"{path}/unknown", json.dumps(ops).encode(), "application/json-patch+json"
    )
    assert code == 200 and "junk" not in patched and patched["data"] == {"a": "1", "b": "2"}
    stored = cluster.call(lambda: cluster.store.get(R.CONFIGMAPS, namespace, "unknown"))
    assert "junk" not in stored and "bogus" not in stored["metadata"]
    job = {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {"name": "pruned"},
        "spec": {"image": "busybox:1.36", "selector": {"names": ["kruise-local"]}, "extra": {"x": 1}},
    }
    out = custom.create_namespaced_custom_object("apps.kruise.io", "v1beta1", namespace, "imagepulljobs", job)
    assert "extra" not in out["spec"] and out["spec"]["image"] == "busybox:1.36"


# -- a trailing newline is not a valid name, label value or annotation key ---------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        {"name": "nl\n"},
        {"name": "nl", "labels": {"app": "v\n"}},
        {"name": "nl", "labels": {"app\n": "v"}},
        {"name": "nl", "annotations": {"example.com/a\n": "v"}},
    ],
    ids=["name", "label-value", "label-key", "annotation-key"],
)
def test_a_trailing_newline_is_refused(core, namespace, meta):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(namespace, {"metadata": meta, "data": {"a": "b"}})
    assert err.value.status == 422
    assert core.list_namespaced_config_map(namespace).items == []


# -- continue tokens -------------------------------------------------------------------------------------


def test_paging_returns_every_item_once(core, namespace):
    for i in range(7):
        core.create_namespaced_config_map(namespace, cm(f"p{i}"))
    names, token = [], None
    while True:
        page = core.list_namespaced_config_map(namespace, limit=3, _continue=token)
        names += [o.metadata.name for o in page.items]
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert names == [f"p{i}" for i in range(7)]


def _token(**fields: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(fields).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "token",
    [
        "not a token",
        base64.urlsafe_b64encode(b"-3").decode(),  # a number: the old local token format
        _token(v="meta.k8s.io/v2", rv=5, start="a"),
        _token(v="meta.k8s.io/v1", rv=0, start="a"),
        _token(v="meta.k8s.io/v1", rv=5, start=""),
        _token(v="meta.k8s.io/v1", rv=5, start="../kube-system/x"),
        _token(v="meta.k8s.io/v1", rv=5, start="./a"),
    ],
)
def test_a_bad_continue_token_is_400_never_a_page(core, namespace, token):
    core.create_namespaced_config_map(namespace, cm("c0"))
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(namespace, limit=1, _continue=token)
    assert err.value.status == 400
    assert "invalid continue token" in json.loads(err.value.body)["message"]


def test_a_continue_token_older_than_the_history_is_410(core, namespace, cluster):
    for i in range(3):
        core.create_namespaced_config_map(namespace, cm(f"e{i}"))
    token = core.list_namespaced_config_map(namespace, limit=1).metadata._continue
    cluster.call(lambda: cluster.store.set_history_limit(2))
    try:
        for i in range(5):
            core.create_namespaced_config_map(namespace, cm(f"later{i}"))
        with pytest.raises(ApiException) as err:
            core.list_namespaced_config_map(namespace, limit=1, _continue=token)
    finally:
        cluster.call(lambda: cluster.store.set_history_limit(5000))
    assert err.value.status == 410 and json.loads(err.value.body)["reason"] == "Expired"


# -- watches, requests and connections that hold on ------------------------------------------------------


def test_a_watcher_that_does_not_read_is_closed_not_buffered(core, namespace, cluster):
    core.create_namespaced_config_map(namespace, cm("w", a="0"))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = urllib.parse.urlparse(cluster.url).netloc.split(":")
    sock.connect((host, int(port)))
    path = f"/api/v1/namespaces/{namespace}/configmaps?watch=true&timeoutSeconds=600"
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    try:
        watcher = wait_for(lambda: cluster.call(lambda: cluster.store.watchers(R.CONFIGMAPS)), what="watch")[
            0
        ]
        payload = "p" * 4000

        def flood() -> None:
            obj = cluster.store.get(R.CONFIGMAPS, namespace, "w")
            for i in range(3 * WATCH_CHANNEL_SIZE):
                obj["data"] = {"a": f"{i}{payload}"}
                obj = cluster.store.update(R.CONFIGMAPS, obj, check_rv=False)

        cluster.call(flood)
        assert watcher.terminated
        assert watcher.queue.qsize() <= WATCH_CHANNEL_SIZE + 1  # never more than the channel's worth
        assert (
            core.read_namespaced_config_map("w", namespace)
            .data["a"]
            .startswith(str(3 * WATCH_CHANNEL_SIZE - 1))
        )
    finally:
        sock.close()


def test_a_watch_without_timeout_seconds_ends_between_30_and_60_minutes(monkeypatch):
    """`ListResource`: `minRequestTimeout * (rand + 1)`, so idle watches do not all end at once."""
    for draw in (0.0, 0.5, 0.999):
        monkeypatch.setattr(limits.random, "random", lambda d=draw: d)
        assert limits.watch_timeout(None) == 1800 * (1 + draw)
        assert limits.watch_timeout(0) == 1800 * (1 + draw)
    assert limits.watch_timeout(7) == 7.0


def test_a_negative_timeout_ends_the_watch_at_once(cluster, namespace):
    """`ListResource`: a negative `timeoutSeconds` is a timer that has already fired (it hung 30-60 min)."""
    path = f"/api/v1/namespaces/{namespace}/configmaps?watch=1&timeoutSeconds=-5"
    with urllib.request.urlopen(cluster.url + path, timeout=30) as resp:
        assert resp.status == 200 and resp.read() == b""


@pytest.fixture
def strict_cluster(tmp_path, request) -> Iterator[LocalCluster]:
    """A cluster with short request and idle timeouts and room for one request at a time."""
    timeout = getattr(request, "param", 1.0)
    c = LocalCluster(
        ClusterConfig(root=str(tmp_path), request_timeout=timeout, idle_timeout=1.0, max_requests_in_flight=1)
    )
    c.start()
    yield c
    c.stop()


def _connect(cluster: LocalCluster) -> socket.socket:
    host, port = urllib.parse.urlparse(cluster.url).netloc.split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_request_whose_body_never_arrives_times_out_with_504(strict_cluster):
    sock = _connect(strict_cluster)
    with sock:
        sock.sendall(
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{"
        )
        answer = _read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 504")
    assert json.loads(body)["reason"] == "Timeout"


@pytest.mark.parametrize("strict_cluster", [60.0], indirect=True)
def test_requests_beyond_the_in_flight_limit_are_429(strict_cluster):
    slow = _connect(strict_cluster)
    with slow:
        slow.sendall(
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"
        )
        path = "/api/v1/namespaces/default/configmaps"
        _, status = wait_for(lambda: (r := raw(strict_cluster, "GET", path))[0] == 429 and r, what="a 429")
        assert status["reason"] == "TooManyRequests"
    # the slot is given back when the slow request ends (its client hung up)
    wait_for(lambda: raw(strict_cluster, "GET", path)[0] == 200, what="a 200 again")


def test_an_idle_or_half_sent_connection_is_closed(strict_cluster):
    idle, half = _connect(strict_cluster), _connect(strict_cluster)
    with idle, half:
        half.sendall(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        assert _read_all(idle) == b""  # closed by the server, not by the 30 s socket timeout
        assert _read_all(half) == b""
