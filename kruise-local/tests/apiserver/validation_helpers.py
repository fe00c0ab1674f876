"""What the admission tests (test_validation*.py) share: a chain-like pod, the causes of a 422, and the
OpenKruise objects (an ImagePullJob, a ContainerRecreateRequest and its running pod, a NodeImage)."""

from __future__ import annotations

from typing import Any

import pytest
from kruise_local.errors import ApiError
from kruise_local.validation import default_pod


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


def make_job(version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"image": "acme/transform:2.0", "selector": {"names": ["node-1"]}}
    body.update(spec)
    return {
        "apiVersion": f"apps.kruise.io/{version}",
        "kind": "ImagePullJob",
        "metadata": {"name": "prewarm", "namespace": "data"},
        "spec": body,
    }


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


def make_node_image(tags: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "NodeImage",
        "metadata": {"name": "node-1"},
        "spec": {"images": {"acme/transform": {"tags": tags}}},
    }
