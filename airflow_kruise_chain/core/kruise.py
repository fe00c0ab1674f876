"""The OpenKruise API as the chain uses it: its group, version and resource names, and the objects the chain
makes (an ImagePullJob that prewarms an image on the chain pod's node) and reads (its outcome)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

KRUISE_GROUP = "apps.kruise.io"
KRUISE_VERSION = "v1alpha1"
KRUISE_API_VERSION = f"{KRUISE_GROUP}/{KRUISE_VERSION}"
IMAGE_PULL_JOB_KIND = "ImagePullJob"
IMAGE_PULL_JOB_PLURAL = "imagepulljobs"
GATE_HELP = (
    "OpenKruise refused the ImagePullJob because its ImagePullJobGate feature gate is off: OpenKruise's "
    "own default, which the kruise Helm chart turns on (its default value "
    'featureGates="ImagePullJobGate=true") unless the release sets feature gates of its own. Add the gate '
    "to those, at the chart version the release runs and with its other values kept: "
    "`helm upgrade kruise openkruise/kruise --version <that version> --reuse-values "
    '--set featureGates="<the gates it sets>\\,ImagePullJobGate=true"` '
    "(docs/getting-started-cluster.md; or add ImagePullJobGate=true to the --feature-gates flag of "
    'kruise-manager and kruise-daemon), or set `prewarm=False` / `on_prewarm_unavailable="skip"` on the '
    "chain to run without prewarming."
)
"""what to do when OpenKruise's ImagePullJobGate is off (the hooks' error, preflight's finding)"""


def image_pull_job_name(prefix: str, image: str, attempt: int = 1) -> str:
    """Deterministic name (at most 63 characters) of the ImagePullJob for `image` in prewarm try `attempt`:
    a replay of the same try finds its own job; a retry makes a new one instead of finding a failed one."""
    digest = hashlib.sha256(f"{image}\n{attempt}".encode()).hexdigest()[:10]
    return f"{prefix[:47].rstrip('-.')}-pull-{digest}"


def build_image_pull_job(
    name: str,
    namespace: str,
    image: str,
    *,
    node_name: str,
    parallelism: int = 1,
    timeout_seconds: int = 600,
    backoff_limit: int = 3,
    active_deadline_seconds: int | None = None,
    ttl_seconds_after_finished: int = 600,
    image_pull_policy: Literal["IfNotPresent", "Always"] = "IfNotPresent",
    pull_secrets: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
    api_version: str = KRUISE_API_VERSION,
) -> dict[str, Any]:
    """An ImagePullJob prewarming `image` on the node `node_name` (the chain pod's node).

    `active_deadline_seconds` defaults to room for every attempt (``timeout * (backoff_limit + 1)``); the
    webhook requires it to be at least `timeout_seconds`. Requires Kruise's ImagePullJobGate feature gate.
    """
    if not node_name:
        raise ValueError("node_name is required: an ImagePullJob without a node would target every node")
    if active_deadline_seconds is None:
        active_deadline_seconds = timeout_seconds * (backoff_limit + 1)
    if active_deadline_seconds < timeout_seconds:
        raise ValueError(
            f"active_deadline_seconds ({active_deadline_seconds}) must be >= "
            f"timeout_seconds ({timeout_seconds})"
        )
    spec: dict[str, Any] = {
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "parallelism": parallelism,
        "selector": {"names": [node_name]},
        "pullPolicy": {"timeoutSeconds": timeout_seconds, "backoffLimit": backoff_limit},
        "completionPolicy": {
            "type": "Always",
            "activeDeadlineSeconds": active_deadline_seconds,
            "ttlSecondsAfterFinished": ttl_seconds_after_finished,
        },
    }
    if pull_secrets:
        spec["pullSecrets"] = list(pull_secrets)
    return {
        "apiVersion": api_version,
        "kind": IMAGE_PULL_JOB_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": spec,
    }


class Outcome(str):
    """An outcome name (``"running"``, ``"succeeded"``, ``"failed"``) that also carries a human `message`."""

    message: str

    def __new__(cls, state: str, message: str = "") -> Outcome:
        outcome = super().__new__(cls, state)
        outcome.message = message
        return outcome


def image_pull_job_outcome(job: Mapping[str, Any]) -> Outcome:
    """Outcome of an ImagePullJob: done once ``status.completionTime`` is set, successful by the counts."""
    status = job.get("status") or {}
    if not status.get("completionTime"):
        return Outcome("running", status.get("message") or "")
    desired = int(status.get("desired") or 0)
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    image = (job.get("spec") or {}).get("image", "")
    if desired == 0:
        return Outcome("failed", f"ImagePullJob for {image} matched no node: check the node name or selector")
    if failed == 0 and succeeded == desired:
        return Outcome("succeeded", f"{image} pulled on {succeeded} node(s)")
    nodes = ", ".join(status.get("failedNodes") or ()) or "unknown nodes"
    said = f" (OpenKruise: {status['message']})" if status.get("message") else ""
    return Outcome(
        "failed",
        f"pulling {image} failed on {nodes}: {failed} of {desired} pull(s) failed{said}. Check that the "
        "image exists and that the node can pull it (registry access, image_pull_secrets); kruise-daemon's "
        "error is in the node's NodeImage: kubectl get nodeimage <node> -o yaml",
    )
