"""Unit tests for the local API server's admission of a pod's update and resize (`ValidatePodUpdate`,
`ValidatePodResize`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kruise_local.errors import ApiError
from kruise_local.validation import (
    POD_UPDATE_FORBIDDEN,
    default_pod,
    prepare_pod_resize,
    validate_pod_resize,
    validate_pod_update,
)
from validation_helpers import causes_of, make_pod, reasons_of

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
