"""Pod resizes through the `resize` subresource (pkg/apis/core/validation/validation.go `ValidatePodResize`,
the pod resize strategy)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .decode import _check_decodable
from .fields import Cause, _raise_invalid, forbidden, invalid_value
from .meta import validate_metadata_update
from .pod_defaults import pod_qos_class
from .pod_spec import _pod_metadata_and_spec_causes
from .pod_update import _normalize
from .quantity import parse_quantity


def _is_restartable_init(ctr: Any) -> bool:
    return isinstance(ctr, Mapping) and ctr.get("restartPolicy") == "Always"


def _drop_cpu_memory_updates(ctr: dict[str, Any], old_ctr: Mapping[str, Any]) -> None:
    old_resources = old_ctr.get("resources") or {}
    resources = ctr.get("resources") or {}
    out: dict[str, Any] = {}
    for part in ("limits", "requests"):
        old_list = old_resources.get(part)
        if old_list is None:
            continue
        munged = {k: v for k, v in (resources.get(part) or {}).items() if k not in ("cpu", "memory")}
        for key in ("cpu", "memory"):
            if key in old_list:
                munged[key] = old_list[key]
        out[part] = munged
    ctr["resources"] = out


def _container_resize_causes(
    new_ctr: Mapping[str, Any], old_ctr: Mapping[str, Any], field: str, memory_limit_decrease: bool
) -> list[Cause]:
    causes: list[Cause] = []
    new_res, old_res = new_ctr.get("resources") or {}, old_ctr.get("resources") or {}
    for part, what in (("requests", "resource requests"), ("limits", "resource limits")):
        if set(old_res.get(part) or {}) - set(new_res.get(part) or {}):
            causes.append(forbidden(f"{field}.{part}", f"{what} cannot be removed"))
    memory_policy = ""
    for policy in new_ctr.get("resizePolicy") or []:
        if isinstance(policy, Mapping) and policy.get("resourceName") == "memory":
            memory_policy = policy.get("restartPolicy") or ""
            break
    if memory_policy in ("NotRequired", "") and not memory_limit_decrease:
        new_limit = (new_res.get("limits") or {}).get("memory")
        old_limit = (old_res.get("limits") or {}).get("memory")
        path = f"{field}.limits[memory]"
        if new_limit is not None and old_limit is not None:
            try:
                if parse_quantity(new_limit) < parse_quantity(old_limit):
                    causes.append(
                        forbidden(
                            path, "memory limits cannot be decreased unless resizePolicy is RestartContainer"
                        )
                    )
            except ValueError:
                pass
        elif new_limit is not None:
            causes.append(
                forbidden(path, "memory limits cannot be added unless resizePolicy is RestartContainer")
            )
    return causes


def validate_pod_resize(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    *,
    relaxed_env_names: bool = False,
    memory_limit_decrease: bool = False,
) -> None:
    """Validate an update through the `resize` subresource (`ValidatePodResize`); raise 422 Invalid.

    Only cpu and memory requests/limits of containers (and of sidecar init containers) may change; requests
    and limits may not be removed; before 1.34 (`memory_limit_decrease` False) a memory limit may not be
    lowered or added unless the container's memory resizePolicy is RestartContainer (1.34+ leaves that to
    the kubelet's usage check, `validateMemoryResizeAction`); the QoS class may not change. Anything else
    is `spec: Forbidden: only cpu and memory resources are mutable`. (The real server also refuses pods
    whose node reports no container resources; that check is not made here.)
    """
    _check_decodable("Pod", new)
    causes = validate_metadata_update("Pod", old, new)
    causes += _pod_metadata_and_spec_causes(new, relaxed_env_names)
    old_spec: Mapping[str, Any] = old.get("spec") or {}
    new_spec: Mapping[str, Any] = new.get("spec") or {}

    def pod_level(spec: Mapping[str, Any]) -> bool:
        res = spec.get("resources") or {}
        return bool(res.get("requests") or res.get("limits"))

    if pod_level(old_spec) or pod_level(new_spec):
        _raise_invalid("Pod", new, [forbidden("", "pods with pod-level resources cannot be resized")])
    if "kubernetes.io/config.mirror" in ((old.get("metadata") or {}).get("annotations") or {}):
        _raise_invalid("Pod", new, [forbidden("", "static pods cannot be resized")])
    if ((old_spec.get("os") or {}).get("name")) == "windows":
        _raise_invalid("Pod", new, [forbidden("", "windows pods cannot be resized")])
    old_qos = (old.get("status") or {}).get("qosClass") or pod_qos_class(old)
    if old_qos != pod_qos_class(new):
        shown = (new.get("status") or {}).get("qosClass") or old_qos
        causes.append(invalid_value("spec", shown, "Pod QOS Class may not change as a result of resizing"))
    old_ctrs = list(old_spec.get("containers") or [])
    new_ctrs = list(new_spec.get("containers") or [])
    old_inits = list(old_spec.get("initContainers") or [])
    new_inits = list(new_spec.get("initContainers") or [])
    if len(old_ctrs) != len(new_ctrs) or len(old_inits) != len(new_inits):
        causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
        _raise_invalid("Pod", new, causes)
    for i, old_ctr in enumerate(old_inits):
        if _is_restartable_init(old_ctr):
            causes += _container_resize_causes(
                new_inits[i], old_ctr, f"spec.initContainers[{i}].resources", memory_limit_decrease
            )
    for i, old_ctr in enumerate(old_ctrs):
        causes += _container_resize_causes(
            new_ctrs[i], old_ctr, f"spec.containers[{i}].resources", memory_limit_decrease
        )
    munged = copy.deepcopy(dict(new_spec))
    for i, ctr in enumerate(munged.get("containers") or []):
        _drop_cpu_memory_updates(ctr, old_ctrs[i])
        if _normalize(ctr) != _normalize(old_ctrs[i]):
            causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
    for i, ctr in enumerate(munged.get("initContainers") or []):
        if _is_restartable_init(ctr):
            _drop_cpu_memory_updates(ctr, old_inits[i])
            if _normalize(ctr) != _normalize(old_inits[i]):
                causes.append(
                    forbidden("spec", "only cpu and memory resources for sidecar containers are mutable")
                )
        elif _normalize(ctr) != _normalize(old_inits[i]):
            causes.append(forbidden("spec", "resources for non-sidecar init containers are immutable"))
    if not causes and _normalize(munged) != _normalize(old_spec):
        causes.append(forbidden("spec", "only cpu and memory resources are mutable"))
    _raise_invalid("Pod", new, causes)


def prepare_pod_resize(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The pod a `resize` request results in: the old pod with only containers' `resources` and `resizePolicy`
    (regular and sidecar init containers, matched by name) taken from `new`; everything else in `new` is
    dropped, as the resize strategy does. Validate the result with `validate_pod_resize(old, result)`.
    """
    result = copy.deepcopy(dict(old))
    new_meta = new.get("metadata") or {}
    if "resourceVersion" in new_meta:
        result.setdefault("metadata", {})["resourceVersion"] = new_meta["resourceVersion"]
    spec = result.get("spec") or {}
    new_spec = new.get("spec") or {}
    for key, only_sidecars in (("containers", False), ("initContainers", True)):
        index = {c.get("name"): c for c in spec.get(key) or [] if isinstance(c, dict)}
        for ctr in new_spec.get(key) or []:
            target = index.get(ctr.get("name")) if isinstance(ctr, Mapping) else None
            if target is None or (only_sidecars and not _is_restartable_init(target)):
                continue
            for field_name in ("resources", "resizePolicy"):
                if field_name in ctr:
                    target[field_name] = copy.deepcopy(ctr[field_name])
                else:
                    target.pop(field_name, None)
    return result
