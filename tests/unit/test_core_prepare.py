"""Preparing the idle slot ahead (`plan_prepare`) and what later swaps make of a prepared slot."""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest

from airflow_kruise_chain.core import SlotBusyError, StageSpec, StageState, plan_swap
from airflow_kruise_chain.core.driver import ConflictError, StageDriver, Timeouts
from airflow_kruise_chain.core.podview import PREPARE_HISTORY, ChainPod
from airflow_kruise_chain.core.resources import PARKED_LIMITS, PARKED_REQUESTS, SIZING_ANNOTATION, ChainSizing
from airflow_kruise_chain.core.status import slot_status
from airflow_kruise_chain.core.swap import plan_prepare, restart_hold
from airflow_kruise_chain.core.wire import PREPARE_ENV
from tests.unit.test_core_swap import (
    EXTRACT,
    LOAD,
    NOW,
    REPORT,
    TRANSFORM,
    FakePod,
    put_record,
    recorded,
)


def named(stage: StageSpec) -> tuple[str, str]:
    return stage.name, stage.image


def made_before_prepare_env(pod: FakePod) -> FakePod:
    """`pod` as made before the slots got their prepare id in env (`wire.PREPARE_ENV`): today's rule."""
    for container in pod.pod["spec"]["containers"]:
        container["env"] = [e for e in container.get("env") or [] if e["name"] != PREPARE_ENV]
    return pod


def prepared_pod(*, made_before: bool = False) -> tuple[FakePod, object]:
    """extract ran in slot-a, transform runs in slot-b, slot-a prepared for load (patch applied);
    `made_before`: a pod made before its slots got the prepare's id in env (`made_before_prepare_env`)."""
    pod = FakePod()
    if made_before:
        made_before_prepare_env(pod)
    pod.run(EXTRACT)
    running = pod.run(TRANSFORM, finish=False)
    prepare = plan_prepare(pod.view, *named(LOAD), running=running.slot, now=NOW)
    assert prepare.patch is not None, prepare.why
    pod.apply(prepare.patch)
    return pod, prepare


def test_a_prepare_is_one_guarded_image_patch_that_leaves_the_slot_without_a_generation() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    rv = pod.pod["metadata"]["resourceVersion"]
    prepare = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW)
    assert (prepare.slot, prepare.image, prepare.backoff_wait) == ("slot-a", "acme/load:1.1", 0.0)
    assert prepare.patch["spec"] == {"containers": [{"name": "slot-a", "image": "acme/load:1.1"}]}
    assert prepare.patch["metadata"]["resourceVersion"] == rv
    ann = prepare.patch["metadata"]["annotations"]
    # no generation, no stage, no run spec: the restarted runner parks until a swap says go
    assert ann["airflow-kruise-chain/slot-a.generation"] == "0"
    assert ann["airflow-kruise-chain/slot-a.run"] is None  # deleted
    assert ann["airflow-kruise-chain/slot-a.stage"] is None
    assert "airflow-kruise-chain/generation" not in ann
    assert not any(key.startswith("airflow-kruise-chain/slot-b") for key in ann)
    assert json.loads(ann["airflow-kruise-chain/slot-a.prepared"]) == {
        "at": "2024-05-01T10:00:00Z",
        "history": [],
        "id": ann["airflow-kruise-chain/slot-a.prepare-id"],
        "image": "acme/load:1.1",
        "previous_container_id": "containerd://1",
        "previous_reason": "",
        "stage": "load",
    }


def test_the_next_stage_waits_for_the_prepared_restart_then_only_says_go() -> None:
    pod, _ = prepared_pod(made_before=True)  # the go names the prepare otherwise: test_core_prepare_named.py
    pod.set_ready("slot-b")  # transform ended; slot-b is free, but slot-a is being prepared for load
    assert slot_status(pod.view, "slot-a").state is StageState.SWAPPING  # the old runner still runs there
    with pytest.raises(SlotBusyError, match=r"slot-a is being prepared for acme/load:1\.1"):
        plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    # the kubelet restarted it on load's image: a go needs no more (test_core_prepare_go_early.py)
    pod.start("slot-a", ready=False)
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-a", 3)
    assert "spec" not in plan.patch
    assert "\nkc_r=0\n" in plan.patch["metadata"]["annotations"]["airflow-kruise-chain/slot-a.run"]
    pod.apply(plan.patch)
    assert pod.view.slot("slot-a").prepared is None  # it holds a generation now
    assert pod.view.slot("slot-a").prepare is not None  # kept: the back-off model counts its restart


def test_a_mispredicted_prepare_leaves_the_other_stage_a_normal_swap() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    pod.start("slot-a", ready=True)
    plan = plan_swap(pod.view, REPORT, try_number=1, now=NOW)  # a branch skipped load
    assert (plan.action, plan.generation) == ("patch", 3)
    assert plan.patch["spec"]["containers"][0]["image"] == "acme/report:1.0"


def test_a_prepared_image_that_cannot_start_is_not_said_go_to() -> None:
    pod, _ = prepared_pod()
    pod.set_ready("slot-b")
    pod.wait("slot-a", "ErrImagePull", "not found")
    assert slot_status(pod.view, "slot-a").state is StageState.FAILED_TO_START
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert plan.action == "patch"  # a go would wait on the old pull error; a patch reports the new one


def test_a_prepare_held_by_the_back_off_counts_as_swapping() -> None:
    pod, _ = prepared_pod()
    status = pod.status("slot-a")
    status.update(
        ready=False,
        lastState={"terminated": {"containerID": "containerd://1", "exitCode": 0}},
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
    )
    current = slot_status(pod.view, "slot-a")
    assert current.state is StageState.SWAPPING and "starts by itself" in current.message
    status["lastState"]["terminated"]["exitCode"] = 2  # the prepared image's runner crashed: a real failure
    assert slot_status(pod.view, "slot-a").state is StageState.FAILED_TO_START


@pytest.mark.parametrize(
    ("case", "stage", "why"),
    [
        ("the running slot holds it", StageSpec("t2", "acme/transform:2.0", ["x"]), "slot-b already"),
        ("the idle slot holds it", StageSpec("e2", "acme/extract:1.4", ["x"]), "slot-a already"),
    ],
)
def test_nothing_to_prepare_when_a_slot_holds_the_image(case: str, stage: StageSpec, why: str) -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    prepare = plan_prepare(pod.view, *named(stage), running="slot-b", now=NOW)
    assert prepare.patch is None and why in prepare.why, case


def test_no_prepare_while_the_other_slot_runs_a_stage() -> None:
    pod = FakePod()
    pod.run(EXTRACT, finish=False)  # two stages at once
    pod.run(TRANSFORM, finish=False)
    prepare = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW)
    assert prepare.patch is None and "slot-a is not idle" in prepare.why
    # the driver read extract's result line in slot-a's log: idle, though its probe has not said Ready yet
    prepare = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW, finished={"slot-a"})
    assert prepare.patch is not None and prepare.slot == "slot-a"


def test_no_prepare_for_a_stage_already_swapped_in() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    # the predicted stage was swapped in by someone else meanwhile (it runs in slot-b's place: fake it)
    put_record(pod, "load", {**recorded(pod)["transform"], "image": LOAD.image})
    prepare = plan_prepare(pod.view, *named(LOAD), running="slot-a", now=NOW)
    assert prepare.patch is None and "already swapped in" in prepare.why


def test_the_back_off_model_counts_prepare_restarts() -> None:
    pod, _ = prepared_pod()
    assert restart_hold(pod.view, "slot-a", LOAD.image, NOW + timedelta(seconds=3))[0] == 10
    assert restart_hold(pod.view, "slot-b", LOAD.image, NOW + timedelta(seconds=3))[0] == 0
    assert restart_hold(pod.view, "slot-a", LOAD.image, NOW + timedelta(minutes=11))[0] == 0


def test_a_prepare_the_back_off_would_hold_longer_than_the_other_slot_is_left_to_the_swap() -> None:
    pod, _ = prepared_pod()  # slot-a restarted on load at NOW
    pod.start("slot-a", ready=True)
    pod.set_ready("slot-b")
    # a branch ran report in slot-a instead; slot-b now runs a stage and load is predicted again
    pod.run(REPORT, now=NOW + timedelta(seconds=1))
    running = pod.run(
        StageSpec("t3", "acme/transform:2.0", ["x"]), finish=False, now=NOW + timedelta(seconds=2)
    )
    assert running.slot == "slot-b"
    prepare = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW + timedelta(seconds=3))
    # slot-a would be held 10 s on load, slot-b not at all: load's own swap takes slot-b once free
    assert prepare.patch is None and "restart back-off" in prepare.why and "takes that one" in prepare.why


def test_a_prepare_held_no_longer_than_the_other_slot_is_made_and_says_so() -> None:
    a = "acme/a:1"
    pod = FakePod()
    for k, slot in enumerate(("slot-a", "slot-b")):  # both slots restarted on a seconds ago
        record = {"generation": 0, "slot": slot, "image": a, "try": 1, "action": "patch"}
        record["swapped_at"] = f"2024-05-01T10:00:0{k}Z"
        put_record(pod, f"old{k}", record)
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    prepare = plan_prepare(pod.view, "v", a, running="slot-b", now=NOW + timedelta(seconds=4))
    assert prepare.patch is not None and prepare.backoff_wait == 10
    assert "preparing now, that wait passes while the running stage runs" in prepare.why


def test_prepare_history_is_kept_and_bounded() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    for k in range(PREPARE_HISTORY + 3):
        stage = StageSpec(f"p{k}", f"acme/p:{k}", ["x"])
        prepare = plan_prepare(pod.view, *named(stage), running="slot-b", now=NOW + timedelta(seconds=k))
        pod.apply(prepare.patch)
        pod.start("slot-a", ready=True)
    record = pod.view.slot("slot-a").prepare
    assert record is not None
    assert record.image == f"acme/p:{PREPARE_HISTORY + 2}"
    assert len(record.history) == PREPARE_HISTORY
    assert record.history[-1] == (f"acme/p:{PREPARE_HISTORY + 1}", "2024-05-01T10:00:09Z")


class Api:
    """Enough of a `ChainApi` for `StageDriver.swap` and `prepare`: requests counted, 409s on demand."""

    def __init__(self, pod: FakePod, conflicts: int = 0, broken: bool = False) -> None:
        self.pod = pod
        self.log = ""
        self.conflicts = conflicts
        self.broken = broken
        self.calls: list[str] = []

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.calls.append("get")
        if self.broken:
            raise OSError("connection refused")
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        self.calls.append("patch")
        if self.conflicts:
            self.conflicts -= 1
            self.pod.bump()  # someone else wrote first
            raise ConflictError("409")
        self.pod.apply(body)
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    def read_log(self, *args: object, **kwargs: object) -> str:
        self.calls.append("log")
        return self.log


def swapped(api: Api, stage: StageSpec) -> tuple[StageDriver, object, list[str]]:
    """`stage` swapped in by a driver after extract ran in slot-a (by annotations; its result in the log)."""
    extract = recorded(api.pod)["extract"]
    api.log = (
        f"::kruise-chain:: result gen=1 token={extract['token']} stage=extract slot=slot-a exit=0 "
        "reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z outputs=- "
        "outputs_status=absent"
    )
    logged: list[str] = []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    plan = driver.swap(stage, 1, Timeouts(swap=5))
    api.calls.clear()
    return driver, plan, logged


def test_the_driver_says_nothing_to_prepare_without_a_request() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    api = Api(pod)
    driver, plan, logged = swapped(api, TRANSFORM)  # go in slot-b; slot-a holds extract's image
    assert driver.prepare(plan, "again", EXTRACT.image) is None
    assert api.calls == [] and "a slot already holds acme/extract:1.4" in logged[-1]


def test_the_driver_prepares_from_the_swap_s_answer_and_replans_after_a_conflict() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    api = Api(pod)
    driver, plan, logged = swapped(api, TRANSFORM)
    api.conflicts = 1
    prepare = driver.prepare(plan, "load", LOAD.image)
    assert prepare is not None and prepare.patch is not None
    # the swap's answer first (slot-a's log, which the go did not need, then); a 409 re-plans from a read
    assert api.calls == ["log", "patch", "get", "patch"]
    assert pod.image("slot-a") == LOAD.image and pod.view.slot("slot-a").prepared is not None
    assert logged[-1].startswith(
        "::kruise-chain:: prepare slot=slot-a image=acme/load:1.1 for the next stage"
    )


def test_a_prepare_that_fails_is_logged_never_raised() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    api = Api(pod)
    driver, plan, logged = swapped(api, TRANSFORM)
    api.broken, driver._swapped = True, None  # a driver that did not swap: it must read
    assert driver.prepare(plan, "load", LOAD.image) is None
    assert "not preparing for stage 'load': connection refused" in logged[-1]


def result_line(pod: FakePod, stage: str, generation: int, slot: str) -> str:
    token = recorded(pod)[stage]["token"]
    return (
        f"::kruise-chain:: result gen={generation} token={token} stage={stage} slot={slot} exit=0 "
        "reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z outputs=- "
        "outputs_status=absent"
    )


def go_ready_pod() -> FakePod:
    """slot-a prepared for load and restarted on its image (its runner parked, Ready); transform has ended in
    slot-b, whose readiness probe has not said so yet: only slot-b's log can tell that it finished."""
    pod, _ = prepared_pod()
    pod.start("slot-a", ready=True)
    assert slot_status(pod.view, "slot-b").state is StageState.RUNNING
    return pod


def sized(pod: FakePod, slot_b: dict) -> None:
    """Give the pod in-place sizing, slot-b at `slot_b` (the parked size: its stage's task parked it)."""
    parked = {"requests": dict(PARKED_REQUESTS), "limits": dict(PARKED_LIMITS)}
    sizing = ChainSizing(qos="Burstable", parked=parked, stages={"load": parked})
    pod.pod["metadata"]["annotations"][SIZING_ANNOTATION] = sizing.annotation()
    for container in pod.pod["spec"]["containers"]:
        container["resources"] = copy.deepcopy(slot_b if container["name"] == "slot-b" else parked)


def test_a_go_into_the_prepared_slot_reads_no_log_before_it_and_the_prepare_after_it_does() -> None:
    pod = go_ready_pod()
    api = Api(pod)
    api.log = result_line(pod, "transform", 2, "slot-b")
    driver = StageDriver(api, "etl-abc", "data", log=[].append)
    plan = driver.swap(LOAD, 1, Timeouts(swap=5))
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-a", 3)
    assert api.calls == ["get", "patch"]  # the plan is the same whether transform has ended or not
    # the prepare of slot-b restarts it: only once its log shows transform's end
    prepare = driver.prepare(plan, "report", REPORT.image)
    assert prepare is not None and prepare.slot == "slot-b" and prepare.patch is not None
    assert api.calls == ["get", "patch", "log", "patch"]
    assert pod.image("slot-b") == REPORT.image


def test_the_prepare_after_a_go_leaves_a_slot_whose_end_its_log_does_not_show() -> None:
    pod = go_ready_pod()
    api = Api(pod)  # slot-b's log holds no result line of transform's generation
    logged: list[str] = []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    plan = driver.swap(LOAD, 1, Timeouts(swap=5))
    assert (plan.action, plan.slot) == ("go", "slot-a")
    assert driver.prepare(plan, "report", REPORT.image) is not None
    assert api.calls == ["get", "patch", "log"]  # no image patch restarts slot-b
    assert pod.image("slot-b") == TRANSFORM.image
    assert "not preparing slot-b" in logged[-1]


@pytest.mark.parametrize(
    ("slot_b", "reads"),
    [
        ({"requests": dict(PARKED_REQUESTS), "limits": dict(PARKED_LIMITS)}, []),
        # not parked: the swap's sizing shrinks slot-b first only if its stage has ended, which its log tells
        ({"requests": {"memory": "64Mi"}, "limits": {"memory": "96Mi"}}, ["log"]),
    ],
)
def test_the_swap_reads_a_slot_s_log_when_its_sizing_depends_on_it(slot_b: dict, reads: list[str]) -> None:
    pod = go_ready_pod()
    sized(pod, slot_b)
    api = Api(pod)
    api.log = result_line(pod, "transform", 2, "slot-b")
    driver = StageDriver(api, "etl-abc", "data")
    plan, finished = driver.plan(pod.view, LOAD, 1, None)
    assert (plan.action, plan.slot) == ("go", "slot-a")
    assert api.calls == reads
    assert finished == ({"slot-b"} if reads else set())


def test_the_swap_reads_a_slot_s_log_when_the_plan_depends_on_it() -> None:
    # no slot prepared: which slot load's image patch may restart depends on which stages have ended
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    api = Api(pod)
    api.log = result_line(pod, "extract", 1, "slot-a") + "\n" + result_line(pod, "transform", 2, "slot-b")
    driver = StageDriver(api, "etl-abc", "data")
    plan, finished = driver.plan(pod.view, LOAD, 1, None)
    assert plan.action == "patch"
    assert api.calls == ["log", "log"] and finished == {"slot-a", "slot-b"}


def test_a_go_into_a_slot_that_ran_an_earlier_stage_reads_that_slot_s_log_only() -> None:
    # one image per slot, no prepare: s3 ran in slot-a (just ended, not Ready yet); s4 goes into slot-b, where
    # transform ended before s3's go: only its log can vouch for that, s3's end changes nothing of the plan
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM)
    pod.run(StageSpec("s3", EXTRACT.image, cmds=["x"]), finish=False)
    api = Api(pod)
    api.log = result_line(pod, "transform", 2, "slot-b") + "\n" + result_line(pod, "s3", 3, "slot-a")
    assert slot_status(pod.view, "slot-b").state is StageState.FINISHED
    assert not slot_status(pod.view, "slot-b").confirmed
    driver = StageDriver(api, "etl-abc", "data")
    plan = driver.swap(StageSpec("s4", TRANSFORM.image, cmds=["x"]), 1, Timeouts(swap=5))
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-b", 4)
    assert api.calls == ["get", "log", "patch"]


def test_no_go_into_a_slot_whose_log_does_not_show_its_stage_ended() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM)
    pod.run(StageSpec("s3", EXTRACT.image, cmds=["x"]), finish=False)
    api = Api(pod)
    api.log = result_line(pod, "s3", 3, "slot-a")  # transform's end is not in slot-b's log
    driver = StageDriver(api, "etl-abc", "data")
    plan, finished = driver.plan(pod.view, StageSpec("s4", TRANSFORM.image, cmds=["x"]), 1, None)
    assert (plan.action, plan.slot) == ("patch", "slot-a")  # s3's slot, whose end the log shows
    assert api.calls == ["log", "log"] and finished == {"slot-a"}


def test_the_swap_remembers_when_its_patch_was_sent() -> None:
    """The stage may start before the task follows it (the fast go), so the monitor's `swapped_at` is the
    patch's time, which the driver keeps (test_chain_monitoring saw swapped_at after started_at)."""
    from datetime import UTC, datetime

    pod = FakePod()
    pod.run(EXTRACT)
    api = Api(pod)
    before = datetime.now(UTC)
    driver, _, _ = swapped(api, TRANSFORM)
    assert driver.swap_requested_at is not None and before <= driver.swap_requested_at <= datetime.now(UTC)
    assert StageDriver(api, "etl-abc", "data").swap_requested_at is None  # no swap: a found generation's


class SizingApi(Api):
    """An `Api` that also takes guarded `pods/resize` requests (counted as "resize")."""

    def resize_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        self.calls.append("resize")
        if body["metadata"]["resourceVersion"] != self.pod.pod["metadata"]["resourceVersion"]:
            raise ConflictError("409")
        for change in body["spec"]["containers"]:
            spec = next(c for c in self.pod.pod["spec"]["containers"] if c["name"] == change["name"])
            spec["resources"] = copy.deepcopy(change["resources"])
        self.pod.bump()
        return ChainPod.of(copy.deepcopy(self.pod.pod))


STAGE_SIZE = {"requests": {"memory": "64Mi"}, "limits": {"memory": "96Mi"}}


def sized_for(pod: FakePod, stages: list[str]) -> dict:
    """In-place sizing: `stages` at STAGE_SIZE, slot-b holding that size (its stage ran), slot-a parked."""
    parked = {"requests": dict(PARKED_REQUESTS), "limits": dict(PARKED_LIMITS)}
    sizing = ChainSizing(qos="Burstable", parked=parked, stages=dict.fromkeys(stages, STAGE_SIZE))
    pod.pod["metadata"]["annotations"][SIZING_ANNOTATION] = sizing.annotation()
    for container in pod.pod["spec"]["containers"]:
        container["resources"] = copy.deepcopy(STAGE_SIZE if container["name"] == "slot-b" else parked)
    return parked


def resources(pod: FakePod, slot: str) -> dict:
    return next(c["resources"] for c in pod.pod["spec"]["containers"] if c["name"] == slot)


def test_a_stage_s_end_sizes_the_prepared_slot_ahead_without_reading_a_log() -> None:
    """transform ended in slot-b; slot-a is prepared for load (no generation: nothing can run there): the
    end parks slot-b and sizes slot-a for load in one resize, with no log read."""
    pod = go_ready_pod()
    parked = sized_for(pod, ["transform", "load"])
    api = SizingApi(pod)
    logged: list[str] = []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    driver.start_park("transform", "slot-b", 2, ahead=named(LOAD)).settle()
    assert api.calls == ["get", "resize"]
    assert resources(pod, "slot-b") == parked and resources(pod, "slot-a") == STAGE_SIZE
    assert "(ahead, for the next stage 'load': slot-b is parked)" in logged[-1]
    # without a prediction (prepare_next off, a failed stage): the park only
    pod = go_ready_pod()
    sized_for(pod, ["transform", "load"])
    api = SizingApi(pod)
    StageDriver(api, "etl-abc", "data").start_park("transform", "slot-b", 2).settle()
    assert api.calls == ["get", "resize"] and resources(pod, "slot-a") == parked


@pytest.mark.parametrize("ended", [True, False], ids=["its-log-shows-the-end", "no-result-line"])
def test_a_slot_sized_ahead_after_a_go_there_must_show_its_stage_s_end_in_its_log(ended: bool) -> None:
    """extract ran in slot-a by a go (Ready from before it: the pod cannot vouch for its end); the next stage
    goes there again: only extract's result line in slot-a's log lets transform's end size it ahead."""
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)
    parked = sized_for(pod, ["transform", "again"])
    api = SizingApi(pod)
    api.log = result_line(pod, "extract", 1, "slot-a") if ended else ""
    driver = StageDriver(api, "etl-abc", "data")
    driver.start_park("transform", "slot-b", 2, ahead=("again", EXTRACT.image)).settle()
    assert api.calls == ["get", "log", "resize"]  # the park's resize sizes slot-a too once its end is read
    assert resources(pod, "slot-a") == (STAGE_SIZE if ended else parked)
