"""A stage's end parks its slot (one `pods/resize`, which sizes the next stage's slot ahead too), then
prepares that slot two ahead (one resourceVersion-guarded image patch). The kubelet writes the pod's status
after a resize it took: the allocation with `PodResizeInProgress`, then, at its next relist, the condition
cleared. A prepare planned from the resize's answer met those writes at nearly every stage's end (10
pipelines at once on the local cluster: 81 of the 100 stage ends answered 409, then a read and the patch
again; one pipeline alone: 9 of 9). It now waits on one watch until the resize is in force and plans from
the version the watch sent (issue 40)."""

from __future__ import annotations

import asyncio
import copy
import math
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

from airflow_kruise_chain.core import sizing
from airflow_kruise_chain.core.driver import StageDriver
from airflow_kruise_chain.core.errors import ConflictError
from airflow_kruise_chain.core.follow import GenerationFollow
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.triggers.output import StageOutputFollower
from tests.unit.test_core_prepare import STAGE_SIZE, SizingApi, named, sized_for
from tests.unit.test_core_prepare_two_ahead import extract_ended
from tests.unit.test_core_swap import LOAD, TRANSFORM, FakePod

IN_PROGRESS = {"type": "PodResizeInProgress", "status": "True"}


def _allocate(pod: FakePod) -> None:
    """The kubelet's report of the resizes it took: each slot's allocation is its spec's requests."""
    for container in pod.pod["spec"]["containers"]:
        status = pod.status(container["name"])
        status["allocatedResources"] = copy.deepcopy((container.get("resources") or {}).get("requests") or {})


class KubeletApi(SizingApi):
    """A `SizingApi` with a kubelet: after each resize it answered, the kubelet writes the pod's status twice
    (the allocation with `PodResizeInProgress`; then, `clears`, the condition cleared), each write a new
    resourceVersion past the resize's answer. Patches are guarded by the resourceVersion (409 as
    `ConflictError`); a watch sends the versions after the one it starts from."""

    def __init__(self, pod: FakePod, clears: bool = True) -> None:
        super().__init__(pod)
        self.clears = clears
        self.versions: list[dict] = []

    def _write(self) -> None:
        self.pod.bump()
        self.versions.append(copy.deepcopy(self.pod.pod))

    def resize_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        answer = super().resize_pod(name, namespace, body)
        _allocate(self.pod)
        self.pod.pod["status"]["conditions"] = [dict(IN_PROGRESS)]
        self._write()
        if self.clears:
            self.pod.pod["status"]["conditions"] = []
            self._write()
        return answer

    def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version is not None and version != self.pod.pod["metadata"]["resourceVersion"]:
            self.calls.append("409")
            raise ConflictError("409")
        return super().patch_pod(name, namespace, body)

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]:
        self.calls.append("watch")
        for version in self.versions:
            if int(version["metadata"]["resourceVersion"]) > int(resource_version or 0):
                yield ChainPod.of(copy.deepcopy(version))


def ended_sized() -> FakePod:
    """extract ended in slot-a (generation 1) at its size, slot-b parked with transform's image; every
    allocation reported; in-place sizing."""
    pod = extract_ended()
    parked = sized_for(pod, ["extract", "transform", "load"])
    for container in pod.pod["spec"]["containers"]:
        container["resources"] = copy.deepcopy(STAGE_SIZE if container["name"] == "slot-a" else parked)
    _allocate(pod)
    return pod


def test_the_prepare_after_the_park_plans_from_the_resize_in_force_not_from_the_resize_s_answer() -> None:
    """Before: get, resize, patch (409: the kubelet's write), get, patch. Now: get, resize, watch, patch."""
    pod = ended_sized()
    api, logged = KubeletApi(pod), []
    StageDriver(api, "etl-abc", "data", log=logged.append).start_park(  # type: ignore[arg-type]
        "extract", "slot-a", 1, ahead=named(TRANSFORM), then=named(LOAD)
    ).settle()
    assert api.calls == ["get", "resize", "watch", "patch"], api.calls
    assert pod.image("slot-a") == LOAD.image
    assert any("prepare slot=slot-a image=acme/load:1.1 for the stage after next" in line for line in logged)


def test_a_resize_not_in_force_within_the_wait_leaves_the_prepare_to_a_read() -> None:
    """The kubelet leaves the resize in progress past the wait: the prepare reads the pod, plans from it."""
    pod = ended_sized()
    api = KubeletApi(pod, clears=False)
    StageDriver(api, "etl-abc", "data").start_park(  # type: ignore[arg-type]
        "extract", "slot-a", 1, ahead=named(TRANSFORM), then=named(LOAD)
    ).settle()
    assert "409" not in api.calls and api.calls[-2:] == ["get", "patch"], api.calls
    assert pod.image("slot-a") == LOAD.image


def test_a_resize_is_in_force_once_allocated_and_no_longer_in_progress() -> None:
    pod = ended_sized()
    assert not sizing.resize_unsettled(pod.view)  # every allocation reported, nothing in progress
    slot_b = next(c for c in pod.pod["spec"]["containers"] if c["name"] == "slot-b")
    slot_b["resources"] = copy.deepcopy(STAGE_SIZE)  # a resize the API server took
    assert sizing.resize_unsettled(pod.view)
    _allocate(pod)
    pod.pod["status"]["conditions"] = [dict(IN_PROGRESS)]
    assert sizing.resize_unsettled(pod.view)
    # a resize the kubelet holds (pending) or cannot apply yet (in progress with an error): left as it is
    for held in (
        {"type": "PodResizePending", "status": "True", "reason": "Deferred"},
        IN_PROGRESS | {"reason": "Error"},
    ):
        pod.pod["status"]["conditions"] = [held]
        assert not sizing.resize_unsettled(pod.view)
    pod.pod["status"]["conditions"] = []
    assert not sizing.resize_unsettled(pod.view)
    for slot in ("slot-a", "slot-b"):  # a kubelet that reports no allocation: nothing to wait for
        pod.status(slot).pop("allocatedResources")
    slot_b["resources"] = {"requests": {"memory": "1Gi"}}
    assert not sizing.resize_unsettled(pod.view)


# --- the trigger (a deferred stage's end) -----------------------------------------------------------------


class AsyncKubeletApi:
    """`KubeletApi` as the triggerer's async hook answers (read, resize, patch, watch)."""

    def __init__(self, api: KubeletApi) -> None:
        self.api = api

    async def read_pod(self, name: str, namespace: str) -> ChainPod:
        return self.api.read_pod(name, namespace)

    async def resize_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        return self.api.resize_pod(name, namespace, body)

    async def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        return self.api.patch_pod(name, namespace, body)

    async def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> AsyncIterator[ChainPod | None]:
        for version in self.api.watch_pod(name, namespace, timeout_seconds, resource_version):
            yield version


def test_the_trigger_prepares_after_its_park_from_the_resize_in_force() -> None:
    """A deferred stage's trigger parks and prepares two ahead as the task does: no 409 after the park."""
    pod = ended_sized()
    api, lines = KubeletApi(pod), []

    async def emit(batch: list[str]) -> None:
        lines.extend(batch)

    follower = StageOutputFollower(
        AsyncKubeletApi(api),  # type: ignore[arg-type]
        pod_name="etl-abc",
        namespace="data",
        stage="extract",
        generation=1,
        skip=0,
        deadline=math.inf,
        emit=emit,
        ahead=named(TRANSFORM),
        then=named(LOAD),
    )
    follower.follow = GenerationFollow("extract", "slot-a", 1, "")
    follower.follow.output.result = SimpleNamespace(exit_code=0)  # type: ignore[assignment]
    assert asyncio.run(follower.park(pod.view))
    assert "409" not in api.calls and api.calls[-2:] == ["watch", "patch"], api.calls
    assert pod.image("slot-a") == LOAD.image
    assert any("prepare slot=slot-a image=acme/load:1.1 for the stage after next" in line for line in lines)
