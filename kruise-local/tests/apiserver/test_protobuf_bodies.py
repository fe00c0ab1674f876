"""Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as kubectl's typed clients send them."""

from __future__ import annotations

import base64
import random

import pytest
from kruise_local import protobuf
from kruise_local.errors import ApiError


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _entry(number: int, key: str, value: bytes | str) -> bytes:
    return _field(number, _field(1, key) + _field(2, value))


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return b"k8s\x00" + _field(1, type_meta) + _field(2, raw)


def test_config_map():
    meta = _field(1, "c") + _field(3, "ns") + _entry(11, "app", "x") + _field(14, "example.com/f")
    meta += _field(8, _field(1, 1_700_000_000))  # creationTimestamp (ignored by the server on create)
    raw = (
        _field(1, meta) + _entry(2, "a", "1") + _entry(3, "bin", b"\x00\xff") + _field(4, 1) + _field(99, "x")
    )
    assert protobuf.decode(_envelope("v1", "ConfigMap", raw)) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "c",
            "namespace": "ns",
            "labels": {"app": "x"},
            "finalizers": ["example.com/f"],
            "creationTimestamp": "2023-11-14T22:13:20Z",
        },
        "data": {"a": "1"},
        "binaryData": {"bin": base64.b64encode(b"\x00\xff").decode()},
        "immutable": True,
    }


def test_namespace():
    raw = _field(1, _field(1, "team-a")) + _field(2, _field(1, "kubernetes"))
    assert protobuf.decode(_envelope("v1", "Namespace", raw)) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team-a"},
        "spec": {"finalizers": ["kubernetes"]},
    }


def test_other_kinds_are_415():
    with pytest.raises(ApiError) as err:
        protobuf.decode(_envelope("v1", "Service", b""))
    assert err.value.code == 415 and "application/json" in err.value.message


def test_a_pod_with_inline_structs_quantities_and_zero_values():
    """What `kubectl debug --copy-to` sends: embedded Go structs (`json:",inline"`) are the parent's fields,
    a Quantity is its string, an IntOrString an int or a string, a packed int list is read, and the zero of a
    non-pointer omitempty field is no field (Go's JSON omits it) while a pointer field's zero stays."""
    probe = _field(1, _field(3, _field(1, _field(1, 1) + _field(3, "http"))))  # handler.tcpSocket.port
    probe += _field(4, 5)  # periodSeconds
    security = _field(4, 0) + _field(7, 0)  # runAsUser 0 (pointer), allowPrivilegeEscalation false (pointer)
    container = _field(1, "main") + _field(2, "busybox:1.36") + _field(3, "sleep") + _field(5, "")
    container += _field(8, _entry(2, "memory", _field(1, "64Mi")))  # resources.requests
    container += _field(11, probe) + _field(15, security) + _field(16, 0)  # stdin false (not a pointer)
    volume = _field(1, "cfg") + _field(
        2, _field(19, _field(1, _field(1, "settings")))
    )  # volumeSource.configMap
    security_context = _field(4, _varint(1000) + _varint(2000))  # supplementalGroups, packed
    spec = _field(1, volume) + _field(2, container) + _field(14, security_context)
    spec += _field(4, 0)  # terminationGracePeriodSeconds 0 (a pointer: kept)
    raw = _field(1, _field(1, "p")) + _field(2, spec)
    assert protobuf.decode(_envelope("v1", "Pod", raw)) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep"],
                    "resources": {"requests": {"memory": "64Mi"}},
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                    "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False},
                }
            ],
            "terminationGracePeriodSeconds": 0,
            "securityContext": {"supplementalGroups": [1000, 2000]},
        },
    }


@pytest.mark.parametrize(
    "body",
    [b"", b"not protobuf", b"k8s\x00\x0a", b"k8s\x00\x0a\x05\x0a\x02v1", b"k8s\x00\x0b", b"k8s\x00\xff\xff"],
)
def test_malformed_bodies_are_400(body):
    with pytest.raises(ApiError) as err:
        protobuf.decode(body)
    assert err.value.code == 400


def test_fields_of_the_wrong_wire_type_are_400():
    for raw in (
        _field(1, _field(11, _field(1, 5))),  # a label whose key is a varint
        _field(1, _field(11, _field(1, "k") + _field(2, 7))),  # a label whose value is a varint
        _field(1, _field(8, _field(1, 1 << 62))),  # a creation time out of range
        _field(1, 3),  # metadata as a varint
    ):
        with pytest.raises(ApiError) as err:
            protobuf.decode(_envelope("v1", "ConfigMap", raw))
        assert err.value.code == 400


def test_random_bytes_never_crash():
    rng = random.Random(14)
    good = _envelope("v1", "ConfigMap", _field(1, _field(1, "c")) + _entry(2, "a", "1"))
    for _ in range(3000):
        body = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(4, len(body))] = rng.randrange(256)
        try:
            protobuf.decode(bytes(body))
        except ApiError as e:
            assert e.code in (400, 415)
