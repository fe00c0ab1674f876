"""What ordinary clients rely on: Status details, content types, token kubeconfigs, the update path's order,
timestamps compared as times, finalizers on pods and the deletion timestamp."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from kruise_local.testing import container, pod_body, wait_for
from kubernetes.client import ApiException


def _raw(cluster, path: str, method: str = "GET", body: bytes | None = None, **headers: str):
    req = urllib.request.Request(f"{cluster.url}{path}", data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/namespaces/default/pods/nope",  # an object that does not exist
        "/api/v1/namespaces/default/nothings",  # a resource that does not exist
        "/apis/no.such.group/v1/things",  # a group that does not exist
    ],
)
def test_every_error_status_carries_details(cluster, path):
    """apimachinery `errors.NewNotFound` always sets `Details` (kubectl debug dereferences it)."""
    code, _, body = _raw(cluster, path)
    status = json.loads(body)
    assert code == 404 and status["kind"] == "Status" and isinstance(status["details"], dict)


def test_not_found_details_name_the_object(cluster):
    _, _, body = _raw(cluster, "/api/v1/namespaces/default/pods/nope")
    assert json.loads(body)["details"] == {"name": "nope", "kind": "pods"}


def test_content_type_is_plain_application_json(cluster):
    """The real server answers `application/json` with no charset parameter (lightkube compares it)."""
    for path in ("/api/v1/namespaces/default/pods/nope", "/api/v1/namespaces", "/version"):
        _, headers, _ = _raw(cluster, path)
        assert headers["Content-Type"] == "application/json", path


def test_generated_kubeconfig_uses_a_bearer_token(cluster, tmp_path):
    config = yaml.safe_load(cluster.write_kubeconfig(tmp_path / "k").read_text())
    user = config["users"][0]["user"]
    assert set(user) == {"token"} and user["token"]


def test_replace_of_a_read_pod_keeps_its_creation_timestamp(core, namespace):
    """The client writes times as `+00:00`: `rest.BeforeUpdate` ignores changes to creationTimestamp (it
    keeps the stored one) before validation, so the replace is no 422."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    for _ in range(20):  # status writes may race the read-modify-write: retry a 409 as clients do
        pod = core.read_namespaced_pod("p", namespace)
        pod.metadata.labels = {"changed": "yes"}
        try:
            replaced = core.replace_namespaced_pod("p", namespace, pod)
            break
        except ApiException as e:
            if e.status != 409:
                raise
    assert replaced.metadata.labels == {"changed": "yes"}
    assert replaced.metadata.creation_timestamp == pod.metadata.creation_timestamp


def test_a_changed_creation_timestamp_is_ignored(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "c"}})
    cm = core.read_namespaced_config_map("c", namespace)
    created = cm.metadata.creation_timestamp
    cm.metadata.creation_timestamp = created - timedelta(days=1)
    cm.data = {"a": "1"}
    replaced = core.replace_namespaced_config_map("c", namespace, cm)
    assert (replaced.data, replaced.metadata.creation_timestamp) == ({"a": "1"}, created)


def test_stale_update_that_is_also_invalid_is_a_409(core, namespace):
    """`registry/generic/registry/store.go` `Update`: the resourceVersion is compared inside
    GuaranteedUpdate before `rest.BeforeUpdate` validates the object."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    stale = core.read_namespaced_pod("p", namespace)
    core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"a": "b"}}})
    stale.spec.containers[0].command = ["/bin/sh", "-c", "changed"]  # forbidden pod update: a 422 alone
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("p", namespace, stale)
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "Conflict"


def _parse(ts) -> datetime:
    return ts if isinstance(ts, datetime) else datetime.fromisoformat(ts.replace("Z", "+00:00"))


def test_deletion_timestamp_is_request_time_plus_grace(core, namespace):
    """`rest.BeforeDelete`: deletionTimestamp = now + gracePeriodSeconds."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 300")))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).spec.node_name, what="scheduled")
    before = datetime.now(UTC).replace(microsecond=0)
    deleted = core.delete_namespaced_pod("p", namespace, grace_period_seconds=100)
    after = datetime.now(UTC)
    ts = _parse(deleted.metadata.deletion_timestamp)
    assert before + timedelta(seconds=100) <= ts <= after + timedelta(seconds=100)
    assert deleted.metadata.deletion_grace_period_seconds == 100


def test_pod_with_a_finalizer_waits_for_it(core, namespace):
    """A pod's final (grace 0) delete keeps it, with deletionTimestamp, while finalizers remain; removing the
    last one deletes it (`registry.Store` `Update`: ShouldDeleteDuringUpdate)."""
    body = pod_body("p", container("c", "sleep 300"))
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Running", what="Running")
    core.delete_namespaced_pod("p", namespace, grace_period_seconds=1)

    def terminated() -> bool:
        pod = core.read_namespaced_pod("p", namespace)
        return pod.metadata.deletion_grace_period_seconds == 0

    wait_for(terminated, what="the kubelet's final delete")
    held = core.read_namespaced_pod("p", namespace)
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["example.com/hold"]
    core.patch_namespaced_pod("p", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", namespace)
    assert err.value.status == 404


def test_unscheduled_pod_with_a_finalizer_waits_for_it(core, namespace):
    body = pod_body("p", container("c", "sleep 300"), nodeSelector={"no-such": "node"})
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod(namespace, body)
    core.delete_namespaced_pod("p", namespace)
    assert core.read_namespaced_pod("p", namespace).metadata.deletion_timestamp is not None
    core.patch_namespaced_pod("p", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("p", namespace)
    assert err.value.status == 404


def test_watch_list_sends_initial_events_then_the_end_bookmark(cluster, core, namespace):
    """KEP-3157 (client-go WatchListClient, kubectl 1.35+): the existing objects as ADDED, then a BOOKMARK
    annotated `k8s.io/initial-events-end`, then changes."""
    for name in ("a", "b"):
        core.create_namespaced_config_map(namespace, {"metadata": {"name": name}})
    query = "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
    url = f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps?{query}&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=10) as resp:
        events = [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events[:3]] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("BOOKMARK", None),
    ]
    assert events[2]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert int(events[2]["object"]["metadata"]["resourceVersion"]) >= int(
        events[1]["object"]["metadata"]["resourceVersion"]
    )


def test_watch_list_needs_not_older_than_and_bookmarks(cluster, namespace):
    code, _, body = _raw(
        cluster, f"/api/v1/namespaces/{namespace}/configmaps?watch=true&sendInitialEvents=true"
    )
    status = json.loads(body)
    assert (
        code == 422
        and "resourceVersionMatch" in status["message"]
        and "allowWatchBookmarks" in status["message"]
    )


@pytest.mark.parametrize(
    ("directive", "code", "warning"),
    [
        ("Strict", 400, None),
        ("Warn", 201, '299 - "unknown field \\"spec.containers[0].imagee\\""'),
        ("", 201, '299 - "unknown field \\"spec.containers[0].imagee\\""'),  # Warn is the default
        ("Ignore", 201, None),
        ("Loose", 400, None),
    ],
)
def test_field_validation(cluster, namespace, directive, code, warning):
    """`fieldValidation` (kubectl sends Strict once the OpenAPI document says the server takes it)."""
    pod = pod_body("p", container("c", "sleep 1"))
    pod["spec"]["containers"][0]["imagee"] = "typo"
    query = f"?fieldValidation={directive}" if directive else ""
    got, headers, body = _raw(
        cluster,
        f"/api/v1/namespaces/{namespace}/pods{query}",
        "POST",
        json.dumps(pod).encode(),
        **{"Content-Type": "application/json"},
    )
    assert got == code
    assert headers.get("Warning") == warning
    if directive == "Strict":
        assert (
            json.loads(body)["message"] == 'strict decoding error: unknown field "spec.containers[0].imagee"'
        )


def test_strict_replace_of_a_read_object_passes(core, namespace):
    """The server's own fields (status, defaults, managedFields) are all known to its schema."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Running", what="Running")
    for _ in range(20):
        pod = core.read_namespaced_pod("p", namespace)
        pod.metadata.labels = {"x": "y"}
        try:
            core.replace_namespaced_pod("p", namespace, pod, field_validation="Strict")
            break
        except ApiException as e:
            if e.status != 409:
                raise
    assert core.read_namespaced_pod("p", namespace).metadata.labels == {"x": "y"}
