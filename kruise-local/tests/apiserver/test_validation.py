"""Unit tests for the local API server's admission: defaulting and validation of core and Kruise objects."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kruise_local.errors import ApiError
from kruise_local.validation import (
    CRR_WEBHOOK,
    IMAGE_PULL_JOB_WEBHOOK,
    POD_UPDATE_FORBIDDEN,
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
    mutate_image_pull_job,
    parse_image_reference,
    parse_quantity,
    pod_qos_class,
    prepare_pod_resize,
    validate_configmap,
    validate_crr_update,
    validate_event,
    validate_image_pull_job,
    validate_image_pull_job_update,
    validate_metadata,
    validate_metadata_update,
    validate_namespace,
    validate_node,
    validate_pod_create,
    validate_pod_resize,
    validate_pod_update,
    webhook_denial,
)

# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------


def make_pod(**spec: Any) -> dict[str, Any]:
    """A chain-like pod: two slots sharing a scratch emptyDir, defaulted as the API server would."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "chain", "namespace": "data", "labels": {"app": "chain"}},
        "spec": {
            "containers": [
                {
                    "name": "slot-a",
                    "image": "acme/extract:1.4",
                    "command": ["/bin/sh", "/runner/run.sh"],
                    "env": [
                        {
                            "name": "AKC_GENERATION",
                            "valueFrom": {
                                "fieldRef": {"fieldPath": "metadata.annotations['akc/generation']"}
                            },
                        }
                    ],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                },
                {"name": "slot-b", "image": "acme/transform:2.0"},
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }
    pod["spec"].update(spec)
    default_pod(pod)
    return pod


def causes_of(exc: pytest.ExceptionInfo[ApiError]) -> dict[str, str]:
    """field -> message of a 422's causes."""
    assert exc.value.code == 422
    assert exc.value.reason == "Invalid"
    return {c["field"]: c["message"] for c in exc.value.causes}


def reasons_of(exc: pytest.ExceptionInfo[ApiError]) -> dict[str, str]:
    return {c["field"]: c["reason"] for c in exc.value.causes}


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
# pod defaulting
# ------------------------------------------------------------------------------------------------


def test_default_pod_spec_and_containers() -> None:
    pod = make_pod()
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["securityContext"] == {}
    assert spec["enableServiceLinks"] is True
    assert spec["serviceAccountName"] == "default"
    a, b = spec["containers"]
    assert a["terminationMessagePath"] == "/dev/termination-log"
    assert a["terminationMessagePolicy"] == "File"
    assert a["resources"] == {} and b["resources"] == {}
    assert a["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert pod["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("busybox", "Always"),
        ("busybox:latest", "Always"),
        ("acme/x:1.0", "IfNotPresent"),
        ("busybox@sha256:" + "b" * 64, "IfNotPresent"),
        ("localhost:5000/app", "Always"),
    ],
)
def test_default_image_pull_policy(image: str, policy: str) -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }
    default_pod(pod)
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == policy


def test_default_pod_keeps_explicit_values() -> None:
    pod = make_pod(restartPolicy="Never", terminationGracePeriodSeconds=5)
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 5


def test_default_probe_timings() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "d"},
        "spec": {
            "containers": [{"name": "c", "image": "x:1", "readinessProbe": {"exec": {"command": ["true"]}}}]
        },
    }
    default_pod(pod)
    probe = pod["spec"]["containers"][0]["readinessProbe"]
    assert (probe["periodSeconds"], probe["timeoutSeconds"]) == (10, 1)
    assert (probe["successThreshold"], probe["failureThreshold"]) == (1, 3)


def test_default_tolerations_added_once() -> None:
    pod = make_pod()
    tolerations = pod["spec"]["tolerations"]
    assert tolerations == [
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    default_pod(pod, create=False)
    assert len(pod["spec"]["tolerations"]) == 2
    # A toleration for every taint covers both.
    wide = make_pod(tolerations=[{"operator": "Exists"}])
    assert wide["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_qos_classes() -> None:
    guaranteed = make_pod()
    for ctr in guaranteed["spec"]["containers"]:
        ctr["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    default_pod(guaranteed)
    assert guaranteed["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert guaranteed["status"]["qosClass"] == "Guaranteed"
    burstable = make_pod()
    burstable["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    assert pod_qos_class(burstable) == "Burstable"
    assert pod_qos_class(make_pod()) == "BestEffort"


# ------------------------------------------------------------------------------------------------
# pod create
# ------------------------------------------------------------------------------------------------


def test_valid_pod_passes() -> None:
    validate_pod_create(make_pod())


def test_containers_required() -> None:
    pod = make_pod(containers=[])
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert causes_of(exc)["spec.containers"] == "Required value"
    assert exc.value.message == 'Pod "chain" is invalid: spec.containers: Required value'


def test_container_names_labels_and_unique() -> None:
    pod = make_pod()
    pod["spec"]["containers"][1]["name"] = "slot-a"
    pod["spec"]["initContainers"] = [{"name": "Init_1", "image": "x:1"}, {"name": "slot-b", "image": "x:1"}]
    default_pod(pod)
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.containers[1].name"] == 'Duplicate value: "slot-a"'
    assert causes["spec.initContainers[0].name"].startswith(
        'Invalid value: "Init_1": a lowercase RFC 1123 label'
    )
    assert reasons_of(exc)["spec.containers[1].name"] == "FieldValueDuplicate"
    # init container names also collide with regular ones
    pod = make_pod(initContainers=[{"name": "slot-a", "image": "x:1"}])
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert causes_of(exc)["spec.initContainers[0].name"] == 'Duplicate value: "slot-a"'


def test_image_required_and_trimmed() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["image"] = ""
    pod["spec"]["containers"][1]["image"] = " acme/x:1"
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.containers[0].image"] == "Required value"
    assert causes["spec.containers[1].image"] == (
        'Invalid value: " acme/x:1": must not have leading or trailing whitespace'
    )


def test_restart_policy_supported_values() -> None:
    for policy in ("Always", "OnFailure", "Never"):
        validate_pod_create(make_pod(restartPolicy=policy))
    with pytest.raises(ApiError) as exc:
        validate_pod_create(make_pod(restartPolicy="Sometimes"))
    assert causes_of(exc)["spec.restartPolicy"] == (
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"'
    )
    assert reasons_of(exc)["spec.restartPolicy"] == "FieldValueNotSupported"


def test_volumes_unique_named_and_one_source() -> None:
    pod = make_pod(
        volumes=[
            {"name": "scratch", "emptyDir": {}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "two", "emptyDir": {}, "configMap": {"name": "cm"}},
            {"name": "none"},
            {"name": "Bad_Name", "emptyDir": {}},
        ]
    )
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.volumes[1].name"] == 'Duplicate value: "scratch"'
    assert causes["spec.volumes[2].configMap"] == "Forbidden: may not specify more than 1 volume type"
    assert causes["spec.volumes[3]"] == "Required value: must specify a volume type"
    assert causes["spec.volumes[4].name"].startswith('Invalid value: "Bad_Name"')


def test_volume_mounts_reference_volumes_and_unique_paths() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "missing", "mountPath": "/scratch"},
        {"name": "scratch", "mountPath": ""},
    ]
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.containers[0].volumeMounts[1].name"] == 'Not found: "missing"'
    assert (
        causes["spec.containers[0].volumeMounts[1].mountPath"] == 'Invalid value: "/scratch": must be unique'
    )
    assert causes["spec.containers[0].volumeMounts[2].mountPath"] == "Required value"


def test_env_names() -> None:
    pod = make_pod()
    pod["spec"]["containers"][1]["env"] = [
        {"name": "GOOD_NAME.x-1", "value": "v"},
        {"name": "1BAD", "value": "v"},
        {"name": "", "value": "v"},
    ]
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert "spec.containers[1].env[0].name" not in causes
    assert causes["spec.containers[1].env[1].name"].startswith(
        'Invalid value: "1BAD": a valid environment variable name must consist of alphabetic characters'
    )
    assert causes["spec.containers[1].env[2].name"] == "Required value"
    # The relaxed rule (RelaxedEnvironmentVariableValidation) accepts a leading digit.
    pod["spec"]["containers"][1]["env"] = [{"name": "1BAD", "value": "v"}]
    validate_pod_create(pod, relaxed_env_names=True)


@pytest.mark.parametrize(
    "path",
    [
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.labels['app']",
        "metadata.annotations['akc/generation']",
        "spec.nodeName",
        "spec.serviceAccountName",
        "status.hostIP",
        "status.podIP",
        "status.podIPs",
    ],
)
def test_env_field_ref_supported(path: str) -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": path}}}]
    default_pod(pod)
    validate_pod_create(pod)


def test_env_field_ref_unsupported() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["env"] = [
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}},
        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
        {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}},
        {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName['x']"}}},
        {"name": "E", "value": "v", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "F", "valueFrom": {}},
    ]
    default_pod(pod)
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    base = "spec.containers[0].env"
    supported = (
        'supported values: "metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", '
        '"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"'
    )
    assert (
        causes[f"{base}[0].valueFrom.fieldRef.fieldPath"] == f'Unsupported value: "status.phase": {supported}'
    )
    assert (
        causes[f"{base}[1].valueFrom.fieldRef.fieldPath"]
        == f'Unsupported value: "metadata.labels": {supported}'
    )
    assert causes[f"{base}[2].valueFrom.fieldRef.fieldPath"] == (
        'Invalid value: "spec.bogus": error converting fieldPath: field label not supported: spec.bogus'
    )
    assert "does not support subscript" in causes[f"{base}[3].valueFrom.fieldRef.fieldPath"]
    assert (
        causes[f"{base}[4].valueFrom"] == 'Invalid value: "": may not be specified when `value` is not empty'
    )
    assert causes[f"{base}[5].valueFrom"].endswith(
        "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"
    )


def test_env_field_ref_bad_subscript_key() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] = (
        "metadata.labels['bad key']"
    )
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert "spec.containers[0].env[0].valueFrom.fieldRef" in causes_of(exc)


def test_resources_requests_not_above_limits() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "100Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert causes_of(exc) == {
        "spec.containers[0].resources.requests": (
            'Invalid value: "2": must be less than or equal to cpu limit of 1'
        )
    }
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    validate_pod_create(pod)


def test_resources_negative_and_unknown_names() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "-1", "gpu": "1"}}
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.containers[0].resources.requests[cpu]"] == (
        'Invalid value: "-1": must be greater than or equal to 0'
    )
    assert causes["spec.containers[0].resources.requests[gpu]"] == (
        'Invalid value: "gpu": must be a standard resource for containers'
    )


def test_unparseable_quantity_is_a_decode_error() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"memory": "lots"}}
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert exc.value.code == 400
    assert exc.value.reason == "BadRequest"
    assert exc.value.message == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


def test_active_deadline_seconds_positive() -> None:
    validate_pod_create(make_pod(activeDeadlineSeconds=1))
    with pytest.raises(ApiError) as exc:
        validate_pod_create(make_pod(activeDeadlineSeconds=0))
    assert causes_of(exc)["spec.activeDeadlineSeconds"] == (
        "Invalid value: 0: must be between 1 and 2147483647, inclusive"
    )


def test_probes_and_pull_policy() -> None:
    pod = make_pod()
    pod["spec"]["containers"][0]["livenessProbe"] = {"successThreshold": 2, "periodSeconds": 10}
    pod["spec"]["containers"][1]["imagePullPolicy"] = "Sometimes"
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.containers[0].livenessProbe"] == "Required value: must specify a handler type"
    assert causes["spec.containers[0].livenessProbe.successThreshold"] == "Invalid value: 2: must be 1"
    assert causes["spec.containers[1].imagePullPolicy"] == (
        'Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"'
    )


def test_tolerations_validated() -> None:
    pod = make_pod(tolerations=[{"key": "", "operator": "Equal", "value": "x"}])
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert "operator must be Exists when `key` is empty" in causes_of(exc)["spec.tolerations[0].operator"]


def test_all_causes_reported_together() -> None:
    pod = make_pod(restartPolicy="Bad", activeDeadlineSeconds=-5)
    pod["metadata"]["name"] = "Bad"
    pod["spec"]["containers"][0]["image"] = ""
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    assert len(exc.value.causes) == 4
    assert exc.value.message.startswith('Pod "Bad" is invalid: [metadata.name: Invalid value: "Bad"')


def test_ephemeral_containers_and_gated_node_name_on_create() -> None:
    pod = make_pod(
        ephemeralContainers=[{"name": "dbg", "image": "busybox:1"}],
        nodeName="node-1",
        schedulingGates=[{"name": "example.com/wait"}],
    )
    with pytest.raises(ApiError) as exc:
        validate_pod_create(pod)
    causes = causes_of(exc)
    assert causes["spec.ephemeralContainers"] == "Forbidden: cannot be set on create"
    assert causes["spec.nodeName"] == "Forbidden: cannot be set until all schedulingGates have been cleared"


# ------------------------------------------------------------------------------------------------
# pod update
# ------------------------------------------------------------------------------------------------


def updated(pod: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(pod)
    new["metadata"]["resourceVersion"] = "2"
    return new


def test_update_image_labels_annotations_allowed() -> None:
    old = make_pod()
    new = updated(old)
    new["spec"]["containers"][0]["image"] = "acme/load:1.1"
    new["metadata"]["labels"]["stage"] = "load"
    new["metadata"]["annotations"] = {"akc/generation": "3"}
    new["metadata"]["finalizers"] = ["example.com/keep"]
    default_pod(new, create=False)
    validate_pod_update(old, new)


def test_update_init_container_image_allowed() -> None:
    old = make_pod(initContainers=[{"name": "init", "image": "busybox:1"}])
    new = updated(old)
    new["spec"]["initContainers"][0]["image"] = "busybox:2"
    validate_pod_update(old, new)


def test_update_other_spec_field_forbidden() -> None:
    old = make_pod()
    new = updated(old)
    new["spec"]["containers"][0]["command"] = ["/bin/sh", "-c", "echo hi"]
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, new)
    assert exc.value.code == 422
    assert exc.value.reason == "Invalid"
    assert exc.value.message.startswith(f'Pod "chain" is invalid: spec: Forbidden: {POD_UPDATE_FORBIDDEN}\n')
    assert "pod updates may not change fields other than" in exc.value.message
    assert "containers[0].command" in exc.value.message
    assert reasons_of(exc) == {"spec": "FieldValueForbidden"}


def test_update_message_is_the_real_one() -> None:
    assert POD_UPDATE_FORBIDDEN == (
        "pod updates may not change fields other than `spec.containers[*].image`,"
        "`spec.initContainers[*].image`,"
        "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(restartPolicy="Never"),
        lambda s: s["containers"][0].update(env=[]),
        lambda s: s["volumes"].append({"name": "more", "emptyDir": {}}),
        lambda s: s.update(nodeSelector={"a": "b"}),
        lambda s: s["containers"][0].update(resources={"limits": {"cpu": "1"}}),
        lambda s: s.update(terminationGracePeriodSeconds=10),
    ],
)
def test_update_forbidden_changes(change: Any) -> None:
    old = make_pod()
    new = updated(old)
    change(new["spec"])
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, new)
    assert "spec" in causes_of(exc)


def test_update_add_or_remove_containers_forbidden() -> None:
    old = make_pod()
    for change in (
        lambda s: s["containers"].pop(),
        lambda s: s["containers"].append({"name": "slot-c", "image": "x:1"}),
    ):
        new = updated(old)
        change(new["spec"])
        default_pod(new, create=False)
        with pytest.raises(ApiError) as exc:
            validate_pod_update(old, new)
        assert exc.value.message == (
            'Pod "chain" is invalid: spec.containers: Forbidden: pod updates may not add or remove containers'
        )


def test_update_empty_image_required() -> None:
    old = make_pod()
    new = updated(old)
    new["spec"]["containers"][1]["image"] = ""
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, new)
    assert causes_of(exc)["spec.containers[1].image"] == "Required value"


def test_update_immutable_metadata() -> None:
    old = make_pod()
    old["metadata"]["uid"] = "u1"
    new = updated(old)
    new["metadata"]["uid"] = "u2"
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, new)
    assert causes_of(exc) == {"metadata.uid": 'Invalid value: "u2": field is immutable'}


def test_update_active_deadline_seconds() -> None:
    old = make_pod()
    new = updated(old)
    new["spec"]["activeDeadlineSeconds"] = 600  # set when unset
    validate_pod_update(old, new)
    lowered = updated(new)
    lowered["spec"]["activeDeadlineSeconds"] = 300
    validate_pod_update(new, lowered)
    raised = updated(new)
    raised["spec"]["activeDeadlineSeconds"] = 900
    with pytest.raises(ApiError) as exc:
        validate_pod_update(new, raised)
    assert causes_of(exc)["spec.activeDeadlineSeconds"] == (
        "Invalid value: 900: must be less than or equal to previous value"
    )
    unset = updated(new)
    del unset["spec"]["activeDeadlineSeconds"]
    with pytest.raises(ApiError) as exc:
        validate_pod_update(new, unset)
    assert causes_of(exc)["spec.activeDeadlineSeconds"] == (
        "Invalid value: null: must not update from a positive integer to nil value"
    )


def test_update_tolerations_only_additions() -> None:
    old = make_pod(tolerations=[{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}])
    added = updated(old)
    added["spec"]["tolerations"].append({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"})
    validate_pod_update(old, added)
    seconds = updated(old)
    seconds["spec"]["tolerations"][1]["tolerationSeconds"] = 60  # the default not-ready toleration
    validate_pod_update(old, seconds)
    modified = updated(old)
    modified["spec"]["tolerations"][0]["value"] = "b"
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, modified)
    assert causes_of(exc)["spec.tolerations"] == (
        "Forbidden: existing toleration can not be modified except its tolerationSeconds"
    )


def test_update_scheduling_gates_only_removed() -> None:
    old = make_pod(schedulingGates=[{"name": "example.com/a"}, {"name": "example.com/b"}])
    removed = updated(old)
    removed["spec"]["schedulingGates"] = [{"name": "example.com/a"}]
    validate_pod_update(old, removed)
    added = updated(old)
    added["spec"]["schedulingGates"].append({"name": "example.com/c"})
    with pytest.raises(ApiError) as exc:
        validate_pod_update(old, added)
    assert causes_of(exc)["spec.schedulingGates[2].name"] == (
        "Forbidden: only deletion is allowed, but found new scheduling gate 'example.com/c'"
    )


def test_update_termination_grace_from_negative_to_one() -> None:
    old = make_pod(terminationGracePeriodSeconds=-1)
    new = updated(old)
    new["spec"]["terminationGracePeriodSeconds"] = 1
    validate_pod_update(old, new)


def test_update_ignores_semantically_equal_quantities() -> None:
    old = make_pod()
    old["spec"]["containers"][0]["resources"] = {"limits": {"memory": "1Gi"}, "requests": {"memory": "1Gi"}}
    new = updated(old)
    new["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1024Mi"
    validate_pod_update(old, new)


# ------------------------------------------------------------------------------------------------
# pod resize
# ------------------------------------------------------------------------------------------------


def resizable() -> dict[str, Any]:
    pod = make_pod()
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    }
    default_pod(pod)
    return pod


def test_resize_cpu_and_memory_allowed() -> None:
    old = resizable()
    new = updated(old)
    new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "400m"
    new["spec"]["containers"][0]["resources"]["requests"]["memory"] = "96Mi"
    validate_pod_resize(old, new)


def test_resize_other_changes_forbidden() -> None:
    old = resizable()
    for change in (
        lambda c: c["resources"]["limits"].update({"ephemeral-storage": "1Gi"}),
        lambda c: c.update(image="acme/other:1"),
    ):
        new = updated(old)
        change(new["spec"]["containers"][0])
        with pytest.raises(ApiError) as exc:
            validate_pod_resize(old, new)
        assert causes_of(exc) == {"spec": "Forbidden: only cpu and memory resources are mutable"}


def test_resize_limits_and_requests_not_removed_nor_memory_lowered() -> None:
    old = resizable()
    new = updated(old)
    del new["spec"]["containers"][0]["resources"]["limits"]
    with pytest.raises(ApiError) as exc:
        validate_pod_resize(old, new)
    assert (
        causes_of(exc)["spec.containers[0].resources.limits"]
        == "Forbidden: resource limits cannot be removed"
    )
    new = updated(old)
    new["spec"]["containers"][0]["resources"]["limits"]["memory"] = "100Mi"
    with pytest.raises(ApiError) as exc:
        validate_pod_resize(old, new)
    assert causes_of(exc)["spec.containers[0].resources.limits[memory]"] == (
        "Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"
    )
    new["spec"]["containers"][0]["resizePolicy"] = [
        {"resourceName": "memory", "restartPolicy": "RestartContainer"}
    ]
    old["spec"]["containers"][0]["resizePolicy"] = copy.deepcopy(new["spec"]["containers"][0]["resizePolicy"])
    validate_pod_resize(old, new)


def test_resize_qos_class_may_not_change() -> None:
    old = make_pod()
    for ctr in old["spec"]["containers"]:
        ctr["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    default_pod(old)
    assert old["status"]["qosClass"] == "Guaranteed"
    new = updated(old)
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    with pytest.raises(ApiError) as exc:
        validate_pod_resize(old, new)
    assert (
        causes_of(exc)["spec"]
        == 'Invalid value: "Guaranteed": Pod QOS Class may not change as a result of resizing'
    )


def test_prepare_pod_resize_keeps_only_resources() -> None:
    old = resizable()
    new = updated(old)
    new["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "1"
    new["spec"]["containers"][0]["image"] = "ignored:1"
    new["spec"]["restartPolicy"] = "Never"
    result = prepare_pod_resize(old, new)
    assert result["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"
    assert result["spec"]["containers"][0]["image"] == old["spec"]["containers"][0]["image"]
    assert result["spec"]["restartPolicy"] == "Always"
    validate_pod_resize(old, result)


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
# ImagePullJob
# ------------------------------------------------------------------------------------------------


def make_job(version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"image": "acme/transform:2.0", "selector": {"names": ["node-1"]}}
    body.update(spec)
    return {
        "apiVersion": f"apps.kruise.io/{version}",
        "kind": "ImagePullJob",
        "metadata": {"name": "prewarm", "namespace": "data"},
        "spec": body,
    }


def denial(job: dict[str, Any], gate: bool = True) -> ApiError:
    with pytest.raises(ApiError) as exc:
        admit_image_pull_job(job, gate)
    return exc.value


def test_image_pull_job_gate_off() -> None:
    job = make_job()
    before = copy.deepcopy(job)
    err = denial(job, gate=False)
    assert err.code == 403
    assert err.message == (
        f'admission webhook "{IMAGE_PULL_JOB_WEBHOOK}" denied the request: '
        "feature-gate ImagePullJobGate is not enabled"
    )
    assert err.reason == ""  # controller-runtime's admission.Errored sets no reason
    assert err.status()["code"] == 403
    assert job == before  # not mutated when refused
    with pytest.raises(ApiError, match="feature-gate KruiseDaemon is not enabled"):
        admit_image_pull_job(make_job(), True, kruise_daemon_enabled=False)


def test_image_pull_job_defaults() -> None:
    job = make_job()
    admit_image_pull_job(job, True)
    spec = job["spec"]
    assert spec["completionPolicy"] == {"type": "Always"}
    assert spec["pullPolicy"] == {"timeoutSeconds": 600, "backoffLimit": 3}
    assert spec["imagePullPolicy"] == "IfNotPresent"
    assert "parallelism" not in spec  # the controller reads unset as 1
    assert "finalizers" not in job["metadata"]


def test_image_pull_job_v1alpha1_gets_protection_finalizer_on_create() -> None:
    job = make_job("v1alpha1")
    mutate_image_pull_job(job)
    assert job["metadata"]["finalizers"] == ["apps.kruise.io/deletion-protection"]
    update = make_job("v1alpha1")
    mutate_image_pull_job(update, create=False)
    assert "finalizers" not in update["metadata"]


def test_image_pull_job_keeps_explicit_values() -> None:
    job = make_job(
        parallelism=2,
        pullPolicy={"timeoutSeconds": 60, "backoffLimit": 1},
        completionPolicy={"type": "Always", "activeDeadlineSeconds": 120, "ttlSecondsAfterFinished": 300},
    )
    admit_image_pull_job(job, True)
    assert job["spec"]["pullPolicy"] == {"timeoutSeconds": 60, "backoffLimit": 1}
    assert job["spec"]["completionPolicy"]["activeDeadlineSeconds"] == 120


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"image": ""}, "image can not be empty"),
        (
            {"image": "Acme/X:1"},
            "invalid image Acme/X:1: invalid reference format: repository name must be lowercase",
        ),
        ({"image": "acme/x:1:2"}, "invalid image acme/x:1:2: invalid reference format"),
        ({"completionPolicy": {"type": "Sometimes"}}, "unknown type of completionPolicy: Sometimes"),
        (
            {"completionPolicy": {"type": "Always", "activeDeadlineSeconds": 60}},
            "completionPolicy.activeDeadlineSeconds must be greater than "
            "pullPolicy.timeoutSeconds(default 600)",
        ),
        (
            {"completionPolicy": {"type": "Never", "ttlSecondsAfterFinished": 60}},
            "activeDeadlineSeconds and ttlSecondsAfterFinished can only work with Always "
            "CompletionPolicyType",
        ),
        (
            {"selector": {"names": ["a"], "matchLabels": {"x": "y"}}},
            "can not set both names and labelSelector in this spec.selector",
        ),
        ({"selector": {"names": ["a", "a"]}}, "duplicated name in selector names"),
        ({"podSelector": {"matchLabels": {"app": "chain"}}}, "can not set both selector and podSelector"),
        ({"parallelism": -1}, "parallelism must be non-negative"),
        ({"parallelism": "50%"}, "parallelism does not support percentage value"),
        (
            {"parallelism": "x"},
            'parallelism must be a valid integer: strconv.ParseInt: parsing "x": invalid syntax',
        ),
    ],
)
def test_image_pull_job_refusals(spec: dict[str, Any], message: str) -> None:
    err = denial(make_job(**spec))
    assert err.code == 400
    assert err.message == f'admission webhook "{IMAGE_PULL_JOB_WEBHOOK}" denied the request: {message}'


def test_image_pull_job_accepts_boundaries() -> None:
    admit_image_pull_job(make_job(completionPolicy={"type": "Always", "activeDeadlineSeconds": 600}), True)
    admit_image_pull_job(make_job(parallelism=0), True)
    admit_image_pull_job(make_job(parallelism="3"), True)
    admit_image_pull_job(make_job(completionPolicy={"type": "Never"}), True)
    job = make_job(selector=None, podSelector={"matchLabels": {"app": "chain"}})
    del job["spec"]["selector"]
    admit_image_pull_job(job, True)
    labels = make_job(selector={"matchLabels": {"kubernetes.io/hostname": "node-1"}})
    admit_image_pull_job(labels, True)


def test_image_pull_job_bad_label_selector() -> None:
    err = denial(make_job(selector={"matchExpressions": [{"key": "a", "operator": "In"}]}))
    assert err.message.startswith(
        f'admission webhook "{IMAGE_PULL_JOB_WEBHOOK}" denied the request: invalid selector:'
    )


def test_image_pull_job_pull_secrets_immutable() -> None:
    old = make_job(pullSecrets=["a"])
    admit_image_pull_job(old, True)
    new = copy.deepcopy(old)
    new["spec"]["pullSecrets"] = ["b"]
    with pytest.raises(ApiError) as exc:
        validate_image_pull_job(new, True, old=old)
    assert exc.value.code == 403
    assert exc.value.reason == "Forbidden"  # admission.Denied
    assert exc.value.message.endswith("denied the request: spec.pullSecrets is immutable")
    same = copy.deepcopy(old)
    same["spec"]["parallelism"] = 4
    admit_image_pull_job(same, True, old=old)


def test_webhook_denial_shape() -> None:
    err = webhook_denial("x.kb.io", 400, "nope")
    assert err.message == 'admission webhook "x.kb.io" denied the request: nope'
    assert err.status()["status"] == "Failure"


# ------------------------------------------------------------------------------------------------
# ContainerRecreateRequest
# ------------------------------------------------------------------------------------------------


def running_pod() -> dict[str, Any]:
    pod = make_pod(nodeName="node-1")
    pod["metadata"]["uid"] = "uid-1"
    pod["spec"]["containers"][0]["lifecycle"] = {
        "preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}}
    }
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [
            {"name": "slot-a", "containerID": "local://abc", "restartCount": 2, "ready": True},
            {"name": "slot-b", "containerID": "", "restartCount": 0, "ready": False},
        ],
    }
    return pod


def make_crr(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "podName": "chain",
        "containers": [{"name": "slot-a"}],
        "activeDeadlineSeconds": 300,
        "ttlSecondsAfterFinished": 600,
    }
    body.update(spec)
    return {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "chain-rerun-1", "namespace": "data"},
        "spec": body,
    }


def crr_denial(crr: dict[str, Any], pod: dict[str, Any] | None, **kw: Any) -> ApiError:
    before = copy.deepcopy(crr)
    with pytest.raises(ApiError) as exc:
        admit_crr(crr, pod, **kw)
    assert crr == before
    return exc.value


def test_crr_defaults_from_pod() -> None:
    crr = make_crr()
    admit_crr(crr, running_pod(), node={"metadata": {"name": "node-1"}})
    assert crr["metadata"]["labels"] == {
        "crr.apps.kruise.io/active": "true",
        "crr.apps.kruise.io/node-name": "node-1",
        "crr.apps.kruise.io/pod-uid": "uid-1",
    }
    assert crr["spec"]["strategy"] == {"failurePolicy": "Fail", "terminationGracePeriodSeconds": 30}
    (ctr,) = crr["spec"]["containers"]
    assert ctr["statusContext"] == {"containerID": "local://abc", "restartCount": 2}
    assert ctr["preStop"] == {"exec": {"command": ["/bin/sh", "-c", "sleep 1"]}}


def test_crr_keeps_explicit_strategy() -> None:
    crr = make_crr(
        strategy={"failurePolicy": "Ignore", "terminationGracePeriodSeconds": 5, "minStartedSeconds": 2}
    )
    admit_crr(crr, running_pod())
    assert crr["spec"]["strategy"] == {
        "failurePolicy": "Ignore",
        "terminationGracePeriodSeconds": 5,
        "minStartedSeconds": 2,
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c, p: c["spec"].update(podName=""), "podName can not be empty"),
        (lambda c, p: c["spec"].update(containers=[]), "containers list can not be null"),
        (
            lambda c, p: c["spec"].update(activeDeadlineSeconds=2),
            "activeDeadlineSeconds can not be less than 3s",
        ),
        (
            lambda c, p: c["spec"].update(strategy={"terminationGracePeriodSeconds": -1}),
            "terminationGracePeriodSeconds must be non-negative integer",
        ),
        (lambda c, p: c["spec"].update(strategy={"failurePolicy": "Retry"}), "unknown failurePolicy Retry"),
        (
            lambda c, p: p["status"].update(phase="Succeeded"),
            "not allowed to recreate containers in an inactive Pod",
        ),
        (
            lambda c, p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
            "not allowed to recreate containers in an inactive Pod",
        ),
        (lambda c, p: p["spec"].pop("nodeName"), "not allowed to recreate containers in a pending Pod"),
        (lambda c, p: c["spec"].update(containers=[{"name": "nope"}]), "container nope not found in Pod"),
        (
            lambda c, p: c["spec"].update(containers=[{"name": "slot-b"}]),
            "no containerID in slot-b containerStatus, maybe the container has not been initialized",
        ),
        (
            lambda c, p: p["status"].update(containerStatuses=[]),
            "not found slot-a containerStatus in Pod Status",
        ),
        (
            lambda c, p: c["spec"].update(
                containers=[{"name": "slot-a", "statusContext": {"containerID": "x"}}]
            ),
            "preStop, ports, statusContext in container are ready-only fields",
        ),
    ],
)
def test_crr_refusals(change: Any, message: str) -> None:
    crr, pod = make_crr(), running_pod()
    change(crr, pod)
    err = crr_denial(crr, pod)
    assert err.code == 400
    assert err.message == f'admission webhook "{CRR_WEBHOOK}" denied the request: {message}'


def test_crr_pod_or_node_missing() -> None:
    err = crr_denial(make_crr(), None)
    assert err.message.endswith("denied the request: no found Pod named chain")
    err = crr_denial(make_crr(), running_pod(), node=None)
    assert err.message.endswith('denied the request: failed to get Node node-1: nodes "node-1" not found')


def test_crr_pending_phase_with_node_is_active() -> None:
    pod = running_pod()
    pod["status"]["phase"] = "Pending"
    admit_crr(make_crr(), pod)


def test_crr_duplicate_containers_not_refused_like_the_real_webhook() -> None:
    crr = make_crr(containers=[{"name": "slot-a"}, {"name": "slot-a"}])
    admit_crr(crr, running_pod())
    assert len(crr["spec"]["containers"]) == 2


def test_crr_update_rules() -> None:
    old = make_crr()
    admit_crr(old, running_pod())
    relabel = copy.deepcopy(old)
    relabel["metadata"]["labels"]["crr.apps.kruise.io/active"] = "false"
    admit_crr(relabel, None, old=old)
    respec = copy.deepcopy(old)
    respec["spec"]["activeDeadlineSeconds"] = 30
    err = crr_denial(respec, None, old=old)
    assert (err.code, err.message) == (
        403,
        f'admission webhook "{CRR_WEBHOOK}" denied the request: '
        "spec of ContainerRecreateRequest is immutable",
    )
    moved = copy.deepcopy(old)
    moved["metadata"]["labels"]["crr.apps.kruise.io/node-name"] = "node-2"
    err = crr_denial(moved, None, old=old)
    assert err.message.endswith("not allowed to update immutable label crr.apps.kruise.io/node-name")


def test_crr_gate() -> None:
    err = crr_denial(make_crr(), running_pod(), kruise_daemon_enabled=False)
    assert (err.code, err.message) == (
        403,
        f'admission webhook "{CRR_WEBHOOK}" denied the request: feature-gate KruiseDaemon is not enabled',
    )


# ------------------------------------------------------------------------------------------------
# NodeImage
# ------------------------------------------------------------------------------------------------


def make_node_image(tags: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "NodeImage",
        "metadata": {"name": "node-1"},
        "spec": {"images": {"acme/transform": {"tags": tags}}},
    }


def test_node_image_defaults_and_sorts() -> None:
    obj = make_node_image(
        [
            {"tag": "2.0", "pullPolicy": {"ttlSecondsAfterFinished": 300}},
            {"tag": "1.0", "pullPolicy": {"ttlSecondsAfterFinished": 300}},
        ]
    )
    admit_node_image(obj, now=lambda: "2026-01-01T00:00:00Z")
    tags = obj["spec"]["images"]["acme/transform"]["tags"]
    assert [t["tag"] for t in tags] == ["1.0", "2.0"]
    assert tags[0]["createdAt"] == "2026-01-01T00:00:00Z"
    assert tags[0]["pullPolicy"] == {"ttlSecondsAfterFinished": 300, "timeoutSeconds": 600, "backoffLimit": 3}


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ([{"tag": ""}], "tag for image acme/transform can not be empty"),
        (
            [{"tag": "1", "pullPolicy": {"ttlSecondsAfterFinished": 1}}] * 2,
            "duplicated tag 1 for image acme/transform",
        ),
        ([{"tag": "1"}], "pullPolicy.ttlSecondsAfterFinished for acme/transform/1 must set"),
        (
            [{"tag": "1", "version": -1, "pullPolicy": {"ttlSecondsAfterFinished": 1}}],
            "version for acme/transform/1 can not be less than 0",
        ),
    ],
)
def test_node_image_refusals(tags: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ApiError) as exc:
        admit_node_image(make_node_image(copy.deepcopy(tags)))
    assert exc.value.code == 400
    assert exc.value.message == f'admission webhook "vnodeimage.kb.io" denied the request: {message}'


def test_kruise_objects_that_would_not_decode() -> None:
    job = make_job(completionPolicy={"type": "Always", "activeDeadlineSeconds": "soon"})
    err = denial(job)
    assert err.code == 400
    assert err.message == (
        'admission webhook "mimagepulljob-v1beta1.kb.io" denied the request: '
        "json: cannot unmarshal string into Go struct field "
        "ImagePullJob.spec.completionPolicy.activeDeadlineSeconds of type int64"
    )
    err = crr_denial(make_crr(containers=[{"name": 3}]), running_pod())
    assert err.message.endswith(
        "json: cannot unmarshal number into Go struct field ContainerRecreateRequest.spec.containers.name "
        "of type string"
    )


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
