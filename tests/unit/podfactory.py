"""Chain pod snapshots for the core's tests: `chain_pod(...)` builds the pod as the API server would send it
(camelCase JSON) and returns its `ChainPod`, the only form the core takes.

    chain_pod(records=[record], slots={"slot-b": running("containerd://new", ready=True, generation=3,
              stage="load")})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_kruise_chain.core.constants import SLOTS
from airflow_kruise_chain.core.podview import ChainPod, PrepareRecord, StageRecord, records_annotation
from airflow_kruise_chain.core.wire import (
    GENERATION_ANNOTATION,
    GENERATION_FIELD,
    PREPARED_FIELD,
    STAGE_FIELD,
    STAGES_ANNOTATION,
    slot_annotation,
)


def container(
    state: str = "running",
    container_id: str = "",
    *,
    ready: bool = False,
    reason: str = "",
    message: str = "",
    exit_code: int | None = None,
    last: Mapping[str, Any] | None = None,
    generation: int = 0,
    stage: str | None = None,
    image: str = "",
    resources: Mapping[str, Any] | None = None,
    prepared: PrepareRecord | None = None,
    **status: Any,
) -> dict[str, Any]:
    """One slot: its container's status (`state` running, waiting or terminated; `last`:
    ``lastState.terminated``; more status fields as keywords), its annotations (`generation`, `stage`,
    `prepared`) and its spec (`image`, `resources`)."""
    detail: dict[str, Any] = {}
    if reason:
        detail["reason"] = reason
    if message:
        detail["message"] = message
    if exit_code is not None:
        detail["exitCode"] = exit_code
    found: dict[str, Any] = {"state": {state: detail}, "ready": ready, **status}
    if container_id:
        found["containerID"] = container_id
    if last is not None:
        found["lastState"] = {"terminated": dict(last)}
    return {
        "status": found,
        "generation": generation,
        "stage": stage,
        "image": image,
        "resources": resources,
        "prepared": prepared,
    }


def running(container_id: str, **kw: Any) -> dict[str, Any]:
    return container("running", container_id, **kw)


def waiting(reason: str, container_id: str = "", **kw: Any) -> dict[str, Any]:
    return container("waiting", container_id, reason=reason, **kw)


def terminated(container_id: str, exit_code: int, reason: str = "", **kw: Any) -> dict[str, Any]:
    return container("terminated", container_id, exit_code=exit_code, reason=reason, **kw)


def chain_pod(
    *,
    records: Iterable[tuple[str, StageRecord]] | Mapping[str, StageRecord] = (),
    slots: Mapping[str, Mapping[str, Any] | None] | None = None,
    generation: int | None = None,
    phase: str = "Running",
    reason: str = "",
    name: str = "chain-pod",
    namespace: str = "default",
    resource_version: str = "1",
    deleting: bool = False,
    annotations: Mapping[str, str] | None = None,
    **metadata: Any,
) -> ChainPod:
    """A chain pod: `records` (stage -> its latest swap record), `slots` (slot -> `container(...)`, None or
    left out: no status yet), the chain's `generation` (default: the highest a slot hosts), the pod's `phase`
    and its status `reason` (`Evicted`)."""
    slots = dict(slots or {})
    records = dict(records)
    notes: dict[str, str] = {STAGES_ANNOTATION: records_annotation(records)} if records else {}
    containers, statuses = [], []
    for slot in SLOTS:
        hosted = slots.get(slot) or {}
        if hosted.get("generation"):
            notes[slot_annotation(slot, GENERATION_FIELD)] = str(hosted["generation"])
        if hosted.get("stage"):
            notes[slot_annotation(slot, STAGE_FIELD)] = hosted["stage"]
        if hosted.get("prepared") is not None:
            notes[slot_annotation(slot, PREPARED_FIELD)] = hosted["prepared"].to_annotation()
        spec: dict[str, Any] = {"name": slot, "image": hosted.get("image") or f"img-{slot}"}
        if hosted.get("resources") is not None:
            spec["resources"] = dict(hosted["resources"])
        containers.append(spec)
        if hosted.get("status") is not None:
            statuses.append({"name": slot, "image": spec["image"], **hosted["status"]})
    chain = (
        generation
        if generation is not None
        else max((s.get("generation") or 0 for s in slots.values() if s), default=0)
    )
    if chain:
        notes[GENERATION_ANNOTATION] = str(chain)
    notes.update(annotations or {})
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": resource_version,
        "annotations": notes,
        **metadata,
    }
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T10:00:00Z"
    raw = {
        "metadata": meta,
        "spec": {"containers": containers, "nodeName": "node-1"},
        "status": {"phase": phase, "containerStatuses": statuses, **({"reason": reason} if reason else {})},
    }
    return ChainPod.of(raw)
