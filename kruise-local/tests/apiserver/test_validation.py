"""Unit tests for the local API server's admission: names and metadata, quantities and image references,
Namespace, ConfigMap, Event and Node, and malformed input of every kind (an ApiError, never a crash). Pods
are in test_validation_pod.py and test_validation_pod_update.py, the Kruise objects in
test_validation_kruise.py."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kruise_local.errors import ApiError
from kruise_local.validation import (
    admit_crr,
    admit_image_pull_job,
    admit_node_image,
    cpu_millis,
    default_event,
    default_namespace,
    default_node,
    default_pod,
    format_quantity,
    is_dns1123_label,
    is_dns1123_subdomain,
    memory_bytes,
    parse_image_reference,
    parse_quantity,
    validate_configmap,
    validate_crr_update,
    validate_event,
    validate_image_pull_job_update,
    validate_metadata,
    validate_metadata_update,
    validate_namespace,
    validate_node,
    validate_pod_create,
    validate_pod_update,
)
from validation_helpers import causes_of, make_crr, make_job, make_node_image, running_pod

# ------------------------------------------------------------------------------------------------
# names and metadata
# ------------------------------------------------------------------------------------------------


def test_dns_names() -> None:
    assert is_dns1123_label("my-name") == []
    assert is_dns1123_label("a.b") == ["must not contain dots"]
    assert is_dns1123_label("a" * 64)[0] == "must be no more than 63 characters"
    assert is_dns1123_label("Bad")[0].startswith("a lowercase RFC 1123 label must consist")
    assert is_dns1123_subdomain("a.b-c.d") == []
    assert is_dns1123_subdomain("a" * 254)[0] == "must be no more than 253 characters"
    assert is_dns1123_subdomain("-a")[0].startswith("a lowercase RFC 1123 subdomain must consist")


@settings(max_examples=60, deadline=None)
@given(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True))
def test_dns_label_accepts_well_formed(name: str) -> None:
    assert is_dns1123_label(name) == []
    assert is_dns1123_subdomain(name) == []


def test_metadata_name_required_and_format() -> None:
    causes = validate_metadata("ConfigMap", {"metadata": {"namespace": "d"}}, True)
    assert causes == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required",
            "field": "metadata.name",
        }
    ]
    causes = validate_metadata("ConfigMap", {"metadata": {"name": "Bad_Name", "namespace": "d"}}, True)
    assert causes[0]["field"] == "metadata.name"
    assert causes[0]["message"].startswith('Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain')
    assert validate_metadata("ConfigMap", {"metadata": {"name": "a.b", "namespace": "d"}}, True) == []


def test_metadata_namespace_rules() -> None:
    assert validate_metadata("Pod", {"metadata": {"name": "p"}}, True)[0]["field"] == "metadata.namespace"
    cluster = validate_metadata("Node", {"metadata": {"name": "n", "namespace": "x"}}, False)
    assert cluster[0]["message"] == "Forbidden: not allowed on this type"
    # Namespace names are labels: no dots.
    dotted = validate_metadata("Namespace", {"metadata": {"name": "a.b"}}, False)
    assert dotted[0]["message"] == 'Invalid value: "a.b": must not contain dots'
    assert validate_metadata("Namespace", {"metadata": {"name": "data"}}, False) == []


def test_metadata_generate_name_may_end_with_dash() -> None:
    obj = {"metadata": {"generateName": "chain-", "name": "chain-x7k2p", "namespace": "d"}}
    assert validate_metadata("Pod", obj, True) == []


def test_metadata_labels_and_annotations() -> None:
    obj = {
        "metadata": {
            "name": "p",
            "namespace": "d",
            "labels": {"good/key": "v", "bad key": "v", "k": "bad value!"},
            "annotations": {"ok.io/x": "y", "not ok": "z"},
        }
    }
    causes = validate_metadata("Pod", obj, True)
    fields = [c["field"] for c in causes]
    assert fields.count("metadata.labels") == 2
    assert fields.count("metadata.annotations") == 1
    assert any('"bad key"' in c["message"] for c in causes)
    assert any('"bad value!"' in c["message"] for c in causes)


def test_metadata_annotations_total_size() -> None:
    ok = {"metadata": {"name": "p", "namespace": "d", "annotations": {"a": "x" * (256 * 1024 - 1)}}}
    assert validate_metadata("Pod", ok, True) == []
    big = {"metadata": {"name": "p", "namespace": "d", "annotations": {"a": "x" * (256 * 1024)}}}
    (cause,) = validate_metadata("Pod", big, True)
    assert cause == {
        "reason": "FieldValueTooLong",
        "message": "Too long: may not be more than 262144 bytes",
        "field": "metadata.annotations",
    }


def test_metadata_finalizers_and_owner_references() -> None:
    obj = {
        "metadata": {
            "name": "p",
            "namespace": "d",
            "finalizers": ["kubernetes", "example.com/keep", "bogus"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "x"}],
        }
    }
    causes = {c["field"]: c["message"] for c in validate_metadata("Pod", obj, True)}
    assert causes["metadata.finalizers[2]"] == (
        'Invalid value: "bogus": name is neither a standard finalizer name nor is it fully qualified'
    )
    assert causes["metadata.ownerReferences[0].uid"] == "Required value: must not be empty"


def test_metadata_update_immutable_fields() -> None:
    old = {
        "metadata": {"name": "p", "namespace": "d", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"}
    }
    same = copy.deepcopy(old)
    same["metadata"]["labels"] = {"new": "label"}
    assert validate_metadata_update("Pod", old, same) == []
    changed = {
        "metadata": {"name": "q", "namespace": "e", "uid": "u2", "creationTimestamp": "2026-01-02T00:00:00Z"}
    }
    causes = {c["field"]: c["message"] for c in validate_metadata_update("Pod", old, changed)}
    assert causes == {
        "metadata.name": 'Invalid value: "q": field is immutable',
        "metadata.namespace": 'Invalid value: "e": field is immutable',
        "metadata.uid": 'Invalid value: "u2": field is immutable',
        "metadata.creationTimestamp": 'Invalid value: "2026-01-02T00:00:00Z": field is immutable',
    }


def test_metadata_update_no_new_finalizer_while_deleting() -> None:
    old = {"metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["a.io/x"]}}
    new = copy.deepcopy(old)
    assert validate_metadata_update("Pod", old, new) == []
    new["metadata"]["finalizers"].append("b.io/y")
    (cause,) = validate_metadata_update("Pod", old, new)
    assert cause["message"] == (
        "Forbidden: no new finalizers can be added if the object is being deleted, "
        'found new finalizers []string{"b.io/y"}'
    )


# ------------------------------------------------------------------------------------------------
# quantities and image references
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "amount", "canonical"),
    [
        ("100Mi", Decimal(100 * 2**20), "100Mi"),
        ("1G", Decimal(10**9), "1G"),
        ("500m", Decimal("0.5"), "500m"),
        ("2", Decimal(2), "2"),
        ("1e3", Decimal(1000), "1e3"),
        ("1024Mi", Decimal(2**30), "1Gi"),
        ("1000m", Decimal(1), "1"),
        ("0.5", Decimal("0.5"), "500m"),
        ("1.5Gi", Decimal(3 * 2**29), "1536Mi"),
        (3, Decimal(3), "3"),
    ],
)
def test_parse_and_format_quantity(text: Any, amount: Decimal, canonical: str) -> None:
    assert parse_quantity(text) == amount
    assert format_quantity(text) == canonical


@pytest.mark.parametrize("text", ["", "abc", "1x", "1.2.3", "+", "1e"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantit"):
        parse_quantity(text)


def test_cpu_and_memory_helpers() -> None:
    assert cpu_millis("500m") == 500
    assert cpu_millis("2") == 2000
    assert cpu_millis("0.0001") == 1  # rounded up
    assert memory_bytes("100Mi") == 104857600
    assert memory_bytes("1G") == 10**9


@settings(max_examples=80, deadline=None)
@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["", "m", "k", "M", "Ki", "Mi", "Gi"]))
def test_format_quantity_preserves_amount(number: int, suffix: str) -> None:
    text = f"{number}{suffix}"
    assert parse_quantity(format_quantity(text)) == parse_quantity(text)


def test_image_references() -> None:
    assert str(parse_image_reference("busybox")) == "docker.io/library/busybox"
    assert str(parse_image_reference("acme/extract:1.4")) == "docker.io/acme/extract:1.4"
    ref = parse_image_reference("localhost:5000/team/app:v2")
    assert (ref.domain, ref.path, ref.tag) == ("localhost:5000", "team/app", "v2")
    digest = "sha256:" + "a" * 64
    assert parse_image_reference(f"busybox@{digest}").digest == digest


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("Busybox", "invalid reference format: repository name must be lowercase"),
        ("a:b:c", "invalid reference format"),
        ("busybox@sha256:abc", "invalid reference format"),
        ("busybox@md5:" + "0" * 32, "unsupported digest algorithm"),
        ("a" * 64, "cannot specify 64-byte hexadecimal strings"),
        ("x" * 300, "repository name must not be more than 255 characters"),
    ],
)
def test_image_reference_errors(ref: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_image_reference(ref)
    assert str(exc.value).endswith(message)


# ------------------------------------------------------------------------------------------------
# Namespace, ConfigMap, Event, Node
# ------------------------------------------------------------------------------------------------


def test_namespace_defaults_and_name() -> None:
    ns: dict[str, Any] = {"metadata": {"name": "data"}}
    default_namespace(ns)
    assert ns["status"] == {"phase": "Active"}
    assert ns["spec"]["finalizers"] == ["kubernetes"]
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == "data"
    validate_namespace(ns)
    with pytest.raises(ApiError) as exc:
        validate_namespace({"metadata": {"name": "my.ns"}})
    assert causes_of(exc)["metadata.name"] == 'Invalid value: "my.ns": must not contain dots'


def test_configmap_keys_and_size() -> None:
    validate_configmap(
        {"metadata": {"name": "runner", "namespace": "d"}, "data": {"run.sh": "echo", "A_B-c": ""}}
    )
    with pytest.raises(ApiError) as exc:
        validate_configmap({"metadata": {"name": "runner", "namespace": "d"}, "data": {"bad/key": "x"}})
    assert causes_of(exc)["data[bad/key]"].startswith(
        'Invalid value: "bad/key": a valid config key must consist of alphanumeric characters'
    )
    validate_configmap({"metadata": {"name": "big", "namespace": "d"}, "data": {"k": "x" * (1024 * 1024)}})
    with pytest.raises(ApiError) as exc:
        validate_configmap(
            {"metadata": {"name": "big", "namespace": "d"}, "data": {"k": "x" * (1024 * 1024 + 1)}}
        )
    assert exc.value.causes[0]["message"] == "Too long: may not be more than 1048576 bytes"
    assert exc.value.causes[0]["reason"] == "FieldValueTooLong"


def test_event_defaults_and_namespace_match() -> None:
    event: dict[str, Any] = {
        "metadata": {"name": "chain.17a", "namespace": "data"},
        "involvedObject": {"kind": "Pod", "name": "chain", "namespace": "data"},
        "reason": "Pulled",
    }
    default_event(event)
    assert event["reportingComponent"] == "" and event["eventTime"] is None
    validate_event(event)
    event["involvedObject"]["namespace"] = "other"
    with pytest.raises(ApiError) as exc:
        validate_event(event)
    assert (
        causes_of(exc)["involvedObject.namespace"] == 'Invalid value: "other": does not match event.namespace'
    )


def test_node_defaults_and_name() -> None:
    node: dict[str, Any] = {"metadata": {"name": "node-1"}, "status": {"capacity": {"cpu": "4"}}}
    default_node(node)
    assert node["status"]["allocatable"] == {"cpu": "4"}
    validate_node(node)
    with pytest.raises(ApiError):
        validate_node({"metadata": {"name": "node-1", "namespace": "d"}})


# ------------------------------------------------------------------------------------------------
# robustness: malformed input gives an ApiError, never a crash
# ------------------------------------------------------------------------------------------------

_KEYS = (
    "name image env valueFrom fieldRef fieldPath resources limits requests cpu volumeMounts mountPath ports "
    "containerPort tolerations key operator emptyDir"
).split()
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from(["", "a", "x:1", "Always", "1Gi", "-1"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), children, max_size=4)
    ),
    max_leaves=12,
)
_spec_keys = st.sampled_from(
    (
        "containers initContainers volumes tolerations restartPolicy activeDeadlineSeconds schedulingGates "
        "nodeSelector terminationGracePeriodSeconds dnsPolicy"
    ).split()
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(_spec_keys, _json, max_size=5))
def test_pod_validation_never_crashes(spec: dict[str, Any]) -> None:
    pod = {"metadata": {"name": "p", "namespace": "d"}, "spec": spec}
    try:
        default_pod(pod)
        validate_pod_create(pod)
        new = copy.deepcopy(pod)
        new["spec"]["activeDeadlineSeconds"] = 5
        validate_pod_update(pod, new)
    except ApiError:
        pass


@settings(max_examples=150, deadline=None)
@given(_json, _json)
def test_kruise_admission_never_crashes(spec: Any, other: Any) -> None:
    job = {"apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob", "metadata": {"name": "j"}}
    job["spec"] = {"image": "x:1", "completionPolicy": other, "selector": spec}
    crr = make_crr(containers=[spec] if isinstance(spec, dict) else spec, strategy=other)
    for call in (lambda: admit_image_pull_job(job, True), lambda: admit_crr(crr, running_pod())):
        try:
            call()
        except ApiError:
            pass


def test_update_wrappers() -> None:
    old = make_job(pullSecrets=["a"])
    admit_image_pull_job(old, True)
    new = copy.deepcopy(old)
    del new["spec"]["pullPolicy"]
    validate_image_pull_job_update(old, new)
    assert new["spec"]["pullPolicy"] == {"timeoutSeconds": 600, "backoffLimit": 3}
    with pytest.raises(ApiError, match="ImagePullJobGate is not enabled"):
        validate_image_pull_job_update(old, copy.deepcopy(old), gate_enabled=False)
    crr = make_crr()
    admit_crr(crr, running_pod())
    changed = copy.deepcopy(crr)
    changed["spec"]["ttlSecondsAfterFinished"] = 1
    with pytest.raises(ApiError, match="spec of ContainerRecreateRequest is immutable"):
        validate_crr_update(crr, changed)
    validate_crr_update(crr, copy.deepcopy(crr))


@pytest.mark.parametrize(
    ("image_spec", "message"),
    [
        (
            [{"tags": [{"tag": "1.36"}]}],
            "json: cannot unmarshal array into Go struct field NodeImage.spec.images.acme/transform "
            "of type v1alpha1.ImageSpec",
        ),
        (
            {"tags": ["1.36"]},
            "json: cannot unmarshal array into Go struct field NodeImage.spec.images.acme/transform.tags "
            "of type []v1alpha1.ImageTagSpec",
        ),
    ],
)
def test_node_image_that_would_not_decode(image_spec: Any, message: str) -> None:
    """Found by the API fuzz test: a list where the webhook's Go type wants an object gave a 500."""
    obj = make_node_image([])
    obj["spec"]["images"]["acme/transform"] = image_spec
    with pytest.raises(ApiError) as exc:
        admit_node_image(obj)
    assert exc.value.code == 400
    assert exc.value.message == f'admission webhook "vnodeimage.kb.io" denied the request: {message}'
