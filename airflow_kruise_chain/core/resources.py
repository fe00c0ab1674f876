"""What a slot reserves, computed from the stages alone (pure: no I/O, no client).

Kubernetes quantities (`parse_quantity`); the static sizing, where both slots reserve the largest stage's
size for the whole run (`slot_resources`); the pod's QoS class (`qos_class`, `ComputePodQOS`); and the
in-place sizing plan (`plan_sizing` -> `ChainSizing`) that `sizing.py` carries out through pod resizes.
`spec.py` checks a chain's sizing with it at parse time, `manifest.py` sizes the pod with it; it imports
neither of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from .errors import ChainConfigError
from .podview import ChainPod

_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_BINARY_SUFFIX = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: str) -> Decimal:
    """Parse a Kubernetes quantity (``500m``, ``2Gi``, ``1e3``) strictly; ValueError if it is invalid."""
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (examples: 500m, 2, 1.5Gi, 512Mi)")
    suffix = match.group(3) or ""
    number = text[: len(text) - len(suffix)]
    if suffix in _BINARY_SUFFIX:
        return Decimal(number) * (Decimal(1024) ** _BINARY_SUFFIX[suffix])
    if suffix in _DECIMAL_SUFFIX:
        return Decimal(number).scaleb(_DECIMAL_SUFFIX[suffix])
    return Decimal(number).scaleb(int(suffix[1:]))


class SizedStage(Protocol):
    """What sizing reads of a stage (`spec.StageSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def resources(self) -> Mapping[str, Mapping[str, str]]: ...


def slot_resources(stages: Sequence[SizedStage]) -> dict[str, dict[str, str]]:
    """Resources of a slot able to host any of `stages`: the max request and the max limit per resource.

    A request defaults to the limit (as in Kubernetes). A resource that some stage requests without a limit
    gets no limit, so the slot never caps a stage tighter than the stage itself does.
    """
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    unbounded: set[str] = set()
    for stage in stages:
        stage_requests = stage.resources.get("requests", {})
        stage_limits = stage.resources.get("limits", {})
        for res in stage_requests.keys() | stage_limits.keys():
            _keep_max(requests, res, stage_requests.get(res) or stage_limits[res])
            if res in stage_limits:
                _keep_max(limits, res, stage_limits[res])
            else:
                unbounded.add(res)
    result = {"requests": dict(sorted(requests.items()))} if requests else {}
    bounded = {res: text for res, text in sorted(limits.items()) if res not in unbounded}
    if bounded:
        result["limits"] = bounded
    return result


def _keep_max(quantities: dict[str, str], resource: str, text: str) -> None:
    if resource not in quantities or parse_quantity(text) > parse_quantity(quantities[resource]):
        quantities[resource] = text


SIZING_ANNOTATION = "kruise-chain.io/sizing"
SIZING_MODES = ("auto", "in-place", "static")
RESIZABLE = ("cpu", "memory")
PARKED_REQUESTS = {"cpu": "10m", "memory": "4Mi"}
PARKED_LIMITS = {"cpu": "100m", "memory": "32Mi"}
"""The parked minimum: what an idle slot (its runner waiting for a stage) reserves, and its limits. A parked
runner (busybox sh polling a file with builtins) measures 1.8 MiB RSS: 4Mi requested leaves twice that."""

Resources = dict[str, dict[str, str]]


def qos_class(containers: Sequence[Mapping[str, Mapping[str, str]]]) -> str:
    """The QoS class of a pod whose containers have these resources (`ComputePodQOS`)."""
    any_set = False
    guaranteed = True
    for resources in containers:
        requests = {k: v for k, v in (resources.get("requests") or {}).items() if k in RESIZABLE}
        limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in RESIZABLE}
        any_set = any_set or bool(requests or limits)
        if set(limits) != set(RESIZABLE):
            guaranteed = False
        elif any(parse_quantity(requests.get(r, limits[r])) != parse_quantity(limits[r]) for r in RESIZABLE):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass(frozen=True)
class ChainSizing:
    """Per-stage slot resources, the parked size and the QoS class they all keep."""

    qos: str
    parked: Resources
    stages: Mapping[str, Resources] = field(default_factory=dict)

    def for_stage(self, name: str) -> Resources:
        """The size of stage `name`: a map index (``name-N``, `spec.index_stage_name`) has its mapped
        stage's; a stage unknown here the parked size."""
        if name not in self.stages and (mapped := name.rpartition("-")[0]) in self.stages:
            return self.stages[mapped]
        return self.stages.get(name, self.parked)

    def annotation(self) -> str:
        return json.dumps(
            {"qos": self.qos, "parked": self.parked, "stages": dict(self.stages)}, sort_keys=True
        )

    @classmethod
    def from_pod(cls, pod: ChainPod) -> ChainSizing | None:
        """The sizing the chain pod carries, or None when it is sized statically."""
        raw = pod.annotations.get(SIZING_ANNOTATION)
        if not raw or raw == "static":
            return None
        data = json.loads(raw)
        return cls(qos=data["qos"], parked=data["parked"], stages=data["stages"])


def quantity_max(values: Sequence[str]) -> str:
    """The largest of `values` as a quantity, as written (`1Gi` over `1000Mi`)."""
    return max(values, key=parse_quantity)


def plan_sizing(
    stages: Sequence[SizedStage], parked: Mapping[str, Mapping[str, str]] | None = None
) -> ChainSizing:
    """The in-place sizing of a chain of `stages` (already validated).

    Per resizable resource a stage mentions, its slot requests the stage's request (or its limit); a stage
    that does not mention it requests the parked minimum. A resource has a limit when some stage limits it
    and none requests it unbounded (as the static sizing decides); a stage without a limit of its own then
    gets the largest stage limit. `parked` overrides the parked minimum (`PARKED_REQUESTS`/`PARKED_LIMITS`).
    Raises ChainConfigError naming the stages when a stage's size next to a parked slot would have another
    QoS class than the pod is created with (the API server refuses such a resize).
    """
    parked = parked or {}
    mentioned = {r for s in stages for kind in ("requests", "limits") for r in s.resources.get(kind, {})}
    mentioned |= {r for kind in ("requests", "limits") for r in parked.get(kind, {})}
    resizable = [r for r in RESIZABLE if r in mentioned]
    bounded = {
        r
        for r in resizable
        if any(r in s.resources.get("limits", {}) for s in stages)
        and not any(
            r in s.resources.get("requests", {}) and r not in s.resources.get("limits", {}) for s in stages
        )
    }
    max_limit = {
        r: quantity_max([s.resources["limits"][r] for s in stages if r in s.resources.get("limits", {})])
        for r in bounded
    }
    fixed = _static_other(stages)
    parked_requests = {**PARKED_REQUESTS, **dict(parked.get("requests", {}))}
    sizes: dict[str, Resources] = {}
    for stage in stages:
        requests, limits = dict(fixed.get("requests", {})), dict(fixed.get("limits", {}))
        own_requests, own_limits = stage.resources.get("requests", {}), stage.resources.get("limits", {})
        for r in resizable:
            requests[r] = own_requests.get(r) or own_limits.get(r) or parked_requests[r]
            if r in bounded:
                limits[r] = own_limits.get(r) or max_limit[r]
        sizes[stage.name] = _resources(requests, limits)
    guaranteed = bool(sizes) and all(qos_class([size]) == "Guaranteed" for size in sizes.values())
    requests, limits = dict(fixed.get("requests", {})), dict(fixed.get("limits", {}))
    for r in resizable:
        requests[r] = PARKED_LIMITS[r] if guaranteed else PARKED_REQUESTS[r]
        if r in bounded:
            limits[r] = PARKED_LIMITS[r]
    # parked_resources overrides the default parked minimum resource by resource
    requests.update(parked.get("requests", {}))
    limits.update(parked.get("limits", {}))
    parked_size = _resources(requests, limits)
    _check_same_shape(sizes, parked_size)
    init = init_resources(parked_size)
    qos = qos_class([parked_size, parked_size, init])  # the pod is created with both slots parked
    changing = {name: qos_class([size, parked_size, init]) for name, size in sizes.items()}
    changing = {name: other for name, other in changing.items() if other != qos}
    if changing:
        named = ", ".join(f"{name!r} ({other})" for name, other in changing.items())
        raise ChainConfigError(
            "stages",
            f"the chain pod starts {qos} (both slots parked at {parked_size}), but sizing a slot for "
            f"{named} would change its QoS class, which an in-place resize may not do; give those stages "
            "(or parked_resources) the same shape of requests and limits, or use sizing='static'",
        )
    # Every size then keeps the pod's QoS class next to any other (two stages at once included): the init
    # container keeps the parked size, so a Burstable or BestEffort parked size fixes the class whatever
    # the slots hold, and a Guaranteed one means every stage is Guaranteed.
    return ChainSizing(qos=qos, parked=parked_size, stages=sizes)


def _shape(resources: Mapping[str, Mapping[str, str]]) -> set[tuple[str, str]]:
    return {(kind, r) for kind, values in resources.items() for r in values if r in RESIZABLE}


def _check_same_shape(sizes: Mapping[str, Resources], parked: Resources) -> None:
    """Every stage's size names the same cpu/memory requests and limits as the parked size: a resize may
    not remove a request or a limit, and adding a memory limit is refused before Kubernetes 1.34."""
    want = _shape(parked)
    for name, size in sizes.items():
        have = _shape(size)
        if have != want:
            extra = ", ".join(f"{kind}.{r}" for kind, r in sorted(want - have))
            missing = ", ".join(f"{kind}.{r}" for kind, r in sorted(have - want))
            detail = "; ".join(
                part
                for part in (
                    f"parked_resources sets {extra}, which stage {name!r} leaves unset" if extra else "",
                    f"stage {name!r} sets {missing}, which parked_resources leaves unset" if missing else "",
                )
                if part
            )
            raise ChainConfigError(
                "parked_resources",
                f"{detail}: an in-place resize can neither add nor remove a request or limit, so the parked "
                "size must set the same cpu/memory requests and limits as the stages' sizes; change "
                "parked_resources (or leave it out for the default) or use sizing='static'",
            )


def init_resources(parked: Mapping[str, Mapping[str, str]]) -> Resources:
    """The chain pod's init container's resources: the parked size's cpu and memory. The init container
    counts for the pod's QoS class (`ComputePodQOS`) and reserves no more than one parked slot."""
    return {
        kind: {r: q for r, q in values.items() if r in RESIZABLE}
        for kind, values in parked.items()
        if any(r in RESIZABLE for r in values)
    }


def _resources(requests: Mapping[str, str], limits: Mapping[str, str]) -> Resources:
    out: Resources = {}
    if requests:
        out["requests"] = dict(sorted(requests.items()))
    if limits:
        out["limits"] = dict(sorted(limits.items()))
    return out


def _static_other(stages: Sequence[SizedStage]) -> Resources:
    """The static sizing of the resources a resize cannot change."""
    static = slot_resources(stages)
    return {kind: {r: q for r, q in values.items() if r not in RESIZABLE} for kind, values in static.items()}
