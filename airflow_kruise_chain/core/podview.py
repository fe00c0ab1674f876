"""One snapshot of the chain pod (`ChainPod`) that every decision reads, built once per pod read.

A pod arrives in API JSON form (camelCase dicts, as the API server sends them; a `kubernetes` client model
converts with ``ApiClient().sanitize_for_serialization(v1_pod)``). `ChainPod.of` parses what the chain cares
about once: the pod's identity, why it can no longer run stages, the chain's generation, every stage record
(the one ``airflow-kruise-chain/stages`` annotation: `records_of`), and per slot its annotations, spec and
container status (``state`` and ``lastState.terminated``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .constants import SLOTS
from .wire import (
    GENERATION_ANNOTATION,
    GENERATION_FIELD,
    PREPARE_ENV,
    PREPARE_ID_FIELD,
    PREPARED_FIELD,
    STAGE_FIELD,
    STAGES_ANNOTATION,
    is_prepare_id,
    slot_annotation,
    stage_annotation,
)

Pod = Mapping[str, Any]

FAILED_TO_START_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "RegistryUnavailable",
        "SignatureValidationFailed",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreStartHookError",
        "PostStartHookError",
        "CrashLoopBackOff",
    }
)
"""Waiting reasons meaning the container cannot start as things stand."""


@dataclass(frozen=True)
class StageRecord:
    """What a swap wrote about a stage: its entry in the ``airflow-kruise-chain/stages`` annotation
    (`records_annotation`)."""

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
    delivered: bool = False
    """Airflow was told of the generation's success by its trigger (end from the triggerer): a later try of
    the stage's task is a clear, which runs it again (`podidentity.delivered_patch`)"""

    def to_dict(self) -> dict[str, Any]:
        """The record's JSON object; ``try_number`` is stored as ``try``. What a user reads first comes first:
        ``kubectl describe`` shows the first 138 characters of the records' annotation, which starts with
        the newest stage's record (which generation ran in which slot, for which try, how, on which image);
        the rest is for the provider."""
        data: dict[str, Any] = {
            "generation": self.generation,
            "slot": self.slot,
            "try": self.try_number,
            "action": self.action,
            "image": self.image,
            "swapped_at": self.swapped_at,
            "token": self.token,
            "previous_container_id": self.previous_container_id,
            "previous_reason": self.previous_reason,
            "delivered": self.delivered,
        }
        return {k: v for k, v in data.items() if v or k not in ("previous_reason", "token", "delivered")}

    def to_annotation(self) -> str:
        """`to_dict` as compact JSON (one line)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Any) -> StageRecord | None:
        """The record of a JSON object as `to_dict` writes it; None if `data` is not one (any JSON value
        may come in: a malformed record is ignored)."""
        try:
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
                delivered=data.get("delivered") is True,
            )
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
            return None

    @classmethod
    def from_annotation(cls, text: str) -> StageRecord | None:
        """Parse a record (`to_annotation`); None if it is missing or malformed."""
        return cls.from_dict(_json(text))


def _json(text: Any) -> Any:
    """`text` parsed as JSON, None if it is not a string of JSON (too deeply nested included)."""
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def records_annotation(records: Mapping[str, StageRecord]) -> str:
    """The value of ``airflow-kruise-chain/stages`` (`wire.STAGES_ANNOTATION`): one line of compact JSON, an
    object stage name -> record (`StageRecord.to_dict`) in the order of `records`, NEWEST FIRST (the stage
    swapped in last is the first key). One line, so ``kubectl describe`` prints the key and one shortened
    line whatever the number of stages: the newest stage's record head."""
    return json.dumps({stage: record.to_dict() for stage, record in records.items()}, separators=(",", ":"))


def records_of(annotations: Mapping[str, str]) -> dict[str, StageRecord]:
    """Every stage's latest record in the pod's `annotations`, newest first (highest generation first).

    From ``airflow-kruise-chain/stages``; a malformed value (not a JSON object) or a malformed entry is
    ignored, as a missing record. A pod built before that annotation holds one ``airflow-kruise-chain/
    stage.<name>`` annotation per stage (`wire.stage_annotation`): those are read too, the map winning for a
    stage in both, so that a stage recorded there never runs again; the next write of the records
    (`records_patch`) moves them into the map."""
    prefix = stage_annotation("")
    records = {
        key[len(prefix) :]: record
        for key, text in annotations.items()
        if key.startswith(prefix) and (record := StageRecord.from_annotation(text)) is not None
    }
    found = _json(annotations.get(STAGES_ANNOTATION))
    if isinstance(found, dict):
        for stage, data in found.items():
            if (record := StageRecord.from_dict(data)) is not None:
                records[stage] = record
    return dict(sorted(records.items(), key=lambda item: -item[1].generation))


def records_patch(pod: ChainPod, records: Mapping[str, StageRecord]) -> dict[str, str | None]:
    """The annotations that make `records` (newest first) the pod's stage records, for a patch guarded by
    `pod`'s resourceVersion: ``airflow-kruise-chain/stages`` (deleted when `records` is empty), and the
    deletion of the per-stage annotations of the layout before (`records_of` read them into `pod.records`)."""
    prefix = stage_annotation("")
    patch: dict[str, str | None] = {key: None for key in pod.annotations if key.startswith(prefix)}
    if records:
        patch[STAGES_ANNOTATION] = records_annotation(records)
    elif STAGES_ANNOTATION in pod.annotations:
        patch[STAGES_ANNOTATION] = None
    return patch


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
    id: str = ""
    """the prepare's id, also set as ``<slot>.prepare-id`` by the same patch ("": a worker from before ids
    prepared the slot, leaving that annotation at an earlier prepare's id, which then counts for nothing)"""

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
                id=str(data.get("id") or ""),
            )
        except (TypeError, ValueError, KeyError, AttributeError):
            return None

    def restarts(self) -> list[tuple[str, str]]:
        """Every restart the slot's prepares caused, (image, at), oldest first."""
        return [*self.history, (self.image, self.at)]


def _prepare_record(text: str | None) -> PrepareRecord | None:
    return PrepareRecord.from_annotation(text) if text else None


def _prepare_id(
    container: Mapping[str, Any], slot: str, annotations: Mapping[str, str], record: PrepareRecord | None
) -> str:
    """The slot's prepare id if its container's env carries it (`wire.PREPARE_ENV`) and the slot's latest
    prepare `record` has it too, else ""."""
    key = slot_annotation(slot, PREPARE_ID_FIELD)
    if record is None or not record.id or annotations.get(key) != record.id:
        return ""
    path = f"metadata.annotations['{key}']"
    for item in container.get("env") or ():
        ref = ((item or {}).get("valueFrom") or {}).get("fieldRef") or {}
        if item.get("name") == PREPARE_ENV and ref.get("fieldPath") == path:
            return record.id if is_prepare_id(record.id) else ""
    return ""


@dataclass(frozen=True)
class Terminated:
    """A container's ``state.terminated`` or ``lastState.terminated``, as the kubelet reported it."""

    container_id: str | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    finished_at: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> Terminated | None:
        if not raw:
            return None
        return cls(
            container_id=raw.get("containerID"),
            exit_code=raw.get("exitCode"),
            reason=raw.get("reason") or "",
            message=raw.get("message") or "",
            finished_at=raw.get("finishedAt"),
        )


@dataclass(frozen=True)
class Slot:
    """One slot of the chain pod: its annotations, its container's spec and status."""

    name: str
    generation: int
    """the generation the slot hosts (its annotation; 0: idle since the pod started)"""
    stage: str | None
    record: StageRecord | None
    """the record of the swap that put `generation` there (None: idle, or the stage was swapped in again
    elsewhere since)"""
    image: str = ""
    resources: Mapping[str, Any] | None = None
    """``spec.containers[].resources`` as the pod spec says now"""
    has_status: bool = False
    container_id: str = ""
    status_image: str = ""
    """``image`` of the container status: the image the container it shows was created from"""
    ready: bool = False
    started: bool = False
    """the container's startup probe passed (`runner --up`: its runner serves the slot)"""
    running: bool = False
    started_at: str | None = None
    waiting: bool = False
    waiting_reason: str = ""
    waiting_message: str = ""
    terminated: Terminated | None = None
    last_terminated: Terminated | None = None
    restart_count: int = 0
    allocated: Mapping[str, Any] | None = None
    """``allocatedResources`` of the container status"""
    actual: Mapping[str, Any] | None = None
    """``resources`` of the container status: what the running container has (a resize applied or not)"""
    prepare: PrepareRecord | None = None
    """the record of the slot's latest prepare, if any (see `prepared`: it may be used or overtaken)"""
    prepare_id: str = ""
    """the id of the slot's latest prepare (``<slot>.prepare-id``) when its container gets it in env
    (``KC_PREPARE``: a pod made before that env var was added gets ""); a go may name it (`wire.run_spec`)"""

    @property
    def prepared(self) -> PrepareRecord | None:
        """The prepare the slot stands in: it holds no generation and its image is the latest prepare's."""
        if self.prepare is None or self.generation != 0:
            return None
        return self.prepare if self.image == self.prepare.image else None

    @property
    def serving(self) -> bool:
        """Its runner serves the slot: Ready, or running with its startup probe (`runner --up`) passed;
        `started` shows at once, Ready (no readiness probe) only from the kubelet's next sync of the pod
        (`SetContainerStartup` vs `UpdatePodStatus`), a relist later."""
        return self.ready or (self.running and self.started)

    @property
    def failed_to_start(self) -> bool:
        """Whether the slot waits for a reason meaning its container cannot start as things stand."""
        return self.waiting_reason in FAILED_TO_START_REASONS

    def waiting_text(self) -> str:
        """``Reason: message`` of a waiting container ("" when it is not waiting)."""
        message = self.waiting_message
        return self.waiting_reason + (f": {message}" if message else "")


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _lost(pod: Pod) -> str | None:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "the chain pod is being deleted"
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase in ("Failed", "Succeeded"):
        detail = ": ".join(filter(None, (status.get("reason"), status.get("message"))))
        return f"the chain pod is {phase}" + (f" ({detail})" if detail else "")
    return None


@dataclass(frozen=True)
class ChainPod:
    """The chain pod as one read found it; build it with `of` and read everything from it."""

    raw: Pod
    name: str
    namespace: str
    uid: str
    resource_version: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    lost: str | None
    """why the pod can no longer run stages (terminating, Failed/Succeeded), None while it can"""
    generation: int
    """the chain's latest generation"""
    records: Mapping[str, StageRecord]
    """each stage's latest swap record, by stage name, newest first (`records_of`)"""
    slots: Mapping[str, Slot]
    phase: str
    status_message: str
    """the pod's `status.message` (why it failed, e.g. an eviction's)"""
    node_name: str
    grace_period: float

    @property
    def deleting(self) -> bool:
        """Whether the pod is being deleted (it has a deletionTimestamp)."""
        return bool((self.raw.get("metadata") or {}).get("deletionTimestamp"))

    @classmethod
    def of(cls, pod: Pod) -> ChainPod:
        """The snapshot of `pod`, the API's JSON form (the one place the chain pod's JSON is read)."""
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        annotations: Mapping[str, str] = metadata.get("annotations") or {}
        records = records_of(annotations)
        containers = {c.get("name"): c for c in spec.get("containers") or ()}
        statuses: dict[str, Mapping[str, Any]] = {}
        for container in status.get("containerStatuses") or ():
            statuses.setdefault(container.get("name"), container)
        slots = {}
        for name in SLOTS:
            generation = _int(annotations.get(slot_annotation(name, GENERATION_FIELD)))
            stage = annotations.get(slot_annotation(name, STAGE_FIELD)) or None
            record = records.get(stage) if generation and stage else None
            if record is not None and (record.generation, record.slot) != (generation, name):
                record = None  # the stage has been swapped in again since, elsewhere
            container = containers.get(name) or {}
            found = statuses.get(name)
            state = (found or {}).get("state") or {}
            waiting = state.get("waiting")
            slots[name] = Slot(
                name=name,
                generation=generation,
                stage=stage,
                record=record,
                image=container.get("image", ""),
                resources=container.get("resources") or {},
                has_status=found is not None,
                container_id=(found or {}).get("containerID") or "",
                status_image=(found or {}).get("image") or "",
                ready=bool((found or {}).get("ready")),
                started=bool((found or {}).get("started")),
                running="running" in state,
                started_at=(state.get("running") or {}).get("startedAt"),
                waiting=bool(waiting),
                waiting_reason=(waiting or {}).get("reason") or "",
                waiting_message=(waiting or {}).get("message") or "",
                terminated=Terminated.parse(state.get("terminated")),
                last_terminated=Terminated.parse(((found or {}).get("lastState") or {}).get("terminated")),
                restart_count=(found or {}).get("restartCount", 0),
                allocated=(found or {}).get("allocatedResources") or {},
                actual=(found or {}).get("resources") or {},
                prepare=(prepare := _prepare_record(annotations.get(slot_annotation(name, PREPARED_FIELD)))),
                prepare_id=_prepare_id(container, name, annotations, prepare),
            )
        return cls(
            raw=pod,
            name=metadata.get("name", ""),
            namespace=metadata.get("namespace", ""),
            uid=metadata.get("uid") or "",
            resource_version=metadata.get("resourceVersion"),
            labels=metadata.get("labels") or {},
            annotations=annotations,
            lost=_lost(pod),
            generation=_int(annotations.get(GENERATION_ANNOTATION)),
            records=records,
            slots=slots,
            phase=status.get("phase") or "",
            status_message=status.get("message") or "",
            node_name=spec.get("nodeName", ""),
            grace_period=float(spec.get("terminationGracePeriodSeconds", 30)),
        )

    def record(self, stage: str) -> StageRecord | None:
        """The record of `stage`'s latest swap, if any."""
        return self.records.get(stage)

    def slot(self, name: str) -> Slot:
        return self.slots[name]

    def slot_of(self, generation: int) -> str | None:
        """The slot hosting `generation` (None for generation 0, before the first swap)."""
        return next((s for s in SLOTS if generation and self.slots[s].generation == generation), None)


def snapshot(pod: Pod | None) -> ChainPod | None:
    """`ChainPod.of(pod)`, None for a pod that does not exist: what a read or a watch of the pod gives
    becomes a snapshot here, at the API boundary."""
    return None if pod is None else ChainPod.of(pod)


def lost_reason(pod: ChainPod | None) -> str | None:
    """Why the pod can no longer run stages (gone, terminating, Failed/Succeeded), or None if it can."""
    return "the chain pod does not exist" if pod is None else pod.lost
