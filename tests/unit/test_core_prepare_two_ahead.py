"""Preparing two ahead (`plan_prepare_after`, `prepare_two_ahead`): at the successful end of stage k in slot
X, while the next stage k+1 is to say go into the other slot Y, X gets the image of stage k+2, so that the
kubelet restarts X while Airflow starts k+1 instead of from k+1's go."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import timedelta

import pytest

from airflow_kruise_chain.core import StageSpec, StageState, plan_swap
from airflow_kruise_chain.core.conflicts import arun
from airflow_kruise_chain.core.driver import StageDriver
from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.sizing import idle_by_pod
from airflow_kruise_chain.core.status import slot_status
from airflow_kruise_chain.core.swap import plan_prepare, plan_prepare_after, prepare_two_ahead
from airflow_kruise_chain.triggers.chain import StageTrigger
from tests.unit.test_core_prepare import STAGE_SIZE, Api, SizingApi, named, sized_for
from tests.unit.test_core_swap import EXTRACT, LOAD, NOW, REPORT, TRANSFORM, FakePod, annotations


def extract_ended() -> FakePod:
    """extract ran in slot-a (generation 1) and ended; slot-b holds transform's image and no generation."""
    pod = FakePod()
    pod.run(EXTRACT)
    return pod


def after(pod: FakePod, stage: StageSpec = LOAD, **kwargs: object):
    args = {
        "ended": "slot-a",
        "generation": 1,
        "next_image": TRANSFORM.image,
        "idle": idle_by_pod,
        "now": NOW,
    }
    return plan_prepare_after(pod.view, *named(stage), **{**args, **kwargs})


def test_the_end_of_a_stage_prepares_its_slot_for_the_stage_after_next() -> None:
    pod = extract_ended()
    rv = pod.pod["metadata"]["resourceVersion"]
    prepare = after(pod)
    assert (prepare.slot, prepare.stage, prepare.image, prepare.backoff_wait) == (
        "slot-a",
        "load",
        LOAD.image,
        0,
    )
    # the image patch plan_prepare makes with the next stage's slot running, guarded by the pod's version
    same = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW, finished={"slot-a"})
    ids = [
        p["metadata"]["annotations"].pop("airflow-kruise-chain/slot-a.prepare-id")
        for p in (prepare.patch, same.patch)
    ]
    assert ids[0] != ids[1] and all(len(i) == 16 for i in ids)  # each prepare its own random id
    for p, given in zip((prepare.patch, same.patch), ids, strict=True):  # in its record too
        record = json.loads(p["metadata"]["annotations"]["airflow-kruise-chain/slot-a.prepared"])
        assert record.pop("id") == given
        p["metadata"]["annotations"]["airflow-kruise-chain/slot-a.prepared"] = json.dumps(record)
    assert prepare.patch == same.patch
    assert prepare.patch["metadata"]["resourceVersion"] == rv
    assert prepare.patch["spec"] == {"containers": [{"name": "slot-a", "image": LOAD.image}]}
    ann = prepare.patch["metadata"]["annotations"]
    assert (
        ann["airflow-kruise-chain/slot-a.generation"] == "0"
        and ann["airflow-kruise-chain/slot-a.run"] is None
    )
    pod.apply(prepare.patch)
    assert slot_status(pod.view, "slot-a").state is StageState.SWAPPING  # the kubelet restarts slot-a

    # transform says go into slot-b at once: it does not wait for slot-a's restart
    swap = pod.run(TRANSFORM, finish=False)
    assert (swap.action, swap.slot, swap.generation) == ("go", "slot-b", 2)
    # its own prepare has nothing to do: slot-a holds load's image already
    mine = plan_prepare(pod.view, *named(LOAD), running="slot-b", now=NOW)
    assert mine.patch is None and "slot-a already holds acme/load:1.1" in mine.why
    # once restarted (its runner parked, no generation), load only says go there
    pod.start("slot-a", ready=True)
    pod.set_ready("slot-b")
    load = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    assert (load.action, load.slot, load.generation) == ("go", "slot-a", 3)


def test_a_wrong_prediction_runs_nothing_and_the_chosen_stage_swaps_itself_in() -> None:
    pod = extract_ended()
    pod.apply(after(pod).patch)  # predicted: load after transform
    assert not annotations(pod).get("airflow-kruise-chain/slot-a.run")  # nothing to run in slot-a
    pod.run(TRANSFORM)
    pod.start("slot-a", ready=True)
    plan = plan_swap(pod.view, REPORT, try_number=1, now=NOW)  # a branch chose report
    assert (plan.action, plan.slot, plan.generation) == ("patch", "slot-a", 3)
    assert plan.patch["spec"]["containers"][0]["image"] == REPORT.image


def never(_pod: ChainPod, _slot: str) -> bool:
    raise AssertionError("the idle check (a log read) was made")


@pytest.mark.parametrize(
    ("case", "kwargs", "stage", "why"),
    [
        ("the next stage may need X", {"next_image": "acme/other:1"}, LOAD, "slot-b does not hold"),
        ("a swap took X since", {"generation": 2, "idle": never}, LOAD, "holds generation 1 since, not 2"),
        (
            "Y holds k+2's image",
            {"idle": never},
            StageSpec("t2", TRANSFORM.image, ["x"]),
            "slot-b already holds",
        ),
        (
            "X holds k+2's image",
            {"idle": never},
            StageSpec("e2", EXTRACT.image, ["x"]),
            "slot-a already holds",
        ),
        ("Y may run a generation", {"idle": lambda _pod, _slot: False}, LOAD, "slot-b may still run"),
    ],
)
def test_no_prepare_two_ahead_unless_the_next_stage_needs_only_the_other_slot(
    case: str, kwargs: dict, stage: StageSpec, why: str
) -> None:
    prepare = after(extract_ended(), stage, **kwargs)
    assert prepare.patch is None and why in prepare.why, (case, prepare.why)


def test_no_prepare_two_ahead_that_the_restart_back_off_would_hold() -> None:
    pod = FakePod()
    for stage in (EXTRACT, TRANSFORM, LOAD, REPORT):  # load restarted slot-a on its image at NOW
        pod.run(stage)
    x = pod.run(StageSpec("x", EXTRACT.image, ["x"]))  # slot-a again, generation 5
    assert (x.slot, x.generation) == ("slot-a", 5)
    idle = lambda _pod, _slot: True  # noqa: E731 (report's end, as its log would show it)
    soon = after(pod, generation=5, next_image=REPORT.image, idle=idle, now=NOW + timedelta(seconds=30))
    assert soon.patch is None and soon.backoff_wait == 10 and "back-off" in soon.why
    later = after(pod, generation=5, next_image=REPORT.image, idle=idle, now=NOW + timedelta(minutes=11))
    assert later.patch is not None


def test_no_prepare_two_ahead_in_a_lost_pod() -> None:
    pod = extract_ended()
    pod.pod["metadata"]["deletionTimestamp"] = "2024-05-01T10:00:00Z"
    assert after(pod).patch is None


# --- the driver, at a stage's end ------------------------------------------------------------------------


def test_the_stage_s_end_parks_then_prepares_two_ahead_with_one_patch() -> None:
    pod = extract_ended()
    api, logged = Api(pod), []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    driver.start_park("extract", "slot-a", 1, ahead=named(TRANSFORM), then=named(LOAD)).settle()
    assert api.calls[-1] == "patch" and api.calls.count("patch") == 1
    assert pod.image("slot-a") == LOAD.image
    assert any(
        "prepare slot=slot-a image=acme/load:1.1 for the stage after next 'load' (two ahead: the next stage "
        "'transform' says go into slot-b)" in line
        for line in logged
    ), logged
    # without a stage after next (none predicted, go_via_exec off, a failed stage): no prepare
    pod = extract_ended()
    api = Api(pod)
    StageDriver(api, "etl-abc", "data").start_park("extract", "slot-a", 1, ahead=named(TRANSFORM)).settle()
    assert "patch" not in api.calls and pod.image("slot-a") == EXTRACT.image


def test_a_prepare_two_ahead_that_needs_nothing_asks_nothing_after_the_park_s_resizes() -> None:
    """Under in-place sizing the prepare plans from the pod the park and the size ahead answered (read since
    the stage ended): the one image again costs no request. A pod sized statically is read for it."""
    pod = extract_ended()
    parked = sized_for(pod, ["extract", "transform", "e2"])
    for container in pod.pod["spec"]["containers"]:  # extract's slot holds its size, the other is parked
        container["resources"] = copy.deepcopy(STAGE_SIZE if container["name"] == "slot-a" else parked)
    api, logged = SizingApi(pod), []
    then = ("e2", EXTRACT.image)  # the one image again: nothing to prepare
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    driver.start_park("extract", "slot-a", 1, ahead=named(TRANSFORM), then=then).settle()
    assert api.calls == ["get", "resize"]  # the park's read and resize, which sizes ahead too; no more
    assert "not preparing slot-a two ahead for stage 'e2': slot-a already holds" in logged[-1]
    api = Api(extract_ended())  # sized statically: the park, the size ahead and the prepare each read it
    StageDriver(api, "etl-abc", "data").start_park(
        "extract", "slot-a", 1, ahead=named(TRANSFORM), then=then
    ).settle()
    assert api.calls == ["get", "get", "get"]


def test_a_prepare_two_ahead_replans_after_a_conflict_and_never_raises() -> None:
    pod = extract_ended()
    api, logged = Api(pod, conflicts=1), []
    StageDriver(api, "etl-abc", "data", log=logged.append).start_park(
        "extract", "slot-a", 1, ahead=named(TRANSFORM), then=named(LOAD)
    ).settle()
    assert api.calls[-3:] == ["patch", "get", "patch"] and pod.image("slot-a") == LOAD.image

    class Refusing(Api):
        def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
            raise OSError("connection refused")

    pod, logged = extract_ended(), []
    StageDriver(Refusing(pod), "etl-abc", "data", log=logged.append).start_park(
        "extract", "slot-a", 1, ahead=named(TRANSFORM), then=named(LOAD)
    ).settle()  # no raise
    assert "not preparing slot-a for stage 'load': connection refused" in logged[-1]
    assert pod.image("slot-a") == EXTRACT.image


# --- the trigger (a deferred stage's end) -----------------------------------------------------------------


class AsyncApi:
    """The async hook's read and patch (409 as `ConflictError`, as from the sync hook), over a FakePod."""

    def __init__(self, pod: FakePod, conflicts: int = 0) -> None:
        self.pod, self.conflicts, self.calls = pod, conflicts, []

    async def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.calls.append("get")
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    async def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        self.calls.append("patch")
        if self.conflicts:
            self.conflicts -= 1
            self.pod.bump()
            raise ConflictError("409")
        self.pod.apply(body)
        return ChainPod.of(copy.deepcopy(self.pod.pod))


def aprepare(api: AsyncApi, log: list[str], pod: ChainPod | None) -> None:
    """What a deferred stage's trigger does at its end: prepare slot-a for load, two ahead of transform."""
    steps = prepare_two_ahead(log.append, "slot-a", 1, named(TRANSFORM), named(LOAD), idle_by_pod, pod)
    asyncio.run(arun(steps, api, "etl-abc", "data"))


def test_the_trigger_prepares_two_ahead_as_the_task_does() -> None:
    pod = extract_ended()
    api, lines = AsyncApi(pod, conflicts=1), []
    aprepare(api, lines, pod.view)
    assert api.calls == ["patch", "get", "patch"]  # from the pod it was given; read again after the 409
    assert pod.image("slot-a") == LOAD.image
    assert "prepare slot=slot-a image=acme/load:1.1 for the stage after next 'load'" in lines[-1]
    # nothing to do: no request; a failure is logged, not raised
    api, lines = AsyncApi(pod), []
    aprepare(api, lines, pod.view)
    assert api.calls == [] and "not preparing slot-a two ahead" in lines[-1]

    class Broken(AsyncApi):
        async def read_pod(self, name: str, namespace: str) -> ChainPod:
            raise OSError("unreachable")

    lines = []
    aprepare(Broken(extract_ended()), lines, None)
    assert "not preparing slot-a for stage 'load': unreachable" in lines[-1]


def test_the_trigger_carries_the_stage_after_next() -> None:
    trigger = StageTrigger(pod_name="p", namespace="ns", stage="s", ahead=["t", "b:1"], then=["u", "c:1"])
    _, kwargs = trigger.serialize()
    assert (kwargs["ahead"], kwargs["then"]) == (["t", "b:1"], ["u", "c:1"])
    assert StageTrigger(**kwargs).then == ("u", "c:1")
    assert StageTrigger(pod_name="p", namespace="ns", stage="s").serialize()[1]["then"] is None
