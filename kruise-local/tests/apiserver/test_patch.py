"""Unit tests for the local API server's PATCH implementations."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kruise_local.errors import ApiError
from kruise_local.patch import (
    json_equal,
    json_merge_patch,
    json_patch,
    strategic_merge_patch,
)

# ------------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------------

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
)
_keys = st.sampled_from(["a", "b", "c", "d", "~", "/", ""])
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(_keys, json_values, max_size=5)


# ------------------------------------------------------------------------------------------------
# RFC 7386
# ------------------------------------------------------------------------------------------------

RFC7386_CASES = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_CASES)
def test_json_merge_patch_rfc7386_appendix(target: Any, patch: Any, expected: Any) -> None:
    assert json_merge_patch(target, patch) == expected


@given(json_values, json_values)
def test_json_merge_patch_never_mutates_and_never_aliases(target: Any, patch: Any) -> None:
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = json_merge_patch(target, patch)
    assert target == target_before
    assert patch == patch_before
    # Mutating the result must not reach the inputs.
    if isinstance(result, dict):
        for value in result.values():
            if isinstance(value, (dict, list)):
                value.clear()
        result["__new__"] = 1
    elif isinstance(result, list):
        result.append("__new__")
    assert target == target_before
    assert patch == patch_before


@given(json_values, json_values)
def test_json_merge_patch_is_idempotent(target: Any, patch: Any) -> None:
    once = json_merge_patch(target, patch)
    assert json_merge_patch(once, patch) == once


@given(json_objects)
def test_json_merge_patch_self_application_equals_patch_on_empty(doc: dict[str, Any]) -> None:
    assert json_merge_patch(doc, doc) == json_merge_patch({}, doc)


@given(json_values, json_objects, json_objects)
def test_json_merge_patch_later_patch_wins_on_shared_scalar_keys(
    target: Any, first: dict[str, Any], second: dict[str, Any]
) -> None:
    result = json_merge_patch(json_merge_patch(target, first), second)
    for key, value in second.items():
        if value is None:
            assert key not in result
        elif not isinstance(value, dict):
            assert result[key] == value


# ------------------------------------------------------------------------------------------------
# RFC 6902
# ------------------------------------------------------------------------------------------------

RFC6902_CASES = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    (
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    (
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    (
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
]


@pytest.mark.parametrize(("target", "ops", "expected"), RFC6902_CASES)
def test_json_patch_rfc6902_appendix(target: Any, ops: list[Any], expected: Any) -> None:
    before = copy.deepcopy(target)
    assert json_patch(target, ops) == expected
    assert target == before


@pytest.mark.parametrize(
    ("target", "ops"),
    [
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),  # A.9
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),  # A.12
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),  # A.15
        ({"a": 1}, [{"op": "remove", "path": "/b"}]),
        ({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}]),
        ({"a": [1]}, [{"op": "remove", "path": "/a/1"}]),
        ({"a": [1]}, [{"op": "add", "path": "/a/2", "value": 0}]),
        ({"a": [1]}, [{"op": "replace", "path": "/a/-", "value": 0}]),
        ({"a": [1]}, [{"op": "remove", "path": "/a/01"}]),
        ({"a": 1}, [{"op": "add", "path": "/a/b", "value": 0}]),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}]),
        ({"a": 1}, [{"op": "copy", "from": "/x", "path": "/y"}]),
        ({"a": True}, [{"op": "test", "path": "/a", "value": 1}]),
        ({"a": 1}, [{"op": "remove", "path": ""}]),
    ],
)
def test_json_patch_unappliable_operations_are_422(target: Any, ops: list[Any]) -> None:
    with pytest.raises(ApiError) as exc_info:
        json_patch(target, ops)
    assert exc_info.value.code == 422
    assert exc_info.value.reason == "Invalid"


def test_json_patch_422_message_names_the_path() -> None:
    with pytest.raises(ApiError, match="/spec/missing"):
        json_patch({"spec": {}}, [{"op": "remove", "path": "/spec/missing"}])


@pytest.mark.parametrize(
    "ops",
    [
        {"op": "add", "path": "/a", "value": 1},
        "nope",
        None,
        [1],
        [{"path": "/a", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": "/a"}],
        [{"op": "replace", "path": "/a"}],
        [{"op": "test", "path": "/a"}],
        [{"op": "move", "path": "/a"}],
        [{"op": "copy", "path": "/a"}],
        [{"op": "add", "path": "a", "value": 1}],
        [{"op": "add", "path": 3, "value": 1}],
        [{"op": "add", "path": "/a~2", "value": 1}],
        [{"op": "add", "path": "/a~", "value": 1}],
        [{"op": "move", "from": "x", "path": "/a"}],
    ],
)
def test_json_patch_malformed_operations_are_400(ops: Any) -> None:
    with pytest.raises(ApiError) as exc_info:
        json_patch({"a": 0}, ops)
    assert exc_info.value.code == 400


def test_json_patch_is_atomic_and_supports_root_and_null_values() -> None:
    doc = {"a": {"b": 1}}
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "add", "path": "/c", "value": 1}, {"op": "remove", "path": "/zzz"}])
    assert doc == {"a": {"b": 1}}
    assert json_patch(doc, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert json_patch(doc, [{"op": "add", "path": "/a/b", "value": None}]) == {"a": {"b": None}}
    assert json_patch(doc, [{"op": "copy", "from": "/a", "path": "/d"}]) == {"a": {"b": 1}, "d": {"b": 1}}
    assert json_patch(doc, [{"op": "move", "from": "/a", "path": "/a"}]) == doc
    assert json_patch({"x": [1, 2]}, [{"op": "add", "path": "/x/2", "value": 3}]) == {"x": [1, 2, 3]}


def test_json_patch_does_not_alias_values() -> None:
    value = {"nested": [1]}
    result = json_patch({}, [{"op": "add", "path": "/a", "value": value}])
    result["a"]["nested"].append(2)
    assert value == {"nested": [1]}
    copied = json_patch(result, [{"op": "copy", "from": "/a", "path": "/b"}])
    copied["b"]["nested"].append(3)
    assert copied["a"]["nested"] == [1, 2]


def test_json_equal_distinguishes_booleans_from_numbers() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal(0, False)
    assert json_equal({"a": [1, "x"]}, {"a": [1.0, "x"]})
    assert not json_equal({"a": 1}, {"b": 1})
    assert not json_equal("1", 1)


@given(json_objects, st.sampled_from(["a", "b", "~", "/", ""]), json_values)
def test_json_patch_add_then_remove_restores_missing_key(doc: dict[str, Any], key: str, value: Any) -> None:
    doc.pop(key, None)
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    added = json_patch(doc, [{"op": "add", "path": pointer, "value": value}])
    assert json_patch(added, [{"op": "test", "path": pointer, "value": value}]) == added
    assert json_patch(added, [{"op": "remove", "path": pointer}]) == doc


_op_names = st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"])
_pointers = st.text(alphabet="/~01-ab", max_size=6) | st.integers() | st.none()
_ops = st.lists(
    st.fixed_dictionaries(
        {"op": _op_names | json_values, "path": _pointers},
        optional={"value": json_values, "from": _pointers},
    )
    | json_values,
    max_size=4,
)


@settings(max_examples=300)
@given(json_values, _ops | json_values)
def test_json_patch_hostile_input_only_raises_api_error(doc: Any, ops: Any) -> None:
    before = copy.deepcopy(doc)
    code = None
    try:
        json_patch(doc, ops)
    except ApiError as exc:
        code = exc.code
    assert code in (None, 400, 422)
    assert doc == before


# ------------------------------------------------------------------------------------------------
# Strategic merge patch
# ------------------------------------------------------------------------------------------------


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"app": "x", "tier": "web"},
            "finalizers": ["a.example.com/f", "b.example.com/f"],
            "ownerReferences": [{"uid": "u1", "name": "o1", "kind": "Job"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {"name": "sidecar", "image": "envoy:1"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "c"}}],
            "tolerations": [{"key": "k1", "operator": "Exists"}, {"key": "k2", "operator": "Exists"}],
            "nodeSelector": {"zone": "a"},
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "main", "ready": False}, {"name": "sidecar", "ready": False}],
        },
    }


def test_smp_patches_one_container_by_name_and_leaves_the_other_intact() -> None:
    pod = _pod()
    before = copy.deepcopy(pod)
    out = strategic_merge_patch(pod, {"spec": {"containers": [{"name": "sidecar", "image": "envoy:2"}]}})
    assert pod == before
    assert [c["name"] for c in out["spec"]["containers"]] == ["main", "sidecar"]
    assert out["spec"]["containers"][1] == {"name": "sidecar", "image": "envoy:2"}
    assert out["spec"]["containers"][0] == before["spec"]["containers"][0]


def test_smp_appends_new_keyed_elements() -> None:
    out = strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "new", "image": "x"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["main", "sidecar", "new"]


def test_smp_nested_keyed_lists_env_ports_volume_mounts() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
                    "ports": [{"containerPort": 80, "name": "http"}, {"containerPort": 443}],
                    "volumeMounts": [{"mountPath": "/data", "readOnly": True}],
                }
            ]
        }
    }
    main = strategic_merge_patch(_pod(), patch)["spec"]["containers"][0]
    assert main["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "two"},
        {"name": "C", "value": "3"},
    ]
    assert main["ports"] == [{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 443}]
    assert main["volumeMounts"] == [{"name": "data", "mountPath": "/data", "readOnly": True}]
    assert main["image"] == "busybox:1"


def test_smp_patch_delete_directive_removes_keyed_element() -> None:
    out = strategic_merge_patch(
        _pod(),
        {
            "spec": {
                "containers": [{"$patch": "delete", "name": "sidecar"}],
                "volumes": [{"name": "cfg", "$patch": "delete"}],
            },
            "metadata": {"ownerReferences": [{"$patch": "delete", "uid": "u1"}]},
        },
    )
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    assert out["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert out["metadata"]["ownerReferences"] == []


def test_smp_null_deletes_keys() -> None:
    out = strategic_merge_patch(
        _pod(),
        {"metadata": {"labels": {"tier": None, "missing": None}}, "spec": {"nodeSelector": None}},
    )
    assert out["metadata"]["labels"] == {"app": "x"}
    assert "nodeSelector" not in out["spec"]


def test_smp_tolerations_have_no_merge_key_and_are_replaced() -> None:
    out = strategic_merge_patch(_pod(), {"spec": {"tolerations": [{"key": "k3", "operator": "Exists"}]}})
    assert out["spec"]["tolerations"] == [{"key": "k3", "operator": "Exists"}]


def test_smp_status_conditions_and_container_statuses_merge_by_key() -> None:
    out = strategic_merge_patch(
        _pod(),
        {
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "ready": True}],
            }
        },
    )
    assert out["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": "True"},
    ]
    assert out["status"]["containerStatuses"] == [
        {"name": "main", "ready": True},
        {"name": "sidecar", "ready": False},
    ]


def test_smp_finalizers_merge_as_ordered_set_and_delete_from_primitive_list() -> None:
    out = strategic_merge_patch(_pod(), {"metadata": {"finalizers": ["c.example.com/f", "a.example.com/f"]}})
    assert out["metadata"]["finalizers"] == ["a.example.com/f", "b.example.com/f", "c.example.com/f"]
    out = strategic_merge_patch(
        _pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f", "zzz"]}}
    )
    assert out["metadata"]["finalizers"] == ["b.example.com/f"]
    out = strategic_merge_patch(_pod(), {"metadata": {"finalizers": None}})
    assert "finalizers" not in out["metadata"]


def test_smp_replace_directives() -> None:
    out = strategic_merge_patch(_pod(), {"metadata": {"labels": {"$patch": "replace", "only": "this"}}})
    assert out["metadata"]["labels"] == {"only": "this"}
    out = strategic_merge_patch(
        _pod(), {"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "s"}]}}
    )
    assert out["spec"]["containers"] == [{"name": "solo", "image": "s"}]
    out = strategic_merge_patch(_pod(), {"metadata": {"finalizers": [{"$patch": "replace"}, "z"]}})
    assert out["metadata"]["finalizers"] == ["z"]
    out = strategic_merge_patch(_pod(), {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert out["spec"]["nodeSelector"] == {}


def test_smp_retain_keys_and_set_element_order() -> None:
    out = strategic_merge_patch(
        {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}},
        {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}},
    )
    assert out == {"strategy": {"type": "Recreate"}}
    out = strategic_merge_patch(
        _pod(),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "main"}],
                "containers": [{"name": "main", "image": "busybox:2"}],
            }
        },
    )
    assert [(c["name"], c["image"]) for c in out["spec"]["containers"]] == [
        ("sidecar", "envoy:1"),
        ("main", "busybox:2"),
    ]
    assert not any(k.startswith("$") for k in out["spec"])


def test_smp_directives_never_leak_into_new_fields() -> None:
    out = strategic_merge_patch(
        {"spec": {}},
        {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}], "args": None}]}},
    )
    assert out == {"spec": {"containers": [{"name": "a", "env": []}]}}


def test_smp_other_lists_are_replaced_and_type_changes_replace() -> None:
    out = strategic_merge_patch(
        {"spec": {"args": ["a", "b"], "x": {"y": 1}, "z": "s"}},
        {"spec": {"args": ["c"], "x": "flat", "z": {"w": None, "v": 2}}},
    )
    assert out == {"spec": {"args": ["c"], "x": "flat", "z": {"v": 2}}}


@pytest.mark.parametrize(
    "patch",
    [
        ["not", "a", "dict"],
        None,
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": ["scalar"]}},
        {"metadata": {"ownerReferences": [{"$patch": "delete", "name": "no-uid"}]}},
        {"spec": {"$patch": "explode"}},
        {"spec": {"containers": [{"name": "a", "$patch": "explode"}]}},
        {"metadata": {"finalizers": [{"nested": "map"}]}},
        {"spec": {"$retainKeys": "type"}},
        {"spec": {"$retainKeys": ["a"], "b": 1}},
        {"spec": {"$setElementOrder/containers": "nope"}},
        {"spec": {"$deleteFromPrimitiveList/args": "nope"}},
    ],
)
def test_smp_malformed_patches_are_400(patch: Any) -> None:
    with pytest.raises(ApiError) as exc_info:
        strategic_merge_patch(_pod(), patch)
    assert exc_info.value.code == 400


def test_smp_missing_merge_key_error_names_the_field() -> None:
    with pytest.raises(ApiError, match=r"spec\.containers") as exc_info:
        strategic_merge_patch(_pod(), {"spec": {"containers": [{"image": "x"}]}})
    assert "name" in exc_info.value.message


def test_smp_pod_template_in_workloads_merges_containers() -> None:
    deploy = {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b"}]}}}}
    out = strategic_merge_patch(
        deploy, {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}
    )
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "a", "image": "2"}, {"name": "b"}]


_plain_keys = st.sampled_from(["a", "b", "c", "spec", "metadata"])
_plain_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_plain_keys, children, max_size=3),
    max_leaves=15,
)


@given(
    st.dictionaries(_plain_keys, _plain_values, max_size=4),
    st.dictionaries(_plain_keys, _plain_values, max_size=4),
)
def test_smp_equals_json_merge_patch_on_objects_without_keyed_lists(target: Any, patch: Any) -> None:
    before = (copy.deepcopy(target), copy.deepcopy(patch))
    assert strategic_merge_patch(target, patch) == json_merge_patch(target, patch)
    assert (target, patch) == before


@given(
    st.lists(st.sampled_from(["x", "y", "z", "w"]), max_size=4),
    st.lists(st.sampled_from(["x", "y", "v"]), max_size=4),
)
def test_smp_finalizer_union_properties(original: list[str], patch: list[str]) -> None:
    original = list(dict.fromkeys(original))
    out = strategic_merge_patch({"metadata": {"finalizers": original}}, {"metadata": {"finalizers": patch}})
    merged = out["metadata"]["finalizers"]
    assert merged[: len(original)] == original
    assert set(merged) == set(original) | set(patch)
    assert len(merged) == len(set(merged))


def test_smp_service_ports_merge_by_port_and_set_element_order_on_scalars() -> None:
    svc = {"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}}
    out = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 443, "targetPort": 8443}]}})
    assert out["spec"]["ports"][1] == {"port": 443, "name": "https", "targetPort": 8443}
    out = strategic_merge_patch(
        {"metadata": {"finalizers": ["a", "b", "c"]}},
        {"metadata": {"$setElementOrder/finalizers": ["c", "a"]}},
    )
    assert out["metadata"]["finalizers"] == ["c", "b", "a"]


_smp_keys = st.sampled_from(
    [
        "spec",
        "metadata",
        "status",
        "containers",
        "name",
        "env",
        "ports",
        "containerPort",
        "finalizers",
        "conditions",
        "type",
        "$patch",
        "$retainKeys",
        "$setElementOrder/containers",
        "$deleteFromPrimitiveList/finalizers",
    ]
)
_smp_scalars = (
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "replace", "delete", "merge"])
)
_smp_values = st.recursive(
    _smp_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_smp_keys, children, max_size=4),
    max_leaves=25,
)
_smp_objects = st.dictionaries(_smp_keys, _smp_values, max_size=4)


@settings(max_examples=500)
@given(_smp_objects, _smp_objects)
def test_smp_hostile_patches_only_raise_400_and_never_mutate(target: Any, patch: Any) -> None:
    before = copy.deepcopy((target, patch))
    code = None
    try:
        strategic_merge_patch(target, patch)
    except ApiError as exc:
        code = exc.code
    assert code in (None, 400)
    assert (target, patch) == before
