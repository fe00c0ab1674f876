"""Unit tests for the CRD schema loader and validator; defaulted Kruise objects against the real CRDs."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from kruise_local.crdschema import (
    NoSchemaError,
    apply_crd_defaults,
    default_crd_folder,
    load_crd_schemas,
    validate_against_crd,
)
from kruise_local.validation import (
    admit_crr,
    admit_image_pull_job,
    admit_node_image,
    default_pod,
)

FOLDER = default_crd_folder()
needs_crds = pytest.mark.skipif(FOLDER is None, reason="no kruise-crds folder (set KRUISE_CRDS_DIR)")

MINI_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            properties:
              size:
                anyOf: [{type: integer}, {type: string}]
                x-kubernetes-int-or-string: true
              count: {type: integer, format: int32}
              note: {type: string, nullable: true}
              mode: {type: string, default: Fast}
              tags:
                type: array
                items: {type: string}
              free:
                type: object
                x-kubernetes-preserve-unknown-fields: true
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
"""


@pytest.fixture
def mini(tmp_path: Path) -> dict[Any, Any]:
    (tmp_path / "widgets.yaml").write_text(MINI_CRD)
    (tmp_path / "notes.yaml").write_text("kind: ConfigMap\n")
    return load_crd_schemas(tmp_path)


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec}


def test_loads_only_served_versions(mini: dict[Any, Any]) -> None:
    assert set(mini) == {("example.com", "v1", "Widget")}


def test_int_or_string_nullable_and_formats(mini: dict[Any, Any]) -> None:
    assert validate_against_crd(widget(size=3, count=2**40, note=None), mini) == []
    assert validate_against_crd(widget(size="50%"), mini) == []
    errors = validate_against_crd(widget(size=1.5), mini)
    assert errors and errors[0].startswith("spec.size: Invalid value")


def test_required_and_type_errors(mini: dict[Any, Any]) -> None:
    assert validate_against_crd(widget(), mini) == ["spec.size: Required value"]
    errors = validate_against_crd(widget(size=1, count="two", tags=[1]), mini)
    assert (
        'spec.count: Invalid value: "string": spec.count in body must be of type integer: "string"' in errors
    )
    assert any(e.startswith("spec.tags[0]: Invalid value") for e in errors)


def test_unknown_fields_only_when_asked(mini: dict[Any, Any]) -> None:
    obj = widget(size=1, bogus=True, free={"anything": 1})
    assert validate_against_crd(obj, mini) == []
    assert validate_against_crd(obj, mini, unknown_fields=True) == ['unknown field "spec.bogus"']


def test_metadata_checked_loosely(mini: dict[Any, Any]) -> None:
    obj = widget(size=1)
    obj["metadata"] = {"name": "w", "labels": {"a": "b"}, "uid": "x", "whatever": {}}
    assert validate_against_crd(obj, mini, unknown_fields=True) == []
    obj["metadata"]["labels"] = {"a": 1}
    assert validate_against_crd(obj, mini) != []


def test_no_schema_is_a_clear_error(mini: dict[Any, Any]) -> None:
    with pytest.raises(NoSchemaError, match=r"no CRD schema for apiVersion 'example\.com/v2' kind 'Widget'"):
        validate_against_crd({"apiVersion": "example.com/v2", "kind": "Widget"}, mini)


def test_apply_defaults(mini: dict[Any, Any]) -> None:
    obj = widget(size=1)
    apply_crd_defaults(obj, mini)
    assert obj["spec"]["mode"] == "Fast"
    obj["spec"]["mode"] = "Slow"
    apply_crd_defaults(obj, mini)
    assert obj["spec"]["mode"] == "Slow"


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_crd_schemas(tmp_path / "absent")


# ------------------------------------------------------------------------------------------------
# the real Kruise CRDs
# ------------------------------------------------------------------------------------------------


@needs_crds
def test_kruise_schemas_present_and_released_versions_preferred() -> None:
    schemas = load_crd_schemas()
    for key in [
        ("apps.kruise.io", "v1alpha1", "ImagePullJob"),
        ("apps.kruise.io", "v1beta1", "ImagePullJob"),
        ("apps.kruise.io", "v1alpha1", "ContainerRecreateRequest"),
        ("apps.kruise.io", "v1beta1", "NodeImage"),
    ]:
        assert key in schemas
    # v1.9.0 serves ContainerRecreateRequest as v1alpha1 only (master's v1beta1 is unreleased).
    assert ("apps.kruise.io", "v1beta1", "ContainerRecreateRequest") not in schemas


@needs_crds
@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_defaulted_image_pull_job_matches_crd(version: str) -> None:
    job = {
        "apiVersion": f"apps.kruise.io/{version}",
        "kind": "ImagePullJob",
        "metadata": {"name": "prewarm", "namespace": "data"},
        "spec": {
            "image": "acme/transform:2.0",
            "selector": {"names": ["node-1"]},
            "parallelism": 1,
            "completionPolicy": {"activeDeadlineSeconds": 900, "ttlSecondsAfterFinished": 300},
        },
    }
    admit_image_pull_job(job, True)
    assert validate_against_crd(job, unknown_fields=True) == []
    # The mutating webhook fills the required completionPolicy the schema asks for.
    bare = copy.deepcopy(job)
    del bare["spec"]["completionPolicy"]
    assert validate_against_crd(bare) == ["spec.completionPolicy: Required value"]
    admit_image_pull_job(bare, True)
    assert validate_against_crd(bare, unknown_fields=True) == []


@needs_crds
def test_image_pull_job_schema_catches_type_errors() -> None:
    job = {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {"name": "p"},
        "spec": {
            "image": "x:1",
            "completionPolicy": {"type": "Always"},
            "pullPolicy": {"timeoutSeconds": "10"},
        },
    }
    assert validate_against_crd(job) == [
        'spec.pullPolicy.timeoutSeconds: Invalid value: "string": '
        'spec.pullPolicy.timeoutSeconds in body must be of type integer: "string"'
    ]


@needs_crds
def test_defaulted_crr_matches_crd() -> None:
    pod = {
        "metadata": {"name": "chain", "namespace": "data", "uid": "uid-1"},
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {
                    "name": "slot-a",
                    "image": "acme/x:1",
                    "ports": [{"containerPort": 8080}],
                    "lifecycle": {"preStop": {"httpGet": {"path": "/stop", "port": 8080}}},
                }
            ],
        },
    }
    default_pod(pod)
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": "slot-a", "containerID": "local://abc", "restartCount": 1}],
    }
    crr = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "rerun", "namespace": "data"},
        "spec": {
            "podName": "chain",
            "containers": [{"name": "slot-a"}],
            "strategy": {"minStartedSeconds": 1},
            "activeDeadlineSeconds": 300,
            "ttlSecondsAfterFinished": 600,
        },
    }
    admit_crr(crr, pod)
    assert crr["spec"]["containers"][0]["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert validate_against_crd(crr, unknown_fields=True) == []


@needs_crds
def test_crr_schema_defaults_port_protocol() -> None:
    crr = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "rerun"},
        "spec": {"podName": "p", "containers": [{"name": "c", "ports": [{"containerPort": 80}]}]},
    }
    apply_crd_defaults(crr)
    assert crr["spec"]["containers"][0]["ports"][0]["protocol"] == "TCP"


@needs_crds
def test_defaulted_node_image_matches_crd() -> None:
    obj = {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "NodeImage",
        "metadata": {"name": "node-1"},
        "spec": {
            "images": {
                "acme/transform": {"tags": [{"tag": "2.0", "pullPolicy": {"ttlSecondsAfterFinished": 1}}]}
            }
        },
    }
    admit_node_image(obj)
    assert validate_against_crd(obj, unknown_fields=True) == []
