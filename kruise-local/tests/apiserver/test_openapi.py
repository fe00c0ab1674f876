"""`/openapi/v2` and `/openapi/v3`: generated documents for served kinds, negotiated as kube-openapi does."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def _get(cluster, path: str, accept: str | None = None):
    headers = {"Accept": accept} if accept else {}
    req = urllib.request.Request(f"{cluster.url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _unresolved(doc: dict, prefix: str, defs: dict) -> set[str]:
    missing: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.removeprefix(prefix) not in defs:
                missing.add(ref)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    return missing


@pytest.fixture(scope="module")
def v2(cluster) -> dict:
    code, headers, body = _get(cluster, "/openapi/v2", "application/json")
    assert code == 200 and headers["Content-Type"] == "application/json"
    return json.loads(body)


def test_v2_has_the_served_kinds_with_their_extensions(v2):
    pod = v2["definitions"]["io.k8s.api.core.v1.Pod"]
    assert pod["x-kubernetes-group-version-kind"] == [{"group": "", "kind": "Pod", "version": "v1"}]
    containers = v2["definitions"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert (containers["x-kubernetes-patch-merge-key"], containers["x-kubernetes-patch-strategy"]) == (
        "name",
        "merge",
    )
    assert (
        containers["type"] == "array"
        and containers["items"]["$ref"] == "#/definitions/io.k8s.api.core.v1.Container"
    )
    port = v2["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]
    assert (port["type"], port["format"]) == ("string", "int-or-string")
    for kind in ("ConfigMap", "Namespace", "Node", "Event", "PodList"):
        assert f"io.k8s.api.core.v1.{kind}" in v2["definitions"]
    ipj = v2["definitions"]["io.kruise.apps.v1beta1.ImagePullJob"]
    assert "image" in ipj["properties"]["spec"]["properties"]
    assert ipj["properties"]["metadata"]["$ref"].endswith("meta.v1.ObjectMeta")


def test_v2_refs_all_resolve(v2):
    assert _unresolved(v2, "#/definitions/", v2["definitions"]) == set()


def test_v2_patch_operations_take_field_validation(v2):
    """kubectl asks the document whether PATCH takes `fieldValidation` before it leaves validation to the
    server (cli-runtime `supportsQueryParamV3`)."""
    patch = v2["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["operationId"] == "patchCoreV1NamespacedPod"
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "Pod", "version": "v1"}
    assert {"dryRun", "fieldManager", "fieldValidation", "force"} <= {p["name"] for p in patch["parameters"]}
    ipj = v2["paths"]["/apis/apps.kruise.io/v1beta1/namespaces/{namespace}/imagepulljobs/{name}"]["patch"]
    assert ipj["operationId"] == "patchAppsKruiseIoV1beta1NamespacedImagePullJob"


V2_PROTOBUF_REPLY = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


@pytest.mark.parametrize(
    ("accept", "code", "ctype"),
    [
        (V2_PROTOBUF, 200, V2_PROTOBUF_REPLY),  # what client-go's OpenAPISchema() asks for
        (V2_PROTOBUF_REPLY, 200, V2_PROTOBUF_REPLY),
        (f"application/json;q=0.5, {V2_PROTOBUF}", 200, V2_PROTOBUF_REPLY),
        (f"{V2_PROTOBUF};q=0.5, application/json", 200, "application/json"),
        ("*/*", 200, "application/json"),
        (None, 200, "application/json"),
        ("text/html", 406, None),
    ],
)
def test_v2_negotiation(cluster, accept, code, ctype):
    """kube-openapi's handler: the first offer an Accept clause allows, clauses by q; none is a 406."""
    got, headers, body = _get(cluster, "/openapi/v2", accept)
    assert got == code
    if code == 200:
        assert headers["Content-Type"] == ctype
    if ctype == V2_PROTOBUF_REPLY:  # gnostic Document: field 1 (swagger) is "2.0"
        assert body[:5] == b"\x0a\x032.0"


def test_v3_discovery_lists_each_group_version(cluster):
    code, _, body = _get(cluster, "/openapi/v3")
    paths = json.loads(body)["paths"]
    assert code == 200
    assert {"api/v1", "apis/apps.kruise.io/v1alpha1", "apis/apps.kruise.io/v1beta1"} <= set(paths)
    for gv, entry in paths.items():
        code, headers, body = _get(cluster, entry["serverRelativeURL"])
        doc = json.loads(body)
        assert code == 200 and doc["openapi"].startswith("3.")
        assert "immutable" in headers["Cache-Control"]
        assert _unresolved(doc, "#/components/schemas/", doc["components"]["schemas"]) == set(), gv


def test_v3_group_version_document_has_the_kind_and_its_paths(cluster):
    _, _, body = _get(cluster, "/openapi/v3/apis/apps.kruise.io/v1alpha1")
    doc = json.loads(body)
    schemas = doc["components"]["schemas"]
    crr = schemas["io.kruise.apps.v1alpha1.ContainerRecreateRequest"]
    assert crr["x-kubernetes-group-version-kind"] == [
        {"group": "apps.kruise.io", "kind": "ContainerRecreateRequest", "version": "v1alpha1"}
    ]
    patch = doc["paths"][
        "/apis/apps.kruise.io/v1alpha1/namespaces/{namespace}/containerrecreaterequests/{name}"
    ]["patch"]
    assert "application/apply-patch+yaml" in patch["requestBody"]["content"]
    assert any(p["name"] == "fieldValidation" and p["in"] == "query" for p in patch["parameters"])
    assert "io.k8s.api.core.v1.Pod" not in schemas  # one group-version per document


def test_v3_unknown_group_version_is_404(cluster):
    assert _get(cluster, "/openapi/v3/apis/apps/v1")[0] == 404
