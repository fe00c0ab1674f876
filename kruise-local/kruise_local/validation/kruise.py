"""OpenKruise v1.9.0 webhooks."""

from __future__ import annotations

import copy
import datetime as _dt
import re
from collections.abc import Callable, Mapping
from typing import Any

from kruise_local.errors import ApiError
from kruise_local.imageref import parse_image_reference
from kruise_local.selectors import LabelSelector

from .decode import _CRR_SHAPE, _IMAGE_PULL_JOB_SHAPE, _decode_problem, _unmarshal_error
from .fields import MAX_INT32
from .pod_update import _normalize

IMAGE_PULL_JOB_WEBHOOK = "vimagepulljob-v1beta1.kb.io"
IMAGE_PULL_JOB_MUTATING_WEBHOOK = "mimagepulljob-v1beta1.kb.io"
CRR_WEBHOOK = "mcontainerrecreaterequest.kb.io"
NODE_IMAGE_WEBHOOK = "vnodeimage.kb.io"
PROTECTION_FINALIZER = "apps.kruise.io/deletion-protection"
CRR_POD_UID_LABEL = "crr.apps.kruise.io/pod-uid"
CRR_NODE_NAME_LABEL = "crr.apps.kruise.io/node-name"
CRR_ACTIVE_LABEL = "crr.apps.kruise.io/active"
CRR_UNREADY_ACQUIRED_ANNOTATION = "crr.apps.kruise.io/unready-acquired"
_CRR_MIN_DEADLINE_SECONDS = 3
_MAX_IMAGES_PER_NODE = 256
_NODE_UNCHECKED: Any = object()


def webhook_denial(webhook: str, code: int, message: str, *, reason: str = "") -> ApiError:
    """The API server's answer when an admission webhook refuses a request.

    Code and reason are the webhook's own: controller-runtime's `admission.Errored(code, err)` sets no reason
    (the Status then has an empty `reason`), `admission.Denied(msg)` sets 403 and `Forbidden`.
    """
    err = ApiError(code, f'admission webhook "{webhook}" denied the request: {message}')
    err.reason = reason
    return err


def _go_parse_int32(text: str) -> int:
    """strconv.ParseInt(text, 10, 32), raising ValueError with Go's message."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax')
    value = int(text)
    if not -(2**31) <= value <= MAX_INT32:
        raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
    return value


def _selector_error(selector: Mapping[str, Any]) -> str | None:
    sub = {k: selector[k] for k in ("matchLabels", "matchExpressions") if k in selector}
    try:
        LabelSelector.from_object(sub)
    except ApiError as exc:
        return "; ".join(f"{c['field']}: {c['message']}" for c in exc.causes) or exc.message
    return None


def mutate_image_pull_job(job: dict[str, Any], *, create: bool = True) -> None:
    """The mutating webhook's defaults, in place (`SetDefaultsImagePullJob`).

    completionPolicy.type Always, pullPolicy {timeoutSeconds: 600, backoffLimit: 3}, imagePullPolicy
    IfNotPresent; a v1alpha1 job being created also gets the `apps.kruise.io/deletion-protection` finalizer
    (which the ImagePullJob controller removes on deletion). parallelism is not defaulted here: the controller
    treats an unset parallelism as 1.
    """
    spec = job.setdefault("spec", {})
    completion = spec.get("completionPolicy")
    if not isinstance(completion, dict):
        completion = spec["completionPolicy"] = {}
    if not completion.get("type"):
        completion["type"] = "Always"
    pull = spec.get("pullPolicy")
    if not isinstance(pull, dict):
        pull = spec["pullPolicy"] = {}
    if pull.get("timeoutSeconds") is None:
        pull["timeoutSeconds"] = 600
    if pull.get("backoffLimit") is None:
        pull["backoffLimit"] = 3
    if not spec.get("imagePullPolicy"):
        spec["imagePullPolicy"] = "IfNotPresent"
    if create and str(job.get("apiVersion", "")).endswith("/v1alpha1"):
        finalizers = job.setdefault("metadata", {}).setdefault("finalizers", [])
        if PROTECTION_FINALIZER not in finalizers:
            finalizers.append(PROTECTION_FINALIZER)


def _image_pull_job_problem(spec: Mapping[str, Any]) -> str | None:
    selector = spec.get("selector")
    pod_selector = spec.get("podSelector")
    if selector is not None:
        if isinstance(selector, Mapping) and (
            selector.get("matchLabels") is not None or selector.get("matchExpressions") is not None
        ):
            if selector.get("names") is not None:
                return "can not set both names and labelSelector in this spec.selector"
            if (err := _selector_error(selector)) is not None:
                return f"invalid selector: {err}"
        names = selector.get("names") if isinstance(selector, Mapping) else None
        if names is not None and len(set(names)) != len(names):
            return "duplicated name in selector names"
    if pod_selector is not None:
        if selector is not None:
            return "can not set both selector and podSelector"
        if isinstance(pod_selector, Mapping) and (err := _selector_error(pod_selector)) is not None:
            return f"invalid podSelector: {err}"
    image = spec.get("image") or ""
    if not image:
        return "image can not be empty"
    try:
        parse_image_reference(image)
    except ValueError as exc:
        return f"invalid image {image}: {exc}"
    parallelism = spec.get("parallelism")
    if parallelism is not None:
        if isinstance(parallelism, str):
            if parallelism.endswith("%"):
                return "parallelism does not support percentage value"
            try:
                value = _go_parse_int32(parallelism)
            except ValueError as exc:
                return f"parallelism must be a valid integer: {exc}"
            if value < 0:
                return "parallelism must be non-negative"
        elif isinstance(parallelism, int) and parallelism < 0:
            return "parallelism must be non-negative"
    timeout = (spec.get("pullPolicy") or {}).get("timeoutSeconds")
    timeout = 600 if timeout is None else timeout
    completion = spec.get("completionPolicy") or {}
    kind = completion.get("type") or ""
    deadline = completion.get("activeDeadlineSeconds")
    if kind == "Always":
        if deadline is not None and timeout > deadline:
            return (
                "completionPolicy.activeDeadlineSeconds must be greater than "
                "pullPolicy.timeoutSeconds(default 600)"
            )
    elif kind == "Never":
        if deadline is not None or completion.get("ttlSecondsAfterFinished") is not None:
            return (
                "activeDeadlineSeconds and ttlSecondsAfterFinished can only work with Always "
                "CompletionPolicyType"
            )
    else:
        return f"unknown type of completionPolicy: {kind}"
    return None


def validate_image_pull_job(
    job: Mapping[str, Any],
    gate_enabled: bool,
    *,
    old: Mapping[str, Any] | None = None,
    kruise_daemon_enabled: bool = True,
) -> None:
    """The validating webhook `vimagepulljob-v1beta1.kb.io` (create, or update when `old` is given).

    Feature gates off -> 403 `feature-gate ImagePullJobGate is not enabled` (KruiseDaemon is checked first); a
    changed spec.pullSecrets on update -> 403 Forbidden `spec.pullSecrets is immutable`; any other problem ->
    400 with the webhook's message (selector names vs labels, selector vs podSelector, image, parallelism,
    completionPolicy). The job is expected to carry the mutating webhook's defaults already.
    """
    if not kruise_daemon_enabled:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "feature-gate KruiseDaemon is not enabled")
    if not gate_enabled:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "feature-gate ImagePullJobGate is not enabled")
    problem = _decode_problem(job.get("spec"), _IMAGE_PULL_JOB_SHAPE, "ImagePullJob.spec")
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 400, problem)
    spec = job.get("spec") or {}
    if old is not None and (spec.get("pullSecrets") or None) != (
        (old.get("spec") or {}).get("pullSecrets") or None
    ):
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 403, "spec.pullSecrets is immutable", reason="Forbidden")
    problem = _image_pull_job_problem(spec)
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_WEBHOOK, 400, problem)


def admit_image_pull_job(
    job: dict[str, Any],
    gate_enabled: bool,
    *,
    old: Mapping[str, Any] | None = None,
    kruise_daemon_enabled: bool = True,
) -> None:
    """Mutating then validating webhooks for an ImagePullJob; `job` is defaulted in place only when accepted.

    The real API server checks the CRD schema and metadata between the two webhooks; call
    `mutate_image_pull_job` and `validate_image_pull_job` separately to reproduce that order exactly.
    """
    problem = _decode_problem(job.get("spec"), _IMAGE_PULL_JOB_SHAPE, "ImagePullJob.spec")
    if problem is not None:
        raise webhook_denial(IMAGE_PULL_JOB_MUTATING_WEBHOOK, 400, problem)
    candidate = copy.deepcopy(job)
    mutate_image_pull_job(candidate, create=old is None)
    validate_image_pull_job(candidate, gate_enabled, old=old, kruise_daemon_enabled=kruise_daemon_enabled)
    job.clear()
    job.update(candidate)


def validate_image_pull_job_update(
    old: Mapping[str, Any],
    new: dict[str, Any],
    *,
    gate_enabled: bool = True,
    kruise_daemon_enabled: bool = True,
) -> None:
    """Both ImagePullJob webhooks on an update: `new` gets the defaults (in place, when accepted), then is
    validated against `old` (spec.pullSecrets immutable). Pass the real `gate_enabled`: updates are refused
    too while ImagePullJobGate is off.
    """
    admit_image_pull_job(new, gate_enabled, old=old, kruise_daemon_enabled=kruise_daemon_enabled)


def _crr_deny(code: int, message: str) -> ApiError:
    return webhook_denial(CRR_WEBHOOK, code, message)


def _pod_is_active(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _crr_update(crr: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    if _normalize(crr.get("spec") or {}) != _normalize(old.get("spec") or {}):
        raise _crr_deny(403, "spec of ContainerRecreateRequest is immutable")
    labels = (crr.get("metadata") or {}).get("labels") or {}
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    for key in (CRR_POD_UID_LABEL, CRR_NODE_NAME_LABEL):
        if labels.get(key) != old_labels.get(key):
            raise _crr_deny(403, f"not allowed to update immutable label {key}")
    annotations = (crr.get("metadata") or {}).get("annotations") or {}
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    old_value = old_annotations.get(CRR_UNREADY_ACQUIRED_ANNOTATION)
    if old_value and annotations.get(CRR_UNREADY_ACQUIRED_ANNOTATION) != old_value:
        raise _crr_deny(403, f"not allowed to update immutable annotation {CRR_UNREADY_ACQUIRED_ANNOTATION}")


def admit_crr(
    crr: dict[str, Any],
    pod: Mapping[str, Any] | None,
    *,
    old: Mapping[str, Any] | None = None,
    node: Mapping[str, Any] | None = _NODE_UNCHECKED,
    kruise_daemon_enabled: bool = True,
) -> None:
    """The mutating webhook `mcontainerrecreaterequest.kb.io` (Kruise v1.9.0 has no validating one for CRRs).

    On create it checks the request (podName, containers, activeDeadlineSeconds >= 3, grace periods >= 0,
    failurePolicy Fail|Ignore, defaulting it to Fail) and the target `pod` (None: not found; it must be
    active, i.e. not Succeeded/Failed nor deleting, and scheduled), then fills in place: labels
    `crr.apps.kruise.io/active`, `/node-name`, `/pod-uid`, `strategy.terminationGracePeriodSeconds` from the
    pod, and per container the pod container's preStop (and ports for an httpGet preStop) and `statusContext`
    {containerID, restartCount} from its status; a container unknown to the pod or without a containerID is
    refused. Pass `node` (None: not found) to check the node as the webhook does. On update (`old` given) the
    spec and the pod-uid/node-name labels are immutable (403). Refusals are 400 (403 for the gate and
    immutability) webhook denials. Like the real webhook, duplicate container names are not refused (its check
    never records a name), and no pod-name label nor owner reference is added.
    """
    if not kruise_daemon_enabled:
        raise _crr_deny(403, "feature-gate KruiseDaemon is not enabled")
    problem = _decode_problem(crr.get("spec"), _CRR_SHAPE, "ContainerRecreateRequest.spec")
    if problem is not None:
        raise _crr_deny(400, problem)
    if old is not None:
        _crr_update(crr, old)
        return
    candidate = copy.deepcopy(crr)
    labels = candidate.setdefault("metadata", {}).get("labels")
    if not isinstance(labels, dict):
        labels = candidate["metadata"]["labels"] = {}
    spec = candidate.setdefault("spec", {})
    pod_name = spec.get("podName") or ""
    if not pod_name:
        raise _crr_deny(400, "podName can not be empty")
    strategy = spec.get("strategy")
    if not isinstance(strategy, dict):
        strategy = spec["strategy"] = {}
    if isinstance(spec.get("containers"), list):
        spec["containers"] = [c if isinstance(c, dict) else {} for c in spec["containers"]]
    labels[CRR_ACTIVE_LABEL] = "true"
    if not spec.get("containers"):
        raise _crr_deny(400, "containers list can not be null")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline < _CRR_MIN_DEADLINE_SECONDS:
        raise _crr_deny(400, f"activeDeadlineSeconds can not be less than {_CRR_MIN_DEADLINE_SECONDS}s")
    if (strategy.get("terminationGracePeriodSeconds") or 0) < 0:
        raise _crr_deny(400, "terminationGracePeriodSeconds must be non-negative integer")
    if (strategy.get("unreadyGracePeriodSeconds") or 0) < 0:
        raise _crr_deny(400, "unreadyGracePeriodSeconds must be non-negative integer")
    policy = strategy.get("failurePolicy") or ""
    if not policy:
        strategy["failurePolicy"] = "Fail"
    elif policy not in ("Fail", "Ignore"):
        raise _crr_deny(400, f"unknown failurePolicy {policy}")
    if pod is None:
        raise _crr_deny(400, f"no found Pod named {pod_name}")
    conditions = (pod.get("status") or {}).get("conditions") or []
    sidecar_terminated = any(
        isinstance(c, Mapping) and c.get("type") == "SidecarTerminated" for c in conditions
    )
    node_name = (pod.get("spec") or {}).get("nodeName") or ""
    if not _pod_is_active(pod) and not sidecar_terminated:
        raise _crr_deny(400, "not allowed to recreate containers in an inactive Pod")
    if not node_name:
        raise _crr_deny(400, "not allowed to recreate containers in a pending Pod")
    if node is None:
        raise _crr_deny(400, f'failed to get Node {node_name}: nodes "{node_name}" not found')
    _inject_pod(candidate, pod, None if node is _NODE_UNCHECKED else node)
    crr.clear()
    crr.update(candidate)


def validate_crr_update(
    old: Mapping[str, Any], new: dict[str, Any], *, kruise_daemon_enabled: bool = True
) -> None:
    """The CRR webhook on an update: the spec, the pod-uid and node-name labels and a set unready-acquired
    annotation are immutable (403 denials)."""
    admit_crr(new, None, old=old, kruise_daemon_enabled=kruise_daemon_enabled)


def _inject_pod(crr: dict[str, Any], pod: Mapping[str, Any], node: Mapping[str, Any] | None) -> None:
    labels = crr["metadata"]["labels"]
    spec = crr["spec"]
    pod_spec = pod.get("spec") or {}
    labels[CRR_NODE_NAME_LABEL] = pod_spec.get("nodeName") or ""
    labels[CRR_POD_UID_LABEL] = (pod.get("metadata") or {}).get("uid") or ""
    if (
        node is not None
        and ((node.get("metadata") or {}).get("labels") or {}).get("type") == "virtual-kubelet"
    ):
        labels["type"] = "virtual-kubelet"
    strategy = spec["strategy"]
    if (
        strategy.get("terminationGracePeriodSeconds") is None
        and pod_spec.get("terminationGracePeriodSeconds") is not None
    ):
        strategy["terminationGracePeriodSeconds"] = pod_spec["terminationGracePeriodSeconds"]
    pod_containers = {c.get("name"): c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping)}
    statuses = {
        s.get("name"): s
        for s in (pod.get("status") or {}).get("containerStatuses") or []
        if isinstance(s, Mapping)
    }
    for ctr in spec["containers"]:
        name = ctr.get("name")
        if (
            ctr.get("preStop") is not None
            or ctr.get("ports") is not None
            or ctr.get("statusContext") is not None
        ):
            raise _crr_deny(400, "preStop, ports, statusContext in container are ready-only fields")
        pod_ctr = pod_containers.get(name)
        if pod_ctr is None:
            raise _crr_deny(400, f"container {name} not found in Pod")
        status = statuses.get(name)
        if status is None:
            raise _crr_deny(400, f"not found {name} containerStatus in Pod Status")
        if not status.get("containerID"):
            raise _crr_deny(
                400, f"no containerID in {name} containerStatus, maybe the container has not been initialized"
            )
        pre_stop = (pod_ctr.get("lifecycle") or {}).get("preStop")
        if isinstance(pre_stop, Mapping):
            handler = {
                k: copy.deepcopy(pre_stop[k]) for k in ("exec", "httpGet", "tcpSocket") if pre_stop.get(k)
            }
            ctr["preStop"] = handler
            if handler.get("httpGet") is not None and pod_ctr.get("ports") is not None:
                ctr["ports"] = copy.deepcopy(pod_ctr["ports"])
        ctr["statusContext"] = {
            "containerID": status["containerID"],
            "restartCount": status.get("restartCount", 0),
        }


def _now_rfc3339() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def admit_node_image(
    obj: dict[str, Any], *, kruise_daemon_enabled: bool = True, now: Callable[[], str] = _now_rfc3339
) -> None:
    """NodeImage webhooks: default each tag (createdAt now, pullPolicy timeoutSeconds 600 / backoffLimit 3),
    sort tags, then validate (at most 256 images; image names and tags non-empty; no duplicate tag; version >=
    0; `pullPolicy.ttlSecondsAfterFinished` set). Refusals are 400 denials of `vnodeimage.kb.io` (403 for the
    gate). A NodeImage is named after its node; that is a convention of the controllers, not checked by the
    webhooks.
    """
    if not kruise_daemon_enabled:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 403, "feature-gate KruiseDaemon is not enabled")
    candidate = copy.deepcopy(obj)
    images = candidate.setdefault("spec", {}).get("images")
    if images is None:
        images = {}
    problem = _node_image_decode_problem(images)
    if problem is not None:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 400, problem)
    stamp = now()
    for spec in images.values():
        tags = spec.get("tags") or [] if isinstance(spec, dict) else []
        for tag in tags:
            if not isinstance(tag, dict):
                continue
            tag.setdefault("createdAt", stamp)
            policy = tag.get("pullPolicy")
            if not isinstance(policy, dict):
                policy = tag["pullPolicy"] = {}
            policy.setdefault("timeoutSeconds", 600)
            policy.setdefault("backoffLimit", 3)
        if isinstance(spec, dict) and tags:
            spec["tags"] = sorted(tags, key=lambda t: str((t or {}).get("tag", "")))
    for status in ((candidate.get("status") or {}).get("imageStatuses") or {}).values():
        if isinstance(status, dict) and status.get("tags"):
            status["tags"] = sorted(status["tags"], key=lambda t: str((t or {}).get("tag", "")))
    problem = _node_image_problem(images)
    if problem is not None:
        raise webhook_denial(NODE_IMAGE_WEBHOOK, 400, problem)
    obj.clear()
    obj.update(candidate)


def _node_image_decode_problem(images: Any) -> str | None:
    """Where `spec.images` would not decode into the webhook's Go types (an object of ImageSpec)."""
    if not isinstance(images, dict):
        return _unmarshal_error(images, "NodeImage.spec.images", "map[string]v1alpha1.ImageSpec")
    for name, spec in images.items():
        if spec is not None and not isinstance(spec, dict):
            return _unmarshal_error(spec, f"NodeImage.spec.images.{name}", "v1alpha1.ImageSpec")
        tags = (spec or {}).get("tags")
        if tags is not None and (
            not isinstance(tags, list) or not all(isinstance(t, dict | None) for t in tags)
        ):
            return _unmarshal_error(tags, f"NodeImage.spec.images.{name}.tags", "[]v1alpha1.ImageTagSpec")
        for tag in tags or []:
            shape = {"tag": "str", "createdAt": "str", "version": "int", "pullPolicy": {}}
            problem = _decode_problem(tag, shape, f"NodeImage.spec.images.{name}.tags")
            if problem is not None:
                return problem
    return None


def _node_image_problem(images: Mapping[str, Any]) -> str | None:
    if len(images) > _MAX_IMAGES_PER_NODE:
        return f"spec images length {len(images)} can not be more than {_MAX_IMAGES_PER_NODE}"
    for name, spec in images.items():
        if not name:
            return "image name can not be empty"
        seen: set[str] = set()
        for tag in (spec or {}).get("tags") or []:
            value = (tag or {}).get("tag") or ""
            if not value:
                return f"tag for image {name} can not be empty"
            if value in seen:
                return f"duplicated tag {value} for image {name}"
            seen.add(value)
            full = f"{name}/{value}"
            if not tag.get("createdAt"):
                return f"createAt field for {full} can not be empty"
            if (tag.get("version") or 0) < 0:
                return f"version for {full} can not be less than 0"
            if tag.get("pullPolicy") is None:
                return f"pullPolicy field for {full} must set"
            if tag["pullPolicy"].get("ttlSecondsAfterFinished") is None:
                return f"pullPolicy.ttlSecondsAfterFinished for {full} must set"
    return None
