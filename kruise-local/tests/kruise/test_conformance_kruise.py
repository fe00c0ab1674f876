"""Conformance of the local cluster's OpenKruise controllers with DESIGN.md, through the real client.
Every Kruise object the cluster stores is checked against the OpenKruise v1.9 CRD schemas."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kruise_local.crdschema import validate_against_crd
from kruise_local.testing import container, pod_body, running, wait_for
from kubernetes.client import ApiException

CRDS = Path(__file__).resolve().parents[3].parent / "shared" / "reference" / "kruise-crds"
G = "apps.kruise.io"


def ipj(name: str, image: str, **spec) -> dict:
    return {
        "apiVersion": f"{G}/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name},
        "spec": {"image": image, **spec},
    }


def crr(name: str, pod: str, *containers: str, **spec) -> dict:
    return {
        "apiVersion": f"{G}/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name},
        "spec": {
            "podName": pod,
            "containers": [{"name": c} for c in containers],
            "activeDeadlineSeconds": 30,
            "ttlSecondsAfterFinished": 300,
            **spec,
        },
    }


def get(custom, ns, plural, name, version="v1alpha1"):
    return custom.get_namespaced_custom_object(G, version, ns, plural, name)


def done_job(custom, ns, name):
    job = get(custom, ns, "imagepulljobs", name)
    return job if (job.get("status") or {}).get("completionTime") else None


def assert_schema_valid(obj: dict) -> None:
    if not CRDS.is_dir():
        pytest.skip(f"no CRD schemas at {CRDS}")
    assert validate_against_crd(obj) == []


def test_image_pull_job_refused_with_403_when_the_gate_is_off(custom, namespace, cluster):
    cluster.gates["ImagePullJobGate"] = False
    try:
        with pytest.raises(ApiException) as err:
            custom.create_namespaced_custom_object(
                G, "v1alpha1", namespace, "imagepulljobs", ipj("j", "busybox:1.36")
            )
    finally:
        cluster.gates["ImagePullJobGate"] = True
    assert err.value.status == 403
    assert "feature-gate ImagePullJobGate is not enabled" in json.loads(err.value.body)["message"]


def test_image_pull_job_matching_no_node_completes_with_desired_zero(custom, namespace):
    custom.create_namespaced_custom_object(
        G,
        "v1alpha1",
        namespace,
        "imagepulljobs",
        ipj("j", "busybox:1.36", selector={"names": ["no-such-node"]}),
    )
    job = wait_for(lambda: done_job(custom, namespace, "j"), what="job complete")
    assert job["status"]["desired"] == 0 and job["status"].get("succeeded", 0) == 0
    assert_schema_valid(job)


def test_image_pull_job_defaults_and_pulls_onto_the_node(custom, core, namespace, cluster):
    custom.create_namespaced_custom_object(
        G,
        "v1alpha1",
        namespace,
        "imagepulljobs",
        ipj("j", "python:3.11-slim", selector={"names": ["kruise-local"]}),
    )
    job = get(custom, namespace, "imagepulljobs", "j")
    assert job["spec"]["completionPolicy"]["type"] == "Always"
    assert job["spec"]["imagePullPolicy"] == "IfNotPresent"
    assert job["spec"]["pullPolicy"] == {"timeoutSeconds": 600, "backoffLimit": 3}
    job = wait_for(lambda: done_job(custom, namespace, "j"), what="job complete")
    st = job["status"]
    assert (st["desired"], st["succeeded"], st.get("failed", 0)) == (1, 1, 0)
    assert_schema_valid(job)
    ni = custom.get_cluster_custom_object(G, "v1beta1", "nodeimages", "kruise-local")
    tags = ni["status"]["imageStatuses"]["python"]["tags"]
    assert tags[0]["phase"] == "Succeeded"
    assert_schema_valid(ni)
    # the kubelet now finds it present
    spec = container("c", "sleep 30", image="python:3.11-slim")
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    msgs = [
        e.message for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
    ]
    assert any("already present on machine" in m for m in msgs)


def test_image_pull_job_for_a_missing_image_fails_on_the_node(custom, namespace):
    custom.create_namespaced_custom_object(
        G,
        "v1alpha1",
        namespace,
        "imagepulljobs",
        ipj(
            "j",
            "nope/missing:1",
            selector={"names": ["kruise-local"]},
            pullPolicy={"backoffLimit": 1, "timeoutSeconds": 30},
        ),
    )
    job = wait_for(lambda: done_job(custom, namespace, "j"), what="job complete")
    st = job["status"]
    assert (st["desired"], st.get("succeeded", 0), st["failed"]) == (1, 0, 1)
    assert st["failedNodes"] == ["kruise-local"]


def test_image_pull_job_deadline_must_cover_timeout(custom, namespace):
    bad = ipj(
        "j",
        "busybox:1.36",
        pullPolicy={"timeoutSeconds": 100},
        completionPolicy={"type": "Always", "activeDeadlineSeconds": 50},
    )
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(G, "v1alpha1", namespace, "imagepulljobs", bad)
    assert err.value.status in (400, 403, 422)
    assert "activeDeadlineSeconds" in json.loads(err.value.body)["message"]


def test_image_pull_job_served_as_v1beta1_too(custom, namespace):
    body = ipj("j", "busybox:1.36", selector={"names": ["kruise-local"]})
    body["apiVersion"] = f"{G}/v1beta1"
    custom.create_namespaced_custom_object(G, "v1beta1", namespace, "imagepulljobs", body)
    assert get(custom, namespace, "imagepulljobs", "j", "v1beta1")["apiVersion"] == f"{G}/v1beta1"
    assert get(custom, namespace, "imagepulljobs", "j")["apiVersion"] == f"{G}/v1alpha1"


def test_crr_refused_for_a_pod_that_does_not_run(custom, core, namespace):
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            G, "v1alpha1", namespace, "containerrecreaterequests", crr("r", "missing", "c")
        )
    assert err.value.status in (400, 403, 422)
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            G, "v1alpha1", namespace, "containerrecreaterequests", crr("r", "p", "nope")
        )
    assert err.value.status in (400, 403, 422)


def test_crr_reruns_a_container_whose_image_did_not_change(custom, core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "date +%s%N >> /tmp/x; sleep 30")))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    custom.create_namespaced_custom_object(
        G,
        "v1alpha1",
        namespace,
        "containerrecreaterequests",
        crr("r", "p", "c", strategy={"minStartedSeconds": 1}),
    )
    obj = wait_for(
        lambda: (
            (o := get(custom, namespace, "containerrecreaterequests", "r")).get("status", {}).get("phase")
            == "Completed"
            and o
        ),
        what="CRR completed",
    )
    assert obj["status"]["containerRecreateStates"] == [{"name": "c", "phase": "Succeeded", "isKilled": True}]
    assert obj["metadata"]["labels"]["crr.apps.kruise.io/node-name"] == "kruise-local"
    assert obj["spec"]["containers"][0]["statusContext"]["containerID"] == first.container_id
    assert_schema_valid(obj)
    second = running(core, namespace, "p", "c")
    assert second.container_id != first.container_id and second.restart_count == 1
    assert second.image == first.image


def test_crr_hangs_under_restart_policy_never(custom, core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30"), restart="Never"))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    custom.create_namespaced_custom_object(
        G, "v1alpha1", namespace, "containerrecreaterequests", crr("r", "p", "c", activeDeadlineSeconds=3)
    )
    time.sleep(1.0)
    obj = get(custom, namespace, "containerrecreaterequests", "r")
    assert obj["status"]["phase"] == "Recreating"
    obj = wait_for(
        lambda: (
            (o := get(custom, namespace, "containerrecreaterequests", "r")).get("status", {}).get("phase")
            == "Completed"
            and o
        ),
        what="CRR deadline",
    )
    assert obj["status"]["containerRecreateStates"][0]["phase"] != "Succeeded"
    assert "activeDeadlineSeconds" in obj["status"]["message"]


def test_one_crr_per_pod_at_a_time(custom, core, namespace):
    core.create_namespaced_pod(
        namespace, pod_body("p", container("a", "sleep 30"), container("b", "sleep 30"))
    )
    wait_for(
        lambda: running(core, namespace, "p", "a") and running(core, namespace, "p", "b"), what="running"
    )
    custom.create_namespaced_custom_object(
        G,
        "v1alpha1",
        namespace,
        "containerrecreaterequests",
        crr("r1", "p", "a", strategy={"minStartedSeconds": 1}),
    )
    custom.create_namespaced_custom_object(
        G, "v1alpha1", namespace, "containerrecreaterequests", crr("r2", "p", "b")
    )
    time.sleep(0.4)
    phase = lambda n: get(custom, namespace, "containerrecreaterequests", n).get("status", {}).get("phase")  # noqa: E731
    assert phase("r1") == "Recreating" and phase("r2") == "Pending"
    wait_for(lambda: phase("r1") == "Completed" and phase("r2") == "Completed", what="both done")
