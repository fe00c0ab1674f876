"""Read-only helpers over a pod in API JSON form (camelCase dicts, as the API server sends them).

A `kubernetes` client model converts with ``ApiClient().sanitize_for_serialization(v1_pod)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .wire import GENERATION_FIELD, PREPARED_FIELD, slot_annotation, stage_annotation

Pod = Mapping[str, Any]


@dataclass(frozen=True)
class StageRecord:
    """What a swap wrote about a stage (annotation ``airflow-kruise-chain/stage.<name>``)."""

    generation: int
    slot: str
    image: str
    try_number: int
    previous_container_id: str
    swapped_at: str
    action: str
    previous_reason: str = ""
    token: str = ""
    """the generation's token: the runner's markers for it carry it (see wire.py)"""

    def to_annotation(self) -> str:
        """Compact JSON; ``try_number`` is stored as ``try``."""
        data = asdict(self)
        data["try"] = data.pop("try_number")
        for optional in ("previous_reason", "token"):
            if not data[optional]:
                del data[optional]
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_annotation(cls, text: str) -> StageRecord | None:
        """Parse a record; None if it is missing or malformed."""
        try:
            data = json.loads(text)
            return cls(
                generation=int(data["generation"]),
                slot=str(data["slot"]),
                image=str(data["image"]),
                try_number=int(data["try"]),
                previous_container_id=str(data.get("previous_container_id") or ""),
                swapped_at=str(data.get("swapped_at") or ""),
                action=str(data.get("action") or "patch"),
                previous_reason=str(data.get("previous_reason") or ""),
                token=str(data.get("token") or ""),
            )
        except (TypeError, ValueError, KeyError):
            return None


PREPARE_HISTORY = 8
"""Restarts of earlier prepares a slot's prepare record keeps (the planner's back-off model counts them)."""


@dataclass(frozen=True)
class PrepareRecord:
    """What preparing a slot wrote (annotation ``airflow-kruise-chain/<slot>.prepared``): the image patched
    in ahead of the stage predicted to run next, with no generation (its runner parks until a swap says go).

    Kept after its stage went (or another stage took the slot): `history` and the latest prepare are the
    slot's restarts the kubelet's back-off counts."""

    image: str
    stage: str
    at: str
    previous_container_id: str
    previous_reason: str = ""
    history: tuple[tuple[str, str], ...] = ()
    """earlier prepares of the slot, (image, at), oldest first"""

    def to_annotation(self) -> str:
        data = asdict(self)
        data["history"] = [list(item) for item in self.history]
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_annotation(cls, text: str) -> PrepareRecord | None:
        """Parse a record; None if it is missing or malformed."""
        try:
            data = json.loads(text)
            history = tuple((str(image), str(at)) for image, at in data.get("history") or ())
            return cls(
                image=str(data["image"]),
                stage=str(data.get("stage") or ""),
                at=str(data["at"]),
                previous_container_id=str(data.get("previous_container_id") or ""),
                previous_reason=str(data.get("previous_reason") or ""),
                history=history[-PREPARE_HISTORY:],
            )
        except (TypeError, ValueError, KeyError, AttributeError):
            return None

    def restarts(self) -> list[tuple[str, str]]:
        """Every restart the slot's prepares caused, (image, at), oldest first."""
        return [*self.history, (self.image, self.at)]


def prepare_record(pod: Pod, slot: str) -> PrepareRecord | None:
    """The record of `slot`'s latest prepare, if any (see `prepared_for`: it may be used or overtaken)."""
    text = annotations(pod).get(slot_annotation(slot, PREPARED_FIELD))
    return PrepareRecord.from_annotation(text) if text else None


def prepared_for(pod: Pod, slot: str) -> PrepareRecord | None:
    """The prepare `slot` stands in: it holds no generation and its image is the latest prepare's."""
    record = prepare_record(pod, slot)
    if record is None or slot_generation(pod, slot) != 0:
        return None
    return record if (container_spec(pod, slot) or {}).get("image") == record.image else None


def annotations(pod: Pod) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def int_annotation(pod: Pod, key: str) -> int:
    """An integer annotation, 0 when absent or malformed."""
    try:
        return int(annotations(pod).get(key) or 0)
    except ValueError:
        return 0


def slot_generation(pod: Pod, slot: str) -> int:
    return int_annotation(pod, slot_annotation(slot, GENERATION_FIELD))


def stage_record(pod: Pod, stage: str) -> StageRecord | None:
    """The record of `stage`'s latest swap, if any."""
    text = annotations(pod).get(stage_annotation(stage))
    return StageRecord.from_annotation(text) if text else None


def all_stage_records(pod: Pod) -> list[StageRecord]:
    """The records of every stage swapped into the pod (each stage's latest swap)."""
    prefix = stage_annotation("")
    return [
        record
        for key, text in annotations(pod).items()
        if key.startswith(prefix) and (record := StageRecord.from_annotation(text)) is not None
    ]


def container_status(pod: Pod, name: str) -> Mapping[str, Any] | None:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        if status.get("name") == name:
            return status
    return None


def container_spec(pod: Pod, name: str) -> Mapping[str, Any] | None:
    for container in (pod.get("spec") or {}).get("containers") or ():
        if container.get("name") == name:
            return container
    return None


def waiting_reason(status: Mapping[str, Any] | None) -> str:
    """Reason of a waiting container ("" if it is not waiting)."""
    waiting = ((status or {}).get("state") or {}).get("waiting")
    return (waiting or {}).get("reason") or ""


def pod_lost_reason(pod: Pod | None) -> str | None:
    """Why the pod can no longer run stages (gone, terminating, Failed/Succeeded), or None if it can."""
    if pod is None:
        return "the chain pod does not exist"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "the chain pod is being deleted"
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        detail = ": ".join(filter(None, (status.get("reason"), status.get("message"))))
        return f"the chain pod is {phase}" + (f" ({detail})" if detail else "")
    return None
