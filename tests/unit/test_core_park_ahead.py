"""A stage's end parks its slot and sizes the next stage's slot ahead in one `pods/resize` (`guarded_park`
with `ahead`, `park_with_ahead`): two guarded resizes in a row met the kubelet's status write after the
first (409), a read and the second again, at every stage's end."""

from __future__ import annotations

import asyncio
import copy

from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.errors import ResizeRefusedError
from airflow_kruise_chain.core.resources import ChainSizing, plan_sizing
from airflow_kruise_chain.core.sizing import apark_generation, idle_by_pod, size_pod
from tests.unit.test_core_prepare import (
    STAGE_SIZE,
    SizingApi,
    go_ready_pod,
    resources,
    result_line,
    sized_for,
)
from tests.unit.test_core_sizing import _AsyncParkApi, _ended_in_a, _ParkApi, _pod, mem, stage
from tests.unit.test_core_swap import LOAD


class _StatusWritingKubelet(_ParkApi):
    """A `_ParkApi` whose kubelet writes the pod's status after each resize it took (allocatedResources,
    the resize conditions), as a kubelet does: the pod's resourceVersion moves on past the resize's answer."""

    def resize_pod(self, name: str, namespace: str, body: dict) -> object:
        answer = super().resize_pod(name, namespace, body)
        self.pod["metadata"]["resourceVersion"] = str(int(self.pod["metadata"]["resourceVersion"]) + 1)
        return answer


def _names(body: dict) -> list[str]:
    return [c["name"] for c in body["spec"]["containers"]]


def test_a_stage_s_end_parks_and_sizes_ahead_with_one_read_and_one_resize():
    """big ended in slot-a; small comes next on slot-b's image: one resize, guarded by the version read,
    parks slot-a and sizes slot-b (before: read, park, size ahead met the kubelet's write: 409, read, size
    ahead again; 5 requests)."""
    pod, sizing = _ended_in_a()
    api, lines = _StatusWritingKubelet(pod), []
    driver = StageDriver(api, "p", "ns", log=lines.append)  # type: ignore[arg-type]
    driver.start_park("big", "slot-a", 3, ahead=("small", "acme/small:1")).settle()
    assert api.reads == 1 and len(api.resizes) == 1
    (body,) = api.resizes
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"]["containers"] == [
        {"name": "slot-a", "resources": sizing.parked},
        {"name": "slot-b", "resources": sizing.for_stage("small")},
    ]
    assert lines[-1].endswith("(ahead, for the next stage 'small': slot-a is parked)")


def _small_ended_in_a() -> tuple[dict, ChainSizing]:
    """small (64Mi) has ended in slot-a (generation 3); big (1Gi) comes next on slot-b's image."""
    from airflow_kruise_chain.core.wire import slot_annotation

    sizing = plan_sizing([stage("big", **mem("1Gi")), stage("small", **mem("64Mi"))])
    pod = size_pod(
        _pod(sizing.for_stage("small"), sizing.parked) | {"metadata": {"resourceVersion": "7"}}, sizing
    )
    pod["spec"]["containers"][0]["resources"] = sizing.for_stage("small")
    pod["spec"]["containers"][1]["image"] = "acme/big:1"
    pod["metadata"]["annotations"][slot_annotation("slot-a", "generation")] = "3"
    pod["status"] = {"containerStatuses": [{"name": "slot-a"}, {"name": "slot-b"}]}
    return pod, sizing


def test_a_park_and_a_size_ahead_that_grow_the_pod_stay_two_resizes():
    """A resize that raises the pod's requests may be deferred (no room on the node): the park's release
    does not wait with it, so the park goes alone and the size ahead follows it, as before."""
    pod, sizing = _small_ended_in_a()
    api = _ParkApi(pod)
    StageDriver(api, "p", "ns").start_park("small", "slot-a", 3, ahead=("big", "acme/big:1")).settle()  # type: ignore[arg-type]
    assert [_names(b) for b in api.resizes] == [["slot-a"], ["slot-b"]]
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    assert api.pod["spec"]["containers"][1]["resources"] == sizing.for_stage("big")


class _RefusingTwo(_ParkApi):
    """A `_ParkApi` whose API server refuses a resize of two containers (422): the pod does not change."""

    def resize_pod(self, name: str, namespace: str, body: dict) -> object:
        if len(body["spec"]["containers"]) > 1:
            self.resizes.append(body)
            raise ResizeRefusedError("spec: Forbidden: refused")
        return super().resize_pod(name, namespace, body)


def test_a_refused_park_with_ahead_parks_alone_then_sizes_ahead():
    pod, sizing = _ended_in_a()
    api = _RefusingTwo(pod)
    StageDriver(api, "p", "ns").start_park("big", "slot-a", 3, ahead=("small", "acme/small:1")).settle()  # type: ignore[arg-type]
    assert [_names(b) for b in api.resizes] == [["slot-a", "slot-b"], ["slot-a"], ["slot-b"]]
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    assert api.pod["spec"]["containers"][1]["resources"] == sizing.for_stage("small")


def test_the_triggerer_parks_and_sizes_ahead_with_one_resize():
    """A deferred stage's trigger passes the next stage to its park (`apark_generation`, idle by the pod
    alone): one resize, as the stage task's."""
    pod, sizing = _ended_in_a()
    api = _StatusWritingKubelet(pod)
    ahead = ("small", "acme/small:1", idle_by_pod)
    lines: list[str] = []
    asyncio.run(
        apark_generation(_AsyncParkApi(api), "p", "ns", "big", "slot-a", 3, lines.append, ahead=ahead)
    )
    assert api.reads == 1 and [_names(b) for b in api.resizes] == [["slot-a", "slot-b"]]
    assert api.pod["spec"]["containers"][1]["resources"] == sizing.for_stage("small")


class _Recording(SizingApi):
    """A `SizingApi` that keeps the bodies of its resizes."""

    def __init__(self, pod: object) -> None:
        super().__init__(pod)  # type: ignore[arg-type]
        self.resizes: list[dict] = []

    def resize_pod(self, name: str, namespace: str, body: dict) -> object:
        self.resizes.append(body)
        return super().resize_pod(name, namespace, body)


def _swapped_load(settled: bool = True) -> tuple[_Recording, StageDriver, dict]:
    """load said go into slot-a (prepared for it and sized ahead: the swap asks only for its patch); the
    driver holds the patch's answer. `settled`: slot-b's probe has said Ready since transform ended (the
    kubelet has nothing more to report)."""
    pod = go_ready_pod()
    if settled:
        pod.set_ready("slot-b")
    parked = sized_for(pod, ["transform", "load"])
    for container in pod.pod["spec"]["containers"]:  # transform's slot parked, load's sized ahead
        container["resources"] = copy.deepcopy(STAGE_SIZE if container["name"] == "slot-a" else parked)
    api = _Recording(pod)
    api.log = result_line(pod, "transform", 2, "slot-b")
    driver = StageDriver(api, "etl-abc", "data")
    plan = driver.swap(LOAD, 1, Timeouts(swap=5))
    assert (plan.action, plan.slot, plan.generation) == ("go", "slot-a", 3) and api.calls == ["get", "patch"]
    return api, driver, parked


def test_the_park_after_a_swap_is_guarded_by_the_swap_s_answer_without_a_read():
    """Nothing wrote the pod since the stage task's go: its park plans from the go's answer, guarded by its
    resourceVersion (before: a read first)."""
    api, driver, parked = _swapped_load()
    version = api.pod.pod["metadata"]["resourceVersion"]
    driver.park("load", "slot-a", 3)
    assert api.calls == ["get", "patch", "resize"]
    assert api.resizes[-1]["metadata"]["resourceVersion"] == version
    assert resources(api.pod, "slot-a") == parked


def test_a_park_whose_pod_moved_on_since_the_swap_reads_it_after_the_409():
    """The kubelet (or another task) wrote the pod since the go: the park's resize answers 409, then it is
    planned again from a read, so a slot another task took since is never shrunk."""
    api, driver, parked = _swapped_load()
    api.pod.bump()  # the kubelet's status write
    lines: list[str] = []
    driver.log = lines.append
    driver.park("load", "slot-a", 3)
    assert api.calls == ["get", "patch", "resize", "get", "resize"]
    assert resources(api.pod, "slot-a") == parked
    assert [line for line in lines if "parked: stage 'load' ended" in line] == [lines[0]]  # said once
    # a pod the kubelet had more to report of at the go (slot-b not Ready yet) is read first
    api, driver, parked = _swapped_load(settled=False)
    driver.park("load", "slot-a", 3)
    assert api.calls == ["get", "patch", "get", "resize"]
    # another task's swap took slot-a since (generation 4): nothing parked
    api, driver, parked = _swapped_load()
    api.pod.pod["metadata"]["annotations"]["airflow-kruise-chain/slot-a.generation"] = "4"
    api.pod.bump()
    driver.park("load", "slot-a", 3)
    assert api.calls == ["get", "patch", "resize", "get"] and resources(api.pod, "slot-a") == STAGE_SIZE
