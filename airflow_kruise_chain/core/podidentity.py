"""What a chain pod was built from, whether the setup task may reuse one, and what a stage's try finds in it.

Setup stamps the pod with a hash of everything it built it from (`SPEC_HASH_ANNOTATION`: the pod manifest
as built from the DAG's chain). A later setup try of the same DAG run reuses the
pod only when it is healthy and built from the same definition; otherwise it deletes it and makes a fresh one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .conflicts import READ, Guarded, patch
from .constants import SLOTS
from .errors import ChainError, ConflictError
from .podview import ChainPod, records_patch
from .watch import wait_pod_gone
from .wire import PREFIX, SEAL_ANNOTATION

SPEC_HASH_ANNOTATION = PREFIX + "spec-hash"


def spec_hash(*built: Mapping[str, Any]) -> str:
    """A short, stable hash of the objects setup builds (names and labels included: they are per run), the
    pod's seal left out (random per pod: `wire.SEAL_ANNOTATION`)."""
    text = json.dumps([_unsealed(one) for one in built], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _unsealed(built: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = (built.get("metadata") or {}).get("annotations") or {}
    if SEAL_ANNOTATION not in annotations:
        return built
    metadata = {
        **built["metadata"],
        "annotations": {k: v for k, v in annotations.items() if k != SEAL_ANNOTATION},
    }
    return {**built, "metadata": metadata}


def stamp(pod: dict[str, Any], digest: str) -> dict[str, Any]:
    """`pod` with its spec hash annotation."""
    pod.setdefault("metadata", {}).setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = digest
    return pod


def unusable_reason(pod: ChainPod, digest: str) -> str | None:
    """Why setup must not reuse this pod of its run, or None if it may.

    Lost (deleted, Failed, Succeeded); built from another definition of the chain (the DAG file changed
    since); or a slot that never started (its image cannot be pulled, ...) in a pod no stage ran in yet. A pod
    in which stages ran keeps its scratch data: a stage's image that fails to start there is that stage's
    failure.
    """
    if pod.lost is not None:
        return pod.lost
    found = pod.annotations.get(SPEC_HASH_ANNOTATION)
    if found != digest:
        return (
            f"it was built from another definition of the chain (spec hash {found or 'none'}, the DAG's "
            f"chain now gives {digest})"
        )
    if pod.generation == 0:
        for slot in SLOTS:
            if pod.slot(slot).failed_to_start:
                return f"{slot} cannot start: {pod.slot(slot).waiting_text()}"
    return None


def prepare_pod(
    api: Any,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    digest: str,
    *,
    timeout: float,
    log: Callable[[str], None] = lambda _line: None,
) -> ChainPod | None:
    """Make way for this run's chain pod `name` before it is created; return the pod to reuse, if any.

    Refuses (ChainError) a pod of that name that belongs to another DAG run or chain (`labels` differ). A pod
    of this run that `unusable_reason` rejects is deleted and waited for, so that a fresh one can be created:
    the chain then starts again from its first stage. `api` is a `api.ChainApi`.
    """
    pod = api.read_pod(name, namespace)
    if pod is None:
        return None
    own = pod.labels
    wrong = [f"{k}={own.get(k)!r} (this run: {v!r})" for k, v in labels.items() if own.get(k) != v]
    if wrong:
        raise ChainError(
            f"pod {namespace}/{name} already exists but is not this DAG run's chain pod "
            f"({', '.join(wrong)}): refusing to reuse it; delete it, or give the chain another name"
        )
    reason = unusable_reason(pod, digest)
    if reason is None:
        log(f"chain pod {namespace}/{name} of this DAG run already exists: reusing it")
        return pod
    log(f"chain pod {namespace}/{name} of this DAG run cannot be reused ({reason}): replacing it")
    if not pod.deleting:
        api.delete_pod(name, namespace)
    if wait_pod_gone(api, name, namespace, pod.resource_version, timeout):
        return None
    raise ChainError(f"the old chain pod {namespace}/{name} is still terminating after {timeout:g}s")


def missing_inputs(pod: ChainPod, predecessors: Iterable[str]) -> list[str]:
    """The predecessor stages that never ran in this pod (no record): their outputs are not in its scratch."""
    view = pod
    return [name for name in predecessors if view.record(name) is None]


def generation_identity(pod: ChainPod, generation: int) -> dict[str, Any]:
    """What identifies one generation across tries and pods: the pod's uid and the generation number."""
    return {"pod_uid": pod.uid, "generation": generation}


def retire_patch(pod: ChainPod, stage: str) -> dict[str, Any]:
    """A conditional patch removing `stage`'s record, so that its next swap runs it as a new generation.

    For a stage that was cleared after it had succeeded (its result delivered): the driver would otherwise
    adopt the result of that generation. The generation's own records in scratch and its slot are untouched.
    It writes the records' annotation without `stage` (deleted once empty: `podview.records_patch`), guarded
    by the snapshot's resourceVersion: after a 409 the caller re-reads the pod and retires again, so no
    record a concurrent swap wrote is lost.
    """
    kept = {name: record for name, record in pod.records.items() if name != stage}
    return {
        "metadata": {
            "resourceVersion": pod.resource_version,
            "annotations": records_patch(pod, kept),
        }
    }


def delivered_patch(pod: ChainPod, stage: str, generation: int) -> dict[str, Any] | None:
    """A conditional patch marking `stage`'s record of `generation` delivered (`StageRecord.delivered`), for
    a trigger that ends the stage's task itself: what `task_state_store` records for a task that returns
    (a later try is then a clear, which runs the stage again). Guarded by `pod`'s resourceVersion (after a
    409 the caller re-reads and marks again); None when there is nothing to mark (already marked, or the
    record is of another generation: a swap of the stage since)."""
    record = pod.record(stage)
    if record is None or record.generation != generation or record.delivered:
        return None
    records = {
        name: (dataclasses.replace(found, delivered=True) if name == stage else found)
        for name, found in pod.records.items()
    }
    return {"metadata": {"resourceVersion": pod.resource_version, "annotations": records_patch(pod, records)}}


DELIVER_CONFLICTS = 10
"""conflicting updates in a row after which marking a generation delivered gives up"""


def mark_delivered(stage: str, generation: int, pod: ChainPod | None = None) -> Guarded[bool]:
    """Mark `stage`'s record of `generation` delivered (`delivered_patch`) as a guarded update
    (`conflicts.arun` in a trigger), planned from `pod` (None: read it), again from a fresh read after a 409.
    True once the record says delivered; False when it cannot (the pod gone, the record of another
    generation, `DELIVER_CONFLICTS` conflicts in a row): the task must not then be ended as delivered."""
    for _ in range(DELIVER_CONFLICTS):
        pod = pod or (yield READ)
        if pod is None:
            return False
        body = delivered_patch(pod, stage, generation)
        if body is None:
            record = pod.record(stage)
            return record is not None and record.generation == generation and record.delivered
        try:
            yield patch(body)
        except ConflictError:
            pod = None
            continue
        return True
    return False
