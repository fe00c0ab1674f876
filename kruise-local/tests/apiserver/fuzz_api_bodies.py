"""Hypothesis strategies of the API fuzz tests (test_fuzz_api.py): request bodies (garbage, guarded writes,
create templates per kind, JSON, merge and strategic patches) and content types."""

from __future__ import annotations

import copy
import json
from typing import Any

from fuzz_api_kit import (
    CONFIGMAPS,
    CRRS,
    EVENTS,
    IPJS,
    NAMESPACES,
    NODE,
    NODE_IMAGES,
    NODES,
    NS,
    PODS,
    STALE_RV,
    WRONG_UID,
)
from fuzz_api_values import JSON, KEYS, SCALARS, WRONG, mutated, paths_of
from hypothesis import strategies as st

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


def decodes_to_object(raw: bytes) -> bool:
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
        "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path) for path in paths_of(doc)
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
        patch = _subtree(doc, draw(st.sampled_from(paths_of(doc)[1:])), draw(WRONG))
    elif choice == 3:
        patch = copy.deepcopy(draw(st.sampled_from(DIRECTIVE_PATCHES)))
    else:
        patch = draw(JSON)
    return guard_update(patch)
