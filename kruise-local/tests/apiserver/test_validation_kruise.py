"""Unit tests for the local API server's admission of OpenKruise objects: ImagePullJob,
ContainerRecreateRequest and NodeImage (defaulting, the webhooks' refusals, feature gates)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kruise_local.errors import ApiError
from kruise_local.validation import (
    CRR_WEBHOOK,
    IMAGE_PULL_JOB_WEBHOOK,
    admit_crr,
    admit_image_pull_job,
    admit_node_image,
    mutate_image_pull_job,
    validate_image_pull_job,
    webhook_denial,
)
from validation_helpers import make_crr, make_job, make_node_image, running_pod

# ------------------------------------------------------------------------------------------------
# ImagePullJob
# ------------------------------------------------------------------------------------------------


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
