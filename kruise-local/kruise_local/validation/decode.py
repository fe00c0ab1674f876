"""Decoding: where the real API server could not decode an object into its Go type (encoding/json)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kruise_local.errors import ApiError

from .quantity import parse_quantity

_GO_JSON_TYPES = {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}


def _go_json_type(value: Any) -> str:
    return next((name for py, name in _GO_JSON_TYPES.items() if type(value) is py), "value")


def _unmarshal_error(value: Any, where: str, go_type: str) -> str:
    return f"json: cannot unmarshal {_go_json_type(value)} into Go struct field {where} of type {go_type}"


def _decode_problem(obj: Any, shape: Mapping[str, Any], path: str) -> str | None:
    """Where `obj` would not decode into the Go type described by `shape`, as encoding/json words it.

    `shape` maps field names to "int", "str", "bool", a nested shape (object), or a one-item list (array of).
    """
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        return _unmarshal_error(obj, path, "object")
    for key, kind in shape.items():
        value = obj.get(key)
        if value is None:
            continue
        where = f"{path}.{key}"
        if isinstance(kind, list):
            if not isinstance(value, list):
                return _unmarshal_error(value, where, "array")
            for item in value:
                sub = kind[0]
                problem = (
                    _decode_problem(item, sub, where)
                    if isinstance(sub, Mapping)
                    else _decode_problem({"_": item}, {"_": sub}, where)
                )
                if problem:
                    return problem.replace(f"{where}._", where)
        elif isinstance(kind, Mapping):
            if (problem := _decode_problem(value, kind, where)) is not None:
                return problem
        else:
            if kind == "strmap":
                if not isinstance(value, Mapping):
                    return _unmarshal_error(value, where, "map[string]string")
                bad = next((v for v in value.values() if v is not None and not isinstance(v, str)), None)
                if bad is not None:
                    return _unmarshal_error(bad, where, "string")
                continue
            if kind == "map":
                if not isinstance(value, Mapping):
                    return _unmarshal_error(value, where, "map")
                continue
            ok = {
                "int": isinstance(value, int) and not isinstance(value, bool),
                "str": isinstance(value, str),
                "bool": isinstance(value, bool),
                "intstr": isinstance(value, int | str) and not isinstance(value, bool),
            }[kind]
            if not ok:
                go_type = {"int": "int64", "str": "string", "bool": "bool", "intstr": "intstr.IntOrString"}[
                    kind
                ]
                return _unmarshal_error(value, where, go_type)
    return None


_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_HANDLER_SHAPE: dict[str, Any] = {
    "exec": {"command": ["str"]},
    "httpGet": {"path": "str", "port": "intstr", "scheme": "str", "host": "str"},
    "tcpSocket": {"port": "intstr"},
    "grpc": {"port": "int"},
    "sleep": {"seconds": "int"},
}
_PROBE_SHAPE: dict[str, Any] = {
    **_HANDLER_SHAPE,
    "initialDelaySeconds": "int",
    "timeoutSeconds": "int",
    "periodSeconds": "int",
    "successThreshold": "int",
    "failureThreshold": "int",
    "terminationGracePeriodSeconds": "int",
}
_KEY_REF_SHAPE: dict[str, Any] = {"name": "str", "key": "str"}
_CONTAINER_SHAPE: dict[str, Any] = {
    "name": "str",
    "image": "str",
    "imagePullPolicy": "str",
    "terminationMessagePath": "str",
    "terminationMessagePolicy": "str",
    "restartPolicy": "str",
    "command": ["str"],
    "args": ["str"],
    "env": [
        {
            "name": "str",
            "value": "str",
            "valueFrom": {
                "fieldRef": {"apiVersion": "str", "fieldPath": "str"},
                "resourceFieldRef": {"containerName": "str", "resource": "str"},
                "configMapKeyRef": _KEY_REF_SHAPE,
                "secretKeyRef": _KEY_REF_SHAPE,
            },
        }
    ],
    "envFrom": [{"prefix": "str", "configMapRef": {"name": "str"}, "secretRef": {"name": "str"}}],
    "ports": [{"name": "str", "containerPort": "int", "hostPort": "int", "protocol": "str"}],
    "volumeMounts": [{"name": "str", "mountPath": "str", "subPath": "str", "subPathExpr": "str"}],
    "resources": {"limits": "map", "requests": "map"},
    "resizePolicy": [{"resourceName": "str", "restartPolicy": "str"}],
    "livenessProbe": _PROBE_SHAPE,
    "readinessProbe": _PROBE_SHAPE,
    "startupProbe": _PROBE_SHAPE,
    "lifecycle": {"postStart": _HANDLER_SHAPE, "preStop": _HANDLER_SHAPE},
}
_POD_SHAPE: dict[str, Any] = {
    "metadata": {
        "name": "str",
        "generateName": "str",
        "namespace": "str",
        "uid": "str",
        "labels": "strmap",
        "annotations": "strmap",
        "finalizers": ["str"],
        "ownerReferences": [
            {"apiVersion": "str", "kind": "str", "name": "str", "uid": "str", "controller": "bool"}
        ],
    },
    "spec": {
        "containers": [_CONTAINER_SHAPE],
        "initContainers": [_CONTAINER_SHAPE],
        "ephemeralContainers": [_CONTAINER_SHAPE],
        "volumes": [
            {
                "name": "str",
                "emptyDir": {"medium": "str"},
                "hostPath": {"path": "str", "type": "str"},
                "secret": {"secretName": "str"},
                "configMap": {"name": "str"},
                "persistentVolumeClaim": {"claimName": "str"},
                "downwardAPI": {
                    "items": [{"path": "str", "fieldRef": {"apiVersion": "str", "fieldPath": "str"}}]
                },
            }
        ],
        "tolerations": [
            {"key": "str", "operator": "str", "value": "str", "effect": "str", "tolerationSeconds": "int"}
        ],
        "schedulingGates": [{"name": "str"}],
        "nodeSelector": "strmap",
        "restartPolicy": "str",
        "dnsPolicy": "str",
        "nodeName": "str",
        "serviceAccountName": "str",
        "serviceAccount": "str",
        "priorityClassName": "str",
        "hostname": "str",
        "subdomain": "str",
        "activeDeadlineSeconds": "int",
        "terminationGracePeriodSeconds": "int",
        "securityContext": "map",
        "os": {"name": "str"},
        "resources": {"limits": "map", "requests": "map"},
    },
}


def _check_decodable(kind: str, obj: Mapping[str, Any]) -> None:
    """Raise 400 BadRequest where the real server could not decode the object (bad shapes or quantities)."""

    def bad(detail: str) -> ApiError:
        version = str(obj.get("apiVersion") or "v1").rpartition("/")[2]
        return ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {detail}')

    problem = _decode_problem(obj, _POD_SHAPE, kind)
    if problem is not None:
        raise bad(problem)
    spec = obj.get("spec")
    if spec is None:
        return
    for key in _CONTAINER_LISTS:
        for ctr in spec.get(key) or []:
            resources = ctr.get("resources") if isinstance(ctr, Mapping) else None
            for part in ("limits", "requests"):
                for value in (
                    ((resources or {}).get(part) or {}).values() if isinstance(resources, Mapping) else ()
                ):
                    try:
                        parse_quantity(value)
                    except ValueError as exc:
                        raise bad(str(exc)) from None
    for vol in spec.get("volumes") or []:
        size = ((vol or {}).get("emptyDir") or {}).get("sizeLimit") if isinstance(vol, Mapping) else None
        if size is not None:
            try:
                parse_quantity(size)
            except ValueError as exc:
                raise bad(str(exc)) from None


_SELECTOR_SHAPE: dict[str, Any] = {
    "matchLabels": {},
    "matchExpressions": [{"key": "str", "operator": "str", "values": ["str"]}],
}
_IMAGE_PULL_JOB_SHAPE: dict[str, Any] = {
    "image": "str",
    "imagePullPolicy": "str",
    "parallelism": "intstr",
    "pullSecrets": ["str"],
    "selector": {**_SELECTOR_SHAPE, "names": ["str"]},
    "podSelector": _SELECTOR_SHAPE,
    "completionPolicy": {"type": "str", "activeDeadlineSeconds": "int", "ttlSecondsAfterFinished": "int"},
    "pullPolicy": {"timeoutSeconds": "int", "backoffLimit": "int"},
}
_CRR_SHAPE: dict[str, Any] = {
    "podName": "str",
    "containers": [{"name": "str"}],
    "strategy": {
        "failurePolicy": "str",
        "orderedRecreate": "bool",
        "forceRecreate": "bool",
        "terminationGracePeriodSeconds": "int",
        "unreadyGracePeriodSeconds": "int",
        "minStartedSeconds": "int",
    },
    "activeDeadlineSeconds": "int",
    "ttlSecondsAfterFinished": "int",
}


_OBJECT_META_SHAPE: dict[str, Any] = {
    **_POD_SHAPE["metadata"],
    "resourceVersion": "str",
    "generation": "int",
    "creationTimestamp": "str",
    "deletionTimestamp": "str",
    "deletionGracePeriodSeconds": "int",
}
_OBJECT_SHAPES: dict[str, dict[str, Any]] = {
    "ConfigMap": {"data": "strmap", "binaryData": "strmap", "immutable": "bool"},
    "Secret": {"data": "strmap", "stringData": "strmap", "type": "str", "immutable": "bool"},
    "ServiceAccount": {
        "secrets": [
            {
                "kind": "str",
                "namespace": "str",
                "name": "str",
                "uid": "str",
                "apiVersion": "str",
                "resourceVersion": "str",
                "fieldPath": "str",
            }
        ],
        "imagePullSecrets": [{"name": "str"}],
        "automountServiceAccountToken": "bool",
    },
    "Event": {
        "involvedObject": {
            "kind": "str",
            "namespace": "str",
            "name": "str",
            "uid": "str",
            "apiVersion": "str",
            "resourceVersion": "str",
            "fieldPath": "str",
        },
        "reason": "str",
        "message": "str",
        "source": {"component": "str", "host": "str"},
        "firstTimestamp": "str",
        "lastTimestamp": "str",
        "eventTime": "str",
        "count": "int",
        "type": "str",
        "action": "str",
        "reportingComponent": "str",
        "reportingInstance": "str",
    },
    "Namespace": {"spec": {"finalizers": ["str"]}, "status": {"phase": "str"}},
    "Node": {
        "spec": {
            "podCIDR": "str",
            "podCIDRs": ["str"],
            "providerID": "str",
            "unschedulable": "bool",
            "taints": [{"key": "str", "value": "str", "effect": "str", "timeAdded": "str"}],
        }
    },
    "ImagePullJob": {"spec": "map"},
    "NodeImage": {"spec": {"images": "map"}},
    "ContainerRecreateRequest": {"spec": "map"},
}


def check_decodable(kind: str, obj: Mapping[str, Any]) -> None:
    """Raise 400 BadRequest where the real server could not decode `obj` into its Go type: metadata, status
    and the fields of the kind that have a fixed JSON type (pods: see `_check_decodable`)."""
    if kind == "Pod":
        _check_decodable(kind, obj)
        shape: dict[str, Any] = {"status": "map"}
    else:
        shape = {"metadata": _OBJECT_META_SHAPE, "status": "map", **_OBJECT_SHAPES.get(kind, {})}
    problem = _decode_problem(obj, shape, kind)
    if problem is not None:
        version = str(obj.get("apiVersion") or "v1").rpartition("/")[2]
        raise ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {problem}')
