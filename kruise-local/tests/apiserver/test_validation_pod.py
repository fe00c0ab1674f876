"""Unit tests for the local API server's admission of a pod's create: defaulting and validation."""

from __future__ import annotations

import pytest
from kruise_local.errors import ApiError
from kruise_local.validation import (
    default_pod,
    pod_qos_class,
    validate_pod_create,
)
from validation_helpers import causes_of, make_pod, reasons_of

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
