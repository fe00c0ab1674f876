"""A go into a slot prepared ahead names the prepare (`wire.PREPARE_ID_FIELD`, run spec line `kc_p`), which
the slot's container gets in env when the kubelet creates it (`KC_PREPARE`, a fieldRef resolved from the pod
whose image it starts): only the container created for that prepare runs it
(tests/unit/test_core_runner_prepared.py), so the go need not wait until the status shows that container. A
slot whose prepare cannot start keeps its rule; a pod made before (no such env) keeps today's
(test_core_prepare_go_early.py); a generation that cannot start has its run spec retired before its task
fails."""

from __future__ import annotations

import copy
import dataclasses
import re
import time

import pytest

from airflow_kruise_chain.core import SlotBusyError, StageState, plan_swap
from airflow_kruise_chain.core.conflicts import run
from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.events import NO_EVENTS
from airflow_kruise_chain.core.follow import GenerationFollow, Next
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.status import slot_status
from airflow_kruise_chain.core.swap import SwapPlan, retire_unstarted
from airflow_kruise_chain.core.wire import run_spec_generation
from tests.unit.test_core_prepare import Api, prepared_pod
from tests.unit.test_core_swap import LOAD, NOW, FakePod

RUN = "airflow-kruise-chain/slot-a.run"
PREPARE_ID = "airflow-kruise-chain/slot-a.prepare-id"


def test_a_prepare_gives_the_slot_a_fresh_id_its_container_gets_in_env() -> None:
    pod, prepare = prepared_pod()
    given = prepare.patch["metadata"]["annotations"][PREPARE_ID]
    assert re.fullmatch(r"[0-9a-f]{16}", given)
    assert pod.view.slot("slot-a").prepare_id == given
    old, _ = prepared_pod(made_before=True)  # its slots do not get it: the id is not for them
    assert old.view.slot("slot-a").prepare_id == ""


def test_a_go_names_the_prepare_while_the_status_still_shows_the_old_container() -> None:
    pod, prepare = prepared_pod()
    pod.set_ready("slot-b")  # transform ended; the kubelet has not restarted slot-a yet
    old = pod.status("slot-a")["containerID"]
    status = slot_status(pod.view, "slot-a")
    assert (status.state, status.confirmed, status.container_id) == (StageState.FINISHED, True, old)
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-a", 3)
    assert "spec" not in plan.patch  # annotations only: the prepare's restart is the only one
    spec = plan.patch["metadata"]["annotations"][RUN]
    assert f"\nkc_p={prepare.patch['metadata']['annotations'][PREPARE_ID]}\n" in spec
    assert PREPARE_ID not in plan.patch["metadata"]["annotations"]  # left in place: the env may come later


@pytest.mark.parametrize("shown", ["ContainerCreating", "terminated", "old image", "new, not started"])
def test_a_go_names_the_prepare_whatever_container_of_the_slot_the_status_shows(shown: str) -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    if shown == "ContainerCreating":
        pod.wait("slot-a", "ContainerCreating", "")
    elif shown == "terminated":
        pod.status("slot-a")["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    else:  # the kubelet restarted it: on the old image (a runner's own restart), or the prepared one
        pod.start("slot-a", ready=False)
        pod.status("slot-a")["started"] = False
        if shown == "old image":
            pod.status("slot-a")["image"] = "acme/extract:1.4"
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert (plan.action, plan.slot) == ("go", "slot-a")
    assert "\nkc_p=" in plan.patch["metadata"]["annotations"][RUN]


def test_a_prepare_that_cannot_start_is_not_said_go_to_early() -> None:
    # ErrImagePull: test_core_prepare.py's test_a_prepared_image_that_cannot_start_is_not_said_go_to
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    pod.wait("slot-a", "RunContainerError", "exec failed")
    assert slot_status(pod.view, "slot-a").state is StageState.FAILED_TO_START


def test_a_pod_made_before_waits_and_names_no_prepare() -> None:
    pod, _ = prepared_pod(made_before=True)
    pod.set_ready("slot-b")
    with pytest.raises(SlotBusyError, match="being prepared"):
        plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.start("slot-a", ready=True)
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert plan.action == "go" and "kc_p=" not in plan.patch["metadata"]["annotations"][RUN]


def test_a_slot_that_holds_a_generation_is_no_longer_prepared() -> None:
    # so a later go into it (same image, annotations only) names no prepare (`_swap_patch`)
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    pod.apply(plan_swap(pod.view, LOAD, try_number=1, now=NOW).patch)
    assert pod.view.slot("slot-a").prepared is None and pod.view.slot("slot-a").prepare_id


class _Api:
    """A pod to retire a run spec from: a 409 on the first `conflicts` patches."""

    def __init__(self, pod, conflicts: int = 0) -> None:
        self.pod, self.conflicts, self.patches = pod, conflicts, 0

    def read_pod(self, name: str, namespace: str):
        return self.pod.view

    def patch_pod(self, name: str, namespace: str, body):
        self.patches += 1
        if self.conflicts:
            self.conflicts -= 1
            raise ConflictError("409")
        self.pod.apply(body)
        return self.pod.view


def gone_early_then_failed() -> tuple[FakePod, SwapPlan]:
    """load said go to in the prepared slot-a, whose new container then cannot start (ErrImagePull)."""
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.apply(plan.patch)
    pod.wait("slot-a", "ErrImagePull", "not found")  # the prepared container never started
    return pod, plan


def test_a_generation_that_cannot_start_has_its_run_spec_retired_only_while_the_slot_holds_it() -> None:
    pod, plan = gone_early_then_failed()
    api = _Api(pod, conflicts=1)
    assert run(retire_unstarted("slot-a", plan.generation), api, "etl-abc", "data") is True
    assert api.patches == 2 and RUN not in pod.pod["metadata"]["annotations"]
    # nothing to retire any more, or the slot holds another generation: no patch
    assert run(retire_unstarted("slot-a", plan.generation), api, "etl-abc", "data") is False
    assert run(retire_unstarted("slot-a", plan.generation + 1), api, "etl-abc", "data") is False
    assert api.patches == 2


def test_the_follow_opens_no_log_of_the_old_container_and_the_new_ones_once_shown() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.apply(plan.patch)
    follow = GenerationFollow(
        "load", "slot-a", plan.generation, plan.token, swapped_at=plan.record.swapped_at, go=True
    )
    # the status still shows the old container: it refuses the go, its log holds nothing of it
    assert follow.see(pod.view, 0.0).next is Next.WAIT
    pod.start("slot-a", ready=False)  # the kubelet's status shows the new container
    step = follow.see(pod.view, 1.0)
    assert step.next is Next.OPEN and step.status.container_id == pod.status("slot-a")["containerID"]


def test_a_go_said_once_the_new_container_is_shown_follows_it_at_once() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    pod.start("slot-a", ready=False)  # the status shows the new container before the go
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.apply(plan.patch)
    assert plan.record.previous_container_id == pod.status("slot-a")["containerID"]  # the new one
    follow = GenerationFollow(
        "load", "slot-a", plan.generation, plan.token, swapped_at=plan.record.swapped_at, go=True
    )
    assert follow.see(pod.view, 0.0).next is Next.OPEN


class _KubeletApi(Api):
    """An `Api` whose one watch sends the kubelet's writes of the prepared slot-a's restart in turn: the old
    container stopped, waiting, then the new one shown running."""

    def watch_pod(self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None):
        self.calls.append("watch")
        writes = getattr(self, "writes", None)
        if writes is None:
            writes = self.writes = [
                lambda: self.pod.status("slot-a").update(state={"terminated": {"exitCode": 0}}, ready=False),
                lambda: self.pod.wait("slot-a", "ContainerCreating", ""),
                lambda: self.pod.start("slot-a", ready=False),
            ]
        while writes:  # each write once, whichever watch is open
            writes.pop(0)()
            self.pod.bump()
            yield ChainPod.of(copy.deepcopy(self.pod.pod))


def test_the_wait_for_the_new_container_is_one_watch() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    api = _KubeletApi(pod)
    driver = StageDriver(api, "etl-abc", "data")
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.apply(plan.patch)
    api.calls.clear()
    follow = GenerationFollow(
        "load", "slot-a", plan.generation, plan.token, swapped_at=plan.record.swapped_at, go=True
    )
    step = driver.wait_started(plan, follow, Timeouts(swap=30), time.monotonic(), None, NO_EVENTS)
    assert step is not None and step.next is Next.OPEN
    assert step.status.container_id == pod.status("slot-a")["containerID"]  # the new container
    assert api.calls == ["get", "watch"]  # before: a watch for each of the kubelet's writes


@pytest.mark.parametrize("image", [LOAD.image, "acme/load:1.2"])
def test_a_retry_after_a_worker_died_before_the_retire_leaves_no_run_spec_of_the_unstarted_generation(
    image: str,
) -> None:
    """The try whose go could not start died before `retire_unstarted`: its retry's swap leaves no run spec of
    that generation behind, whichever slot it takes (the same one, holding the image: its spec is replaced;
    the other, for an image fixed since: the unstarted slot's spec is deleted by the same patch), so that
    container, should its image pull at last, finds nothing to run."""
    pod, first = gone_early_then_failed()
    retry = plan_swap(pod.view, dataclasses.replace(LOAD, image=image), try_number=2, now=NOW)
    assert retry.generation == first.generation + 1
    pod.apply(retry.patch)
    annotations = pod.pod["metadata"]["annotations"]
    specs = [annotations.get(f"airflow-kruise-chain/{slot}.run") or "" for slot in ("slot-a", "slot-b")]
    assert not any(run_spec_generation(spec) == first.generation for spec in specs)
    assert any(run_spec_generation(spec) == retry.generation for spec in specs)
