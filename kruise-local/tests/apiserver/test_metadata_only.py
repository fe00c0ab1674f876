"""Metadata-only reads (`as=PartialObjectMetadata[List]`, what client-go's metadata client and controllers'
metadata informers ask for), as `handlers/response.go` `transformResponseObject` answers them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

# client-go metadata client's Accept headers (protobuf first, which this server passes over for JSON)
LIST = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
)
ONE = (
    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,"
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)


def _get(url: str, accept: str) -> tuple[int, list[dict]]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    except urllib.error.HTTPError as e:
        return e.code, [json.loads(e.read())]


@pytest.fixture
def configmaps(core, namespace, cluster) -> str:
    for name in ("a", "b"):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": name, "labels": {"n": name}}, "data": {"secret": "x" * 100}}
        )
    return f"{cluster.url}/api/v1/namespaces/{namespace}/configmaps"


def test_a_metadata_list_has_no_data(configmaps):
    status, (body,) = _get(configmaps, LIST)
    assert status == 200
    assert (body["kind"], body["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert body["metadata"]["resourceVersion"]
    assert [(i["kind"], i["apiVersion"], i["metadata"]["name"]) for i in body["items"]] == [
        ("PartialObjectMetadata", "meta.k8s.io/v1", "a"),
        ("PartialObjectMetadata", "meta.k8s.io/v1", "b"),
    ]
    assert all(set(i) == {"kind", "apiVersion", "metadata"} for i in body["items"])
    assert body["items"][0]["metadata"]["labels"] == {"n": "a"}


def test_a_metadata_get_and_the_wrong_form_is_406(configmaps):
    status, (body,) = _get(f"{configmaps}/a", ONE)
    assert status == 200 and body["kind"] == "PartialObjectMetadata" and "data" not in body
    assert body["metadata"]["name"] == "a" and body["metadata"]["uid"]
    status, (body,) = _get(f"{configmaps}/a", LIST.split(",", 1)[1])  # an object asked for as a list
    assert (status, body["reason"]) == (406, "NotAcceptable")
    status, (body,) = _get(configmaps, ONE.split(",", 1)[1])  # a list asked for as an object
    assert (status, body["reason"]) == (406, "NotAcceptable")


def test_a_metadata_watch_sends_partial_objects(configmaps):
    status, events = _get(f"{configmaps}?watch=1&timeoutSeconds=1", ONE)
    assert status == 200
    assert [(e["type"], e["object"]["kind"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "PartialObjectMetadata", "a"),
        ("ADDED", "PartialObjectMetadata", "b"),
    ]


def test_plain_json_and_tables_are_untouched(configmaps):
    _, (plain,) = _get(configmaps, "application/json")
    assert plain["kind"] == "ConfigMapList" and plain["items"][0]["data"]["secret"]
    _, (table,) = _get(configmaps, "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert table["kind"] == "Table" and [r["cells"][0] for r in table["rows"]] == ["a", "b"]
