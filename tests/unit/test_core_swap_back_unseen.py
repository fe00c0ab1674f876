"""A stage on the image a prepared slot still runs is not patched back into that slot before the kubelet
shows the prepare's restart (`swap._back_unseen`).

The kubelet's pod worker syncs the newest pod it has when it gets to it (`pod_workers.go` `UpdatePod` replaces
a pending update): a prepare (image A -> B) and a patch back (B -> A) that land before its next sync leave a
spec whose hash is the running container's, so nothing restarts, and that container's runner leaves the
patch's run spec (kc_r=1) to the restarted container that never comes (core/runner.sh `kc_poll`). The stage
waited out its swap timeout (600 s). A misprediction makes it: a prepare two ahead at stage N's end, then
a short stage N+1, then a stage on slot X's old image (a branch, or a retry of N)."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core import SlotBusyError, plan_swap
from airflow_kruise_chain.core.spec import StageSpec
from tests.unit.test_core_prepare import prepared_pod
from tests.unit.test_core_swap import NOW

AGAIN = StageSpec("again", "acme/extract:1.4", cmds=["extract"])
"""a stage on the image slot-a ran (extract) before it was prepared for load"""
OTHER = StageSpec("other", "acme/report:1.0", cmds=["report"])


def test_a_stage_on_the_image_a_prepared_slot_still_runs_takes_the_other_slot() -> None:
    pod, _ = prepared_pod()  # extract ran in slot-a, transform in slot-b, slot-a prepared for load
    pod.set_ready("slot-b")  # transform ended; the status still shows slot-a's container on extract
    plan = plan_swap(pod.view, AGAIN, try_number=1, now=NOW)
    assert (plan.action, plan.slot) == ("patch", "slot-b")


def test_it_waits_for_the_prepares_restart_when_the_other_slot_is_busy() -> None:
    pod, _ = prepared_pod()  # transform still runs in slot-b
    with pytest.raises(SlotBusyError) as busy:
        plan_swap(pod.view, AGAIN, try_number=1, now=NOW)
    assert busy.value.slot == "slot-a" and busy.value.preparing is None  # the driver reads the pod again
    assert "the kubelet still shows its container on acme/extract:1.4" in str(busy.value)
    pod.start("slot-a", ready=False)  # the kubelet restarted it on load: a patch back is a real change
    plan = plan_swap(pod.view, AGAIN, try_number=1, now=NOW)
    assert (plan.action, plan.slot) == ("patch", "slot-a")
    assert plan.patch["spec"] == {"containers": [{"name": "slot-a", "image": "acme/extract:1.4"}]}


def test_a_prepared_slot_still_takes_another_image_or_its_own() -> None:
    pod, _ = prepared_pod()  # slot-b busy: slot-a is the only free slot
    other = plan_swap(pod.view, OTHER, try_number=1, now=NOW)  # a third image changes what the kubelet sees
    assert (other.action, other.slot) == ("patch", "slot-a")
    load = plan_swap(pod.view, StageSpec("load", "acme/load:1.1", cmds=["load"]), try_number=1, now=NOW)
    assert (load.action, load.slot) == ("go", "slot-a")  # the prepared image: a go naming the prepare


def test_a_container_restarted_on_the_old_image_before_the_prepare_was_seen_counts_too() -> None:
    """A runner that ended its container to start afresh (runner.sh `kc_renew`), restarted by the kubelet on
    the old image before it saw the prepare: a patch back would restart nothing either."""
    pod, _ = prepared_pod()
    pod.start("slot-a", ready=True)
    pod.status("slot-a")["image"] = "acme/extract:1.4"
    with pytest.raises(SlotBusyError):
        plan_swap(pod.view, AGAIN, try_number=1, now=NOW)
