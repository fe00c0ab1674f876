"""API machinery of the local cluster: resourceVersion, patches, selectors, watches, errors, finalizers."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from kruise_local.testing import wait_for
from kubernetes import watch
from kubernetes.client import ApiException


def cm(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_stale_update_is_a_409_conflict(core, namespace):
    created = core.create_namespaced_config_map(namespace, cm("c", a="1"))
    core.patch_namespaced_config_map("c", namespace, {"data": {"a": "2"}})
    created.data = {"a": "3"}
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("c", namespace, created)
    assert err.value.status == 409
    assert json.loads(err.value.body)["reason"] == "Conflict"
    assert core.read_namespaced_config_map("c", namespace).data == {"a": "2"}


def test_create_twice_is_already_exists(core, namespace):
    core.create_namespaced_config_map(namespace, cm("c"))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(namespace, cm("c"))
    assert err.value.status == 409 and json.loads(err.value.body)["reason"] == "AlreadyExists"


def test_missing_object_is_a_404_status(core, namespace):
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("nope", namespace)
    body = json.loads(err.value.body)
    assert (err.value.status, body["kind"], body["reason"]) == (404, "Status", "NotFound")


def test_strategic_merge_patch_merges_containers_by_name(core, namespace):
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "busybox:1.36", "command": ["sleep", "30"]},
                    {"name": "b", "image": "busybox:1.36", "command": ["sleep", "30"]},
                ]
            },
        },
    )
    pod = core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "b", "image": "alpine:3.20"}]}}
    )
    assert [(c.name, c.image) for c in pod.spec.containers] == [("a", "busybox:1.36"), ("b", "alpine:3.20")]


def test_json_merge_patch_and_json_patch(core, namespace, api_client):
    core.create_namespaced_config_map(namespace, cm("c", a="1", b="2"))
    core.patch_namespaced_config_map(
        "c", namespace, {"data": {"a": None}}, _content_type="application/merge-patch+json"
    )
    assert core.read_namespaced_config_map("c", namespace).data == {"b": "2"}
    ops = [{"op": "add", "path": "/data/z", "value": "26"}, {"op": "test", "path": "/data/b", "value": "2"}]
    core.patch_namespaced_config_map("c", namespace, ops)  # a list body is sent as json-patch
    assert core.read_namespaced_config_map("c", namespace).data == {"b": "2", "z": "26"}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", namespace, [{"op": "test", "path": "/data/b", "value": "9"}])
    assert err.value.status == 422
    assert core.read_namespaced_config_map("c", namespace).data == {"b": "2", "z": "26"}


def test_label_and_field_selectors(core, namespace):
    for name, tier in (("x", "web"), ("y", "db"), ("z", "web")):
        body = cm(name)
        body["metadata"]["labels"] = {"tier": tier}
        core.create_namespaced_config_map(namespace, body)
    names = lambda **kw: [i.metadata.name for i in core.list_namespaced_config_map(namespace, **kw).items]  # noqa: E731
    assert names(label_selector="tier=web") == ["x", "z"]
    assert names(label_selector="tier in (db),tier!=web") == ["y"]
    assert names(field_selector="metadata.name=y") == ["y"]
    assert names(field_selector="metadata.name!=y", label_selector="tier") == ["x", "z"]
    with pytest.raises(ApiException) as err:
        names(field_selector="data.a=1")
    assert err.value.status == 400


def test_pod_field_selectors_node_and_phase(core, namespace, cluster):
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "p"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["true"]}],
            },
        },
    )
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Succeeded", what="Succeeded")
    node = core.read_namespaced_pod("p", namespace).spec.node_name
    found = core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node},status.phase=Succeeded")
    assert [p.metadata.name for p in found.items] == ["p"]
    assert core.list_namespaced_pod(namespace, field_selector="status.phase=Running").items == []


def test_watch_added_modified_deleted_and_bookmark(core, namespace):
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    seen: list[tuple[str, str]] = []

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(
            core.list_namespaced_config_map,
            namespace,
            resource_version=rv,
            timeout_seconds=5,
            allow_watch_bookmarks=True,
        ):
            seen.append((ev["type"], ev["object"].metadata.name))
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=consume)
    t.start()
    core.create_namespaced_config_map(namespace, cm("w", a="1"))
    core.patch_namespaced_config_map("w", namespace, {"data": {"a": "2"}})
    core.delete_namespaced_config_map("w", namespace)
    t.join(10)
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_sends_bookmarks(namespace, cluster):
    cluster.bookmark_interval = 0.2
    try:
        url = (
            f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps?watch=true&allowWatchBookmarks=true"
            "&timeoutSeconds=1"
        )
        with urllib.request.urlopen(url, timeout=10) as resp:
            lines = [json.loads(x) for x in resp.read().decode().splitlines() if x.strip()]
    finally:
        cluster.bookmark_interval = 5.0
    assert lines and all(e["type"] == "BOOKMARK" for e in lines)
    assert int(lines[-1]["object"]["metadata"]["resourceVersion"]) > 0


def test_watch_from_an_expired_resource_version_is_410_gone(core, namespace, cluster):
    rv = core.list_namespaced_config_map(namespace).metadata.resource_version
    cluster.call(lambda: cluster.store.set_history_limit(5))
    try:
        for i in range(10):
            core.create_namespaced_config_map(namespace, cm(f"g{i}"))
        with pytest.raises(ApiException) as err:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=2
            ):
                pass
    finally:
        cluster.call(lambda: cluster.store.set_history_limit(5000))
    assert err.value.status == 410


def test_finalizers_hold_deletion_until_removed(core, namespace):
    body = cm("f")
    body["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_config_map(namespace, body)
    core.delete_namespaced_config_map("f", namespace)
    held = core.read_namespaced_config_map("f", namespace)
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("f", namespace, {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("f", namespace)
    assert err.value.status == 404


def test_malformed_body_is_a_400_status(namespace, cluster):
    req = urllib.request.Request(
        f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps",
        data=b"{not json",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400 and json.loads(err.value.read())["kind"] == "Status"


def test_pod_create_validation_names_the_fields(core, namespace):
    bad = {
        "metadata": {"name": "Bad_Name"},
        "spec": {"containers": [{"name": "c", "image": ""}, {"name": "c", "image": "busybox:1.36"}]},
    }
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(namespace, bad)
    body = json.loads(err.value.body)
    assert err.value.status == 422
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"metadata.name", "spec.containers[0].image", "spec.containers[1].name"} <= fields
