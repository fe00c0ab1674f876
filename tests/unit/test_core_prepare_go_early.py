"""A slot prepared ahead is said go to as soon as the pod status shows its NEW container running, before its
startup probe passed (`started`): the kubelet killed the old container before it started the new one, and
the status shows the new container only once it started (`kuberuntime_manager.go`; `generic.go` relist),
while `started` waits for the startup probe worker's next tick (`prober/worker.go`), up to a period later.
`runner --go` waits for the new runner to serve (tests/unit/test_core_runner_go_start.py). Only prepared
slots (no generation) follow this rule: an idle or running slot keeps Ready / started. These pods were made
before the slots got their prepare's id in env; with it a go need not wait for the status at all
(test_core_prepare_named.py)."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core import SlotBusyError, StageState, plan_swap
from airflow_kruise_chain.core.sizing import idle_by_pod
from airflow_kruise_chain.core.status import slot_status
from tests.unit.test_core_prepare import prepared_pod
from tests.unit.test_core_swap import LOAD, NOW, TRANSFORM, FakePod


def _started_false(pod: FakePod, slot: str) -> None:
    """The kubelet restarted `slot` on its prepared image: running, its startup probe not passed yet."""
    pod.start(slot, ready=False)
    pod.status(slot)["started"] = False


def test_a_prepared_slot_whose_new_container_runs_is_finished_before_started() -> None:
    pod, _ = prepared_pod(made_before=True)
    pod.set_ready("slot-b")  # transform ended
    _started_false(pod, "slot-a")
    status = slot_status(pod.view, "slot-a")
    assert status.container_id != pod.view.slot("slot-a").prepare.previous_container_id
    assert (status.state, status.confirmed, status.generation) == (StageState.FINISHED, True, 0)
    assert "startup probe" in status.message
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-a", 3)
    assert "spec" not in plan.patch  # annotations only: no second restart
    assert plan.record.previous_container_id == pod.status("slot-a")["containerID"]  # the new container


def test_a_prepared_slot_still_showing_its_old_container_is_not_said_go_to() -> None:
    """The old container running (not killed yet, or the relist has not seen the new one): SWAPPING, and the
    swap waits for the prepared slot rather than restart the other one."""
    pod, _ = prepared_pod(made_before=True)
    pod.set_ready("slot-b")
    pod.status("slot-a")["started"] = True
    assert slot_status(pod.view, "slot-a").state is StageState.SWAPPING
    with pytest.raises(SlotBusyError, match="being prepared"):
        plan_swap(pod.view, LOAD, try_number=1, now=NOW)


def test_a_prepared_slot_whose_new_runner_exited_is_not_said_go_to() -> None:
    """The new container terminated (its runner exited, the kubelet restarts it): still not usable."""
    pod, _ = prepared_pod(made_before=True)
    pod.set_ready("slot-b")
    _started_false(pod, "slot-a")
    pod.status("slot-a")["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert slot_status(pod.view, "slot-a").state is StageState.RUNNING
    with pytest.raises(SlotBusyError):
        plan_swap(pod.view, LOAD, try_number=1, now=NOW)


def test_only_prepared_slots_skip_the_startup_probe() -> None:
    """An idle slot restarted (no prepare) and a slot running a generation keep their rules: a running
    runner whose probe has not passed is RUNNING (its runner is starting)."""
    pod = FakePod()
    _started_false(pod, "slot-b")  # restarted by the kubelet, not prepared
    assert slot_status(pod.view, "slot-b").state is StageState.RUNNING
    plan = plan_swap(pod.view, TRANSFORM, try_number=1, now=NOW)
    assert plan.slot == "slot-a"  # not the starting slot


def test_the_sizer_counts_a_starting_prepared_slot_idle() -> None:
    """Sizing before the go (`size_for_swap`, `idle_by_pod`): the prepared slot holds no generation."""
    pod, _ = prepared_pod(made_before=True)
    pod.set_ready("slot-b")
    _started_false(pod, "slot-a")
    assert idle_by_pod(pod.view, "slot-a")
    status = slot_status(pod.view, "slot-a")
    assert status.state not in (StageState.SWAPPING, StageState.RUNNING) and status.confirmed


def test_a_prepared_slot_restarted_on_its_old_image_waits_for_its_startup_probe() -> None:
    """The runner ended its container to start afresh (a stage changed /dev) and the kubelet restarted it on
    the old image before it saw the prepare: the status shows a new container, on the old image, which the
    next sync kills. Not taken for the prepared one before its startup probe passed; a runtime reporting the
    prepared image under another spelling of it still counts."""
    pod, prepare = prepared_pod(made_before=True)
    pod.set_ready("slot-b")
    _started_false(pod, "slot-a")
    pod.status("slot-a")["image"] = "acme/extract:1.4"  # what slot-a ran before the prepare
    assert slot_status(pod.view, "slot-a").state is StageState.RUNNING
    with pytest.raises(SlotBusyError):
        plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.status("slot-a")["image"] = f"docker.io/{prepare.image}"  # Docker-normalised: the same image
    assert slot_status(pod.view, "slot-a").state is StageState.FINISHED
