"""Pod defaulting (pkg/apis/core/v1/defaults.go, DefaultTolerationSeconds, ServiceAccount/Priority
admission)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kruise_local.imageref import parse_image_reference

from .decode import _CONTAINER_LISTS, _check_decodable
from .quantity import parse_quantity

_NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
DEFAULT_TOLERATION_SECONDS = 300
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _image_tag_for_pull_policy(image: str) -> str:
    """The tag `SetDefaults_Container` sees: `latest` when neither tag nor digest is given."""
    try:
        parsed = parse_image_reference(image)
    except ValueError:
        return ""
    if not parsed.tag and not parsed.digest:
        return "latest"
    return parsed.tag


def _default_handler(handler: Any) -> None:
    if isinstance(handler, dict) and isinstance(handler.get("httpGet"), dict):
        handler["httpGet"].setdefault("path", "/")
        handler["httpGet"].setdefault("scheme", "HTTP")


def _default_container(ctr: dict[str, Any], *, copy_limits: bool) -> None:
    if not ctr.get("imagePullPolicy"):
        tag = _image_tag_for_pull_policy(ctr.get("image") or "")
        ctr["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    ctr.setdefault("terminationMessagePath", "/dev/termination-log")
    ctr.setdefault("terminationMessagePolicy", "File")
    resources = ctr.setdefault("resources", {})
    if copy_limits and isinstance(resources, dict) and resources.get("limits"):
        requests = resources.setdefault("requests", {})
        for key, value in resources["limits"].items():
            requests.setdefault(key, value)
    for port in ctr.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe_key in _PROBES:
        probe = ctr.get(probe_key)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            _default_handler(probe)
    lifecycle = ctr.get("lifecycle")
    if isinstance(lifecycle, dict):
        _default_handler(lifecycle.get("postStart"))
        _default_handler(lifecycle.get("preStop"))
    for env in ctr.get("env") or []:
        value_from = env.get("valueFrom") if isinstance(env, dict) else None
        if isinstance(value_from, dict):
            if isinstance(value_from.get("fieldRef"), dict):
                value_from["fieldRef"].setdefault("apiVersion", "v1")
            if isinstance(value_from.get("resourceFieldRef"), dict):
                value_from["resourceFieldRef"].setdefault("divisor", "0")


def _default_volume(volume: dict[str, Any]) -> None:
    for key in ("configMap", "secret", "downwardAPI", "projected"):
        if isinstance(volume.get(key), dict):
            volume[key].setdefault("defaultMode", 420)
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    for item in (volume.get("downwardAPI") or {}).get("items") or []:
        if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
            item["fieldRef"].setdefault("apiVersion", "v1")


def _add_default_tolerations(spec: dict[str, Any]) -> None:
    """The DefaultTolerationSeconds admission plugin: tolerate not-ready/unreachable NoExecute for 300 s."""
    tolerations = spec.get("tolerations") or []
    not_ready = unreachable = False
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        key, effect = tol.get("key") or "", tol.get("effect") or ""
        if effect in ("", "NoExecute"):
            not_ready = not_ready or key in ("", _NOT_READY_TAINT)
            unreachable = unreachable or key in ("", _UNREACHABLE_TAINT)
    added = []
    if not not_ready:
        added.append(_NOT_READY_TAINT)
    if not unreachable:
        added.append(_UNREACHABLE_TAINT)
    if added:
        spec["tolerations"] = list(tolerations) + [
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }
            for key in added
        ]


def default_pod(pod: dict[str, Any], *, create: bool = True) -> None:
    """Default a pod in place as the API server does when it decodes and admits it.

    Scheme defaults (restartPolicy, dnsPolicy, schedulerName, terminationGracePeriodSeconds, securityContext,
    enableServiceLinks; per container imagePullPolicy, terminationMessagePath/Policy, resources with requests
    copied from limits, port protocol, probe timings, fieldRef apiVersion; volume defaultMode) and the
    tolerations of the DefaultTolerationSeconds plugin are applied on create and update. On create
    (`create=True`) the pod also gets serviceAccountName `default`, priority 0 / preemptionPolicy
    PreemptLowerPriority, and a fresh status `{phase: Pending, qosClass}`. (The ServiceAccount plugin's
    `kube-api-access-*` token volume is not added.)
    """
    _check_decodable("Pod", pod)
    pod.setdefault("apiVersion", "v1")
    pod.setdefault("kind", "Pod")
    if pod.get("metadata") is None:
        pod["metadata"] = {}
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        spec = pod["spec"] = {}
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for key in _CONTAINER_LISTS:
        for ctr in spec.get(key) or []:
            if isinstance(ctr, dict):
                _default_container(ctr, copy_limits=key != "ephemeralContainers")
    for volume in spec.get("volumes") or []:
        if isinstance(volume, dict):
            _default_volume(volume)
    _add_default_tolerations(spec)
    if create:
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = account
        spec["serviceAccount"] = account
        if not spec.get("priorityClassName"):
            spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        pod["status"] = {"phase": "Pending", "qosClass": pod_qos_class(pod)}


def _resource_amounts(resources: Any, key: str) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    values = (resources or {}).get(key) if isinstance(resources, Mapping) else None
    for name, value in (values or {}).items():
        try:
            out[name] = parse_quantity(value)
        except ValueError:
            continue
    return out


def pod_qos_class(pod: Mapping[str, Any]) -> str:
    """`Guaranteed`, `Burstable` or `BestEffort`, computed from cpu/memory requests and limits
    (`ComputePodQOS`).
    """
    spec = pod.get("spec") or {}
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    for ctr in containers:
        if not isinstance(ctr, Mapping):
            continue
        resources = ctr.get("resources") or {}
        for name, amount in _resource_amounts(resources, "requests").items():
            if name in ("cpu", "memory") and amount > 0:
                requests[name] = requests.get(name, Decimal(0)) + amount
        found: set[str] = set()
        for name, amount in _resource_amounts(resources, "limits").items():
            if name in ("cpu", "memory") and amount > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + amount
        if found != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for name, amount in requests.items():
            if limits.get(name) != amount:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"
