"""Server-side apply and managedFields through the real `kubernetes` client (structured-merge-diff)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from kruise_local import fieldmanager
from kruise_local.testing import wait_for
from kubernetes.client import ApiException

APPLY = "application/apply-patch+yaml"


def _cm(**data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data}


def _apply(core, namespace, body, manager, force=None, name="c"):
    kwargs = {"force": force} if force is not None else {}
    return core.patch_namespaced_config_map(
        name, namespace, body, field_manager=manager, _content_type=APPLY, **kwargs
    )


def _managers(obj) -> dict[tuple[str, str], dict]:
    return {(m.manager, m.operation): m.fields_v1 for m in obj.metadata.managed_fields or []}


def test_apply_creates_and_records_the_applier(core, namespace):
    applied = _apply(core, namespace, _cm(x="1"), "alice")
    assert applied.data == {"x": "1"}
    assert _managers(applied) == {("alice", "Apply"): {"f:data": {"f:x": {}}}}


def test_other_writes_are_recorded_as_updates(core, namespace):
    core.create_namespaced_config_map(namespace, _cm(x="1"), field_manager="creator")
    patched = core.patch_namespaced_config_map("c", namespace, {"data": {"y": "2"}}, field_manager="patcher")
    assert _managers(patched) == {
        ("creator", "Update"): {"f:data": {"f:x": {}}},
        ("patcher", "Update"): {"f:data": {"f:y": {}}},
    }


def test_a_conflict_is_a_409_naming_the_owner_and_force_takes_over(core, namespace):
    _apply(core, namespace, _cm(x="1"), "alice")
    with pytest.raises(ApiException) as err:
        _apply(core, namespace, _cm(x="2"), "bob")
    status = json.loads(err.value.body)
    assert (err.value.status, status["reason"]) == (409, "Conflict")
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alice" using v1: .data.x'
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice" using v1', "field": ".data.x"}
    ]
    forced = _apply(core, namespace, _cm(x="2"), "bob", force=True)
    assert forced.data == {"x": "2"}
    assert _managers(forced) == {("bob", "Apply"): {"f:data": {"f:x": {}}}}


def test_applying_the_same_value_co_owns_it_without_conflict(core, namespace):
    _apply(core, namespace, _cm(x="1"), "alice")
    both = _apply(core, namespace, _cm(x="1"), "bob")
    assert set(_managers(both)) == {("alice", "Apply"), ("bob", "Apply")}


def test_fields_no_longer_applied_are_removed_unless_someone_else_owns_them(core, namespace):
    _apply(core, namespace, _cm(x="1", y="2", z="3"), "alice")
    _apply(core, namespace, _cm(z="3"), "bob")  # co-owns z
    after = _apply(core, namespace, _cm(x="1"), "alice")
    assert after.data == {"x": "1", "z": "3"}


def test_pod_containers_merge_by_name_and_conflict_on_the_image(core, namespace):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "p"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
        },
    }
    created = core.patch_namespaced_pod("p", namespace, pod, field_manager="chain", _content_type=APPLY)
    owned = _managers(created)[("chain", "Apply")]
    assert owned["f:spec"]["f:containers"] == {
        'k:{"name":"c"}': {".": {}, "f:command": {}, "f:image": {}, "f:name": {}}
    }
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Running", what="Running")
    label_only = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"team": "x"}}}
    labelled = core.patch_namespaced_pod(
        "p", namespace, label_only, field_manager="labeller", _content_type=APPLY
    )
    assert labelled.metadata.labels == {"app": "p", "team": "x"}
    assert labelled.spec.containers[0].image == "busybox:1.36"
    swap = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]},
    }
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", namespace, swap, field_manager="other", _content_type=APPLY)
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == '.spec.containers[name="c"].image'
    swapped = core.patch_namespaced_pod(
        "p", namespace, swap, field_manager="other", force=True, _content_type=APPLY
    )
    assert swapped.spec.containers[0].image == "alpine:3.20"
    assert swapped.spec.containers[0].command == ["sleep", "3600"]


def test_apply_needs_a_field_manager_and_force_only_applies(core, namespace):
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", namespace, _cm(x="1"), _content_type=APPLY)
    assert err.value.status == 422 and "fieldManager" in json.loads(err.value.body)["message"]
    core.create_namespaced_config_map(namespace, _cm(x="1"))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("c", namespace, {"data": {"x": "2"}}, force=True)
    assert err.value.status == 422


@pytest.mark.parametrize(
    "body",
    [
        b"a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n",  # aliases
        b"kind: ConfigMap\nmetadata: {name: c}\n",  # no apiVersion
        b"apiVersion: v1\nkind: Pod\nmetadata: {name: c}\n",  # another kind
        b"- a\n- b\n",
        b"{{{",
    ],
)
def test_bad_apply_bodies_are_400(cluster, namespace, body):
    req = urllib.request.Request(
        f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps/c?fieldManager=m",
        data=body,
        headers={"Content-Type": APPLY},
        method="PATCH",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400


def test_fields_v1_round_trip_and_path_strings():
    paths = {
        ("f:metadata", "f:labels", "f:a"),
        ("f:spec", "f:containers", 'k:{"name":"c"}'),
        ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image"),
        ("f:metadata", "f:finalizers", 'v:"x"'),
    }
    encoded = fieldmanager.to_fields_v1(paths)
    assert encoded["f:spec"]["f:containers"]['k:{"name":"c"}'] == {".": {}, "f:image": {}}
    assert fieldmanager.from_fields_v1(encoded) == paths
    assert fieldmanager.path_string(("f:spec", "f:containers", 'k:{"name":"c"}', "f:image")) == (
        '.spec.containers[name="c"].image'
    )
    assert fieldmanager.path_string(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


def test_an_empty_map_then_a_key_keeps_the_key(core, namespace):
    """Issue 25: the first apply's `data: {}` is a member of alice's set; the second one owns `data.k`, which
    `addBackOwnedItems` (`Updater.prune`) puts back after the last set's `data` was removed."""
    empty = {**_cm(), "metadata": {"name": "c", "labels": {}}}
    _apply(core, namespace, empty, "alice")
    keyed = {**_cm(k="v"), "metadata": {"name": "c", "labels": {"a": "b"}}}
    after = _apply(core, namespace, keyed, "alice")
    assert after.data == {"k": "v"} and after.metadata.labels == {"a": "b"}
    stored = core.read_namespaced_config_map("c", namespace)
    assert stored.data == {"k": "v"} and stored.metadata.labels == {"a": "b"}
    assert _managers(stored) == {
        ("alice", "Apply"): {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
    }
    emptied = _apply(core, namespace, {**_cm(), "metadata": {"name": "c"}}, "alice")
    assert not emptied.data and emptied.metadata.labels is None  # emptied maps are nulled (remove.go)


def test_managed_fields_a_write_sends_replace_the_live_ones(core, namespace):
    """`FieldManager.Update` takes the managedFields a write sends: a JSON patch that gives bob's fields to
    alice's apply makes alice's next apply remove the key she leaves out; entries that do not decode leave
    the live ones in place."""
    core.create_namespaced_config_map(namespace, _cm(x="1", y="2"), field_manager="bob")
    moved = [
        {
            "manager": "alice",
            "operation": "Apply",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:x": {}, "f:y": {}}},
        }
    ]
    patch = [{"op": "replace", "path": "/metadata/managedFields", "value": moved}]
    patched = core.patch_namespaced_config_map("c", namespace, patch)
    assert _managers(patched) == {("alice", "Apply"): {"f:data": {"f:x": {}, "f:y": {}}}}
    assert _apply(core, namespace, _cm(x="1"), "alice").data == {"x": "1"}
    bad = [
        {"op": "replace", "path": "/metadata/managedFields", "value": [{"manager": "m", "fieldsType": "X"}]}
    ]
    kept = core.patch_namespaced_config_map("c", namespace, bad)
    assert _managers(kept) == {("alice", "Apply"): {"f:data": {"f:x": {}}}}
