"""Names of the chain pod's layout and identity: its slots, volumes and labels.

The annotations the runner and the swap exchange (their prefix, the per-slot fields, the stage records, the
marker) are the runner's wire format: `wire.py`.
"""

from __future__ import annotations

from .wire import PREFIX

SLOTS: tuple[str, str] = ("slot-a", "slot-b")

SCRATCH_VOLUME = "scratch"
SCRATCH_MOUNT = "/scratch"
RUNNER_VOLUME = "kruise-chain"
TERMINATION_LOG = "/dev/termination-log"
TMP_MOUNT = "/tmp"
SHM_MOUNT = "/dev/shm"
STAGE_HOME = f"{TMP_MOUNT}/.kruise-chain-home"
"""The HOME each stage gets: made empty by the runner for each generation in the slot's /tmp volume (the first
folder of its KC_TMP)."""

DAG_ID_LABEL = PREFIX + "dag-id"
RUN_ID_LABEL = PREFIX + "run-id"
CHAIN_LABEL = PREFIX + "chain"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "airflow-kruise-chain"


def other_slot(slot: str) -> str:
    """The slot that is not `slot`."""
    return SLOTS[1] if slot == SLOTS[0] else SLOTS[0]
