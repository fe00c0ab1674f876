"""Smoke tests with other Python clients: lightkube and kr8s create, read, patch and watch through the
generated kubeconfig, and a 404 and a 409 raise their own error types."""

from __future__ import annotations

import threading

import pytest
from kruise_local.testing import wait_for

lightkube = pytest.importorskip("lightkube")
kr8s = pytest.importorskip("kr8s")


def _watch_in_background(stream, until: str, seen: list) -> threading.Thread:
    def run() -> None:
        for event in stream:
            seen.append(event)
            if event[0] == until:
                return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_lightkube(kubeconfig, namespace):
    from lightkube import ApiError, Client, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    client = Client(KubeConfig.from_file(str(kubeconfig)), namespace=namespace)
    created = client.create(ConfigMap(metadata=ObjectMeta(name="lk"), data={"a": "1"}))
    assert client.get(ConfigMap, "lk").data == {"a": "1"}
    seen: list = []
    watcher = _watch_in_background(
        (
            (ev, obj.metadata.name)
            for ev, obj in client.watch(ConfigMap, resource_version=created.metadata.resourceVersion)
        ),
        "DELETED",
        seen,
    )
    assert client.patch(ConfigMap, "lk", {"data": {"b": "2"}}).data == {"a": "1", "b": "2"}
    with pytest.raises(ApiError) as err:
        client.get(ConfigMap, "missing")
    assert (err.value.status.code, err.value.status.reason) == (404, "NotFound")
    stale = ConfigMap(
        metadata=ObjectMeta(name="lk", resourceVersion=created.metadata.resourceVersion), data={}
    )
    with pytest.raises(ApiError) as err:
        client.replace(stale)
    assert (err.value.status.code, err.value.status.reason) == (409, "Conflict")
    client.delete(ConfigMap, "lk")
    watcher.join(30)
    assert seen == [("MODIFIED", "lk"), ("DELETED", "lk")]


def test_lightkube_apply_twice_keeps_the_applied_keys(kubeconfig, namespace):
    """lightkube's own `test_apply` pattern (issue 25.1): an empty map applied, then one with a key."""
    from lightkube import Client, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    client = Client(KubeConfig.from_file(str(kubeconfig)), namespace=namespace, field_manager="lk-test")
    client.apply(ConfigMap(metadata=ObjectMeta(name="ssa", labels={}), data={}))
    applied = client.apply(
        ConfigMap(metadata=ObjectMeta(name="ssa", labels={"k": "v"}), data={"key": "value"})
    )
    assert applied.data == {"key": "value"} and applied.metadata.labels == {"k": "v"}
    stored = client.get(ConfigMap, "ssa")
    assert stored.data == {"key": "value"} and stored.metadata.labels == {"k": "v"}


def test_kr8s(kubeconfig, namespace):
    from kr8s import NotFoundError, ServerError
    from kr8s.objects import ConfigMap

    api = kr8s.api(kubeconfig=str(kubeconfig))
    cm = ConfigMap({"metadata": {"name": "k8", "namespace": namespace}, "data": {"a": "1"}}, api=api)
    cm.create()
    got = ConfigMap.get("k8", namespace=namespace, api=api)
    assert got.raw["data"] == {"a": "1"}
    seen: list = []
    watcher = _watch_in_background(
        ((ev, obj.name) for ev, obj in api.watch("configmaps", namespace=namespace)), "MODIFIED", seen
    )
    wait_for(lambda: seen, what="the watch's first event")  # the existing object, as ADDED
    got.patch({"data": {"b": "2"}})
    assert ConfigMap.get("k8", namespace=namespace, api=api).raw["data"] == {"a": "1", "b": "2"}
    with pytest.raises(NotFoundError):
        ConfigMap.get("missing", namespace=namespace, api=api)
    with pytest.raises(ServerError) as err:
        ConfigMap({"metadata": {"name": "k8", "namespace": namespace}}, api=api).create()
    assert err.value.status["code"] == 409 and err.value.status["reason"] == "AlreadyExists"
    watcher.join(30)
    assert seen == [("ADDED", "k8"), ("MODIFIED", "k8")]
