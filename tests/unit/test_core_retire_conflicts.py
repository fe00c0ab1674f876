"""A run spec retire (`swap.retire_unstarted`: a generation whose container cannot start, before its task
fails) that keeps meeting 409s (the kubelet writing the slot's pull back-off) raises once it gives up, so its
callers (`FollowLoop.cannot_start`, the deferred trigger's `retire`) log that the run spec stayed: before,
it answered False as for nothing to retire, and the task failed with no word that a later start of that
container would still run the generation."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core.conflicts import run
from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.swap import PREPARE_CONFLICTS, retire_unstarted
from tests.unit.test_core_prepare_named import RUN, _Api, gone_early_then_failed


def test_a_retire_that_keeps_conflicting_raises() -> None:
    pod, plan = gone_early_then_failed()
    api = _Api(pod, conflicts=PREPARE_CONFLICTS)
    with pytest.raises(ConflictError):
        run(retire_unstarted("slot-a", plan.generation), api, "etl-abc", "data")
    assert api.patches == PREPARE_CONFLICTS and RUN in pod.pod["metadata"]["annotations"]
