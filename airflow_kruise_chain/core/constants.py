"""Names shared by the chain pod, the stage runner and the swap protocol."""

from __future__ import annotations

PREFIX = "airflow-kruise-chain/"
"""Prefix of every label and annotation the provider owns."""

SLOTS: tuple[str, str] = ("slot-a", "slot-b")

SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/scratch"
RUNNER_VOLUME = "kruise-chain"
TERMINATION_LOG = "/dev/termination-log"

MARKER = "::kruise-chain::"
"""Token that starts every line the runner prints about itself."""

MAX_OUTPUTS_BYTES = 16 * 1024
"""Hard cap on the size of a stage's declared outputs (``$CHAIN_OUTPUT``)."""

GENERATION_ANNOTATION = PREFIX + "generation"
DAG_ID_ANNOTATION = PREFIX + "dag-id"
RUN_ID_ANNOTATION = PREFIX + "run-id"

DAG_ID_LABEL = PREFIX + "dag-id"
RUN_ID_LABEL = PREFIX + "run-id"
CHAIN_LABEL = PREFIX + "chain"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "airflow-kruise-chain"

SLOT_FIELDS: tuple[str, ...] = ("generation", "stage", "run")
"""Per-slot annotations ``airflow-kruise-chain/<slot>.<field>``: the slot's generation and stage, and the
runner's run spec (see wire.py)."""


def slot_annotation(slot: str, field: str) -> str:
    """Key of the per-slot annotation `field` (one of `SLOT_FIELDS`)."""
    return f"{PREFIX}{slot}.{field}"


def stage_annotation(stage: str) -> str:
    """Key of the per-stage record annotation."""
    return f"{PREFIX}stage.{stage}"


def other_slot(slot: str) -> str:
    """The slot that is not `slot`."""
    return SLOTS[1] if slot == SLOTS[0] else SLOTS[0]
