"""Per-stage slot sizing (core.sizing): sizes, the parked minimum, the QoS class, the order of resizes."""

from __future__ import annotations

import json
import time

import pytest

from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.resources import (
    PARKED_LIMITS,
    PARKED_REQUESTS,
    ChainSizing,
    plan_sizing,
    qos_class,
)
from airflow_kruise_chain.core.sizing import SlotSizer, infeasible_message, resize_steps, size_pod
from tests.unit.podfactory import chain_pod, container


def stage(name: str, **resources: dict[str, str]) -> StageSpec:
    return StageSpec(name, "busybox:1.36", ["true"], resources=resources)


def mem(request: str, limit: str | None = None) -> dict[str, dict[str, str]]:
    out = {"requests": {"memory": request}}
    if limit:
        out["limits"] = {"memory": limit}
    return out


def test_each_stage_gets_its_own_size_and_idle_slots_the_parked_minimum():
    stages = [
        stage("a", **mem("64Mi", "128Mi")),
        stage("b", **mem("512Mi", "600Mi")),
        stage("c", **mem("64Mi", "128Mi")),
        stage("d", **mem("256Mi", "300Mi")),
    ]
    sizing = plan_sizing(stages)
    assert sizing.for_stage("b") == {"requests": {"memory": "512Mi"}, "limits": {"memory": "600Mi"}}
    assert sizing.for_stage("d") == {"requests": {"memory": "256Mi"}, "limits": {"memory": "300Mi"}}
    assert sizing.parked == {
        "requests": {"memory": PARKED_REQUESTS["memory"]},
        "limits": {"memory": PARKED_LIMITS["memory"]},
    }
    assert sizing.qos == "Burstable"


def test_a_stage_without_a_memory_request_gets_the_parked_request_and_the_largest_limit():
    sizing = plan_sizing([stage("small"), stage("big", **mem("1Gi", "2Gi"))])
    assert sizing.for_stage("small") == {"requests": {"memory": "4Mi"}, "limits": {"memory": "2Gi"}}


def test_an_unbounded_request_leaves_the_slot_without_a_limit():
    sizing = plan_sizing([stage("a", **mem("1Gi")), stage("b", **mem("64Mi", "128Mi"))])
    assert sizing.for_stage("b") == {"requests": {"memory": "64Mi"}}
    assert sizing.parked == {"requests": {"memory": "4Mi"}}


def test_a_guaranteed_chain_stays_guaranteed_with_a_guaranteed_parked_size():
    g = {"cpu": "500m", "memory": "256Mi"}
    sizing = plan_sizing([stage("a", requests=g, limits=g), stage("b", limits={"cpu": "1", "memory": "1Gi"})])
    assert sizing.qos == "Guaranteed"
    assert sizing.parked == {"requests": dict(PARKED_LIMITS), "limits": dict(PARKED_LIMITS)}
    assert qos_class([sizing.for_stage("b"), sizing.parked]) == "Guaranteed"


def test_a_chain_whose_resize_would_change_its_qos_fails_at_parse_naming_the_stages():
    g = {"cpu": "500m", "memory": "256Mi"}
    parked = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "10m", "memory": "16Mi"}}
    chain = ChainSpec(
        "c",
        "default",
        [stage("exact", requests=g, limits=g), stage("loose", **mem("64Mi", "128Mi"))],
        parked_resources=parked,
    )
    with pytest.raises(ChainConfigError) as err:
        chain.validate()
    assert err.value.field == "stages"
    assert "'loose' (Burstable)" in str(err.value) and "Guaranteed" in str(err.value)
    assert "'exact'" not in str(err.value)
    ChainSpec("c", "default", chain.stages, parked_resources=parked, sizing="static").validate()


def test_sizing_option_is_validated():
    with pytest.raises(ChainConfigError) as err:
        ChainSpec("c", "default", [stage("a")], sizing="dynamic").validate()
    assert err.value.field == "sizing"


def _pod(resources_a: dict, resources_b: dict) -> dict:
    return {
        "spec": {
            "containers": [
                {"name": "slot-a", "resources": resources_a},
                {"name": "slot-b", "resources": resources_b},
            ]
        }
    }


def _slots(resources_a: dict, resources_b: dict) -> ChainPod:
    """A chain pod whose slots' specs ask for these resources."""
    return chain_pod(
        slots={"slot-a": container(resources=resources_a), "slot-b": container(resources=resources_b)}
    )


def test_the_idle_slot_is_parked_before_the_next_slot_grows():
    parked = {"requests": {"memory": "16Mi"}}
    pod = _slots({"requests": {"memory": "512Mi"}}, parked)
    steps = resize_steps(pod, "slot-b", "slot-a", {"requests": {"memory": "256Mi"}}, parked, other_idle=True)
    assert steps == [("slot-a", parked), ("slot-b", {"requests": {"memory": "256Mi"}})]
    # a busy other slot is left alone; a slot already sized needs no resize (1024Mi == 1Gi)
    pod = _slots({"requests": {"memory": "1024Mi"}}, parked)
    assert (
        resize_steps(pod, "slot-a", "slot-b", {"requests": {"memory": "1Gi"}}, parked, other_idle=False) == []
    )


def test_size_pod_parks_both_slots_and_carries_the_sizing():
    sizing = plan_sizing([stage("a", **mem("64Mi")), stage("b", **mem("512Mi"))])
    pod = size_pod(
        _pod({"requests": {"memory": "512Mi"}}, {"requests": {"memory": "512Mi"}}) | {"metadata": {}}, sizing
    )
    assert [c["resources"] for c in pod["spec"]["containers"]] == [sizing.parked, sizing.parked]
    assert ChainSizing.from_pod(ChainPod.of(pod)) == sizing
    static = size_pod({"metadata": {}, "spec": {"containers": []}}, None)
    assert ChainSizing.from_pod(ChainPod.of(static)) is None


def test_infeasible_names_the_stage_the_request_and_the_node_allocatable():
    message = infeasible_message(
        "big",
        "slot-b",
        {"requests": {"memory": "512Mi"}},
        "node-0",
        "Node didn't have enough capacity: memory, requested: 536870912, capacity: 268435456",
    )
    assert "stage 'big'" in message and "memory 512Mi" in message
    assert "node node-0 has memory 256Mi allocatable" in message and "Infeasible" in message


def test_the_init_container_keeps_the_parked_size_so_no_pair_of_stages_changes_the_qos():
    g = {"cpu": "500m", "memory": "256Mi"}
    guaranteed = plan_sizing(
        [stage("a", requests=g, limits=g), stage("b", limits={"cpu": "1", "memory": "1Gi"})]
    )
    burstable = plan_sizing([stage("a", **mem("64Mi", "128Mi")), stage("b", **mem("1Gi", "1Gi"))])
    for sizing in (guaranteed, burstable):
        pod = size_pod(
            {"metadata": {}, "spec": {"containers": [{"name": "slot-a"}], "initContainers": [{"name": "i"}]}},
            sizing,
        )
        init = pod["spec"]["initContainers"][0]["resources"]
        assert init == {k: v for k, v in sizing.parked.items() if v}
        sizes = [*sizing.stages.values(), sizing.parked]
        for one in sizes:  # any two slots at once (two stages, or a stage and a parked slot)
            for two in sizes:
                assert qos_class([one, two, init]) == sizing.qos
    assert guaranteed.qos == "Guaranteed" and burstable.qos == "Burstable"


@pytest.mark.parametrize(
    ("parked", "named"),
    [
        ({"limits": {"memory": "32Mi"}}, "parked_resources sets limits.memory, which stage 'a' leaves unset"),
        ({"requests": {"cpu": "10m"}, "limits": {"cpu": "10m"}}, "limits.cpu"),
    ],
)
def test_a_parked_size_a_resize_could_not_reach_fails_at_parse_naming_the_field(parked, named):
    chain = ChainSpec(
        "c", "default", [stage("a", **mem("64Mi")), stage("b", **mem("1Gi"))], parked_resources=parked
    )
    with pytest.raises(ChainConfigError) as err:
        chain.validate()
    assert err.value.field == "parked_resources"
    assert named in str(err.value) and "sizing='static'" in str(err.value)


def test_parked_resources_override_the_default_resource_by_resource():
    sizing = plan_sizing([stage("a", **mem("64Mi", "128Mi"))], {"requests": {"memory": "8Mi"}})
    assert sizing.parked == {"requests": {"memory": "8Mi"}, "limits": {"memory": PARKED_LIMITS["memory"]}}


class _ParkApi:
    """A ResizeApi over one pod (the API's JSON in `pod`, answered as snapshots as the hook answers them):
    resizes guarded by resourceVersion (409 once, when `conflict`), applied at once by a 'kubelet'
    (allocatedResources follow the spec)."""

    def __init__(self, pod: dict, conflict: bool = False) -> None:
        self.pod, self.conflict, self.resizes, self.reads = pod, conflict, [], 0

    def snapshot(self) -> ChainPod:
        """The pod as the API would answer it now (a test's own look: not counted as a read)."""
        return ChainPod.of(json.loads(json.dumps(self.pod)))

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.reads += 1
        return self.snapshot()

    def resize_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        self.resizes.append(body)
        self.apply_resize(body)
        return self.snapshot()

    def apply_resize(self, body: dict) -> None:
        """What the API server and the kubelet do with a resize `body`."""
        from airflow_kruise_chain.core.errors import ConflictError

        if self.conflict or body["metadata"]["resourceVersion"] != self.pod["metadata"]["resourceVersion"]:
            self.conflict = False
            self.pod["metadata"]["resourceVersion"] = str(int(self.pod["metadata"]["resourceVersion"]) + 1)
            raise ConflictError("409")
        for ctr in body["spec"]["containers"]:
            spec = next(c for c in self.pod["spec"]["containers"] if c["name"] == ctr["name"])
            spec["resources"] = ctr["resources"]
            status = next(c for c in self.pod["status"]["containerStatuses"] if c["name"] == ctr["name"])
            status["allocatedResources"] = dict(ctr["resources"].get("requests") or {})
        self.pod["metadata"]["resourceVersion"] = str(int(self.pod["metadata"]["resourceVersion"]) + 1)

    def watch_pod(self, *args: object, **kwargs: object):
        return iter(())


def _sized_pod(generation_a: int) -> tuple[dict, ChainSizing]:
    from airflow_kruise_chain.core.wire import slot_annotation

    sizing = plan_sizing([stage("big", **mem("1Gi")), stage("small", **mem("64Mi"))])
    pod = size_pod(
        _pod(sizing.for_stage("big"), sizing.parked) | {"metadata": {"resourceVersion": "7"}}, sizing
    )
    pod["spec"]["containers"][0]["resources"] = sizing.for_stage("big")  # slot-a holds big's size
    pod["metadata"]["annotations"][slot_annotation("slot-a", "generation")] = str(generation_a)
    pod["status"] = {"containerStatuses": [{"name": "slot-a"}, {"name": "slot-b"}]}
    return pod, sizing


def test_a_slot_is_parked_only_while_it_holds_the_ended_generation():
    pod, sizing = _sized_pod(generation_a=3)
    api = _ParkApi(pod, conflict=True)
    SlotSizer(api, "p", "ns", lambda _line: None).park_generation("big", "slot-a", 3)
    assert len(api.resizes) == 2 and api.reads == 2  # the 409 re-read the pod, the second resize parked
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    # another task has swapped slot-a since (generation 4 runs there): its size is left alone
    pod, sizing = _sized_pod(generation_a=4)
    api = _ParkApi(pod)
    SlotSizer(api, "p", "ns", lambda _line: None).park_generation("big", "slot-a", 3)
    assert api.resizes == [] and api.pod["spec"]["containers"][0]["resources"] == sizing.for_stage("big")


def test_a_statically_sized_chain_parks_without_reading_the_pod():
    """The sizing annotation is fixed when setup creates the pod: the pod as last read tells a static chain,
    so its stage tasks make no park read; a sized chain's park still reads the pod to guard its resize."""

    pod, sizing = _sized_pod(generation_a=3)
    static = size_pod(json.loads(json.dumps(pod)), None)
    api = _ParkApi(static)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    sizer.park_generation("big", "slot-a", 3, seen=api.snapshot())
    assert api.reads == 0 and api.resizes == []
    api = _ParkApi(pod)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    sizer.park_generation("big", "slot-a", 3, seen=api.snapshot())
    assert api.reads == 1 and api.pod["spec"]["containers"][0]["resources"] == sizing.parked


class _SlowKubeletApi(_ParkApi):
    """A _ParkApi whose kubelet has not applied anything yet (no allocation follows a resize): counts the
    watches opened on the pod."""

    def __init__(self, pod: dict) -> None:
        super().__init__(pod)
        self.watches = 0

    def apply_resize(self, body: dict) -> None:
        allocated = [dict(c.get("allocatedResources") or {}) for c in self.pod["status"]["containerStatuses"]]
        super().apply_resize(body)
        for status, kept in zip(self.pod["status"]["containerStatuses"], allocated, strict=True):
            status["allocatedResources"] = kept

    def watch_pod(self, *args: object, **kwargs: object):
        self.watches += 1
        return iter(())


def test_a_park_does_not_wait_for_the_kubelet_to_apply_its_resize():
    """Nothing waits on a parked slot: the stage task parks with one guarded resize and goes on (the next
    swap's sizing waits for the pod's resize, if it must)."""
    pod, sizing = _sized_pod(generation_a=3)
    api = _SlowKubeletApi(pod)
    SlotSizer(api, "p", "ns", lambda _line: None).park_generation("big", "slot-a", 3)
    assert api.reads == 1 and len(api.resizes) == 1 and api.watches == 0
    assert api.resizes[0]["metadata"]["resourceVersion"] == "7"  # guarded by the version it read
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked


class _RefusingKubeletApi(_ParkApi):
    """A kubelet (1.34+) that applies each resize at once, except a memory limit below `usage` on slot-a:
    then `PodResizeInProgress` Error names it, as kuberuntime's `validateMemoryResizeAction` does."""

    def __init__(self, pod: dict, usage: int) -> None:
        super().__init__(pod)
        self.usage = usage

    def apply_resize(self, body: dict) -> None:
        from kruise_local.validation import memory_bytes

        super().apply_resize(body | {"metadata": dict(self.pod["metadata"])})
        conditions = []
        for spec, status in zip(
            self.pod["spec"]["containers"], self.pod["status"]["containerStatuses"], strict=True
        ):
            limit = (spec["resources"].get("limits") or {}).get("memory")
            if spec["name"] == "slot-a" and limit and memory_bytes(limit) < self.usage:
                message = f'attempting to set container "slot-a" memory limit ({memory_bytes(limit)}) below '
                conditions.append(
                    {"type": "PodResizeInProgress", "status": "True", "reason": "Error", "message": message}
                )
                continue
            status["resources"] = json.loads(json.dumps(spec["resources"]))
        self.pod["status"]["conditions"] = conditions


def test_the_next_swap_keeps_a_limit_the_kubelet_refused_to_lower_when_parking():
    """A park that did not wait may leave the kubelet refusing to lower the parked slot's memory limit (its
    usage is above the parked limit): the next swap parks that slot's requests and keeps the limit it runs
    with, then sizes its own slot; it does not wait on the refusal until its swap timeout."""

    sizing = plan_sizing([stage("big", **mem("1Gi", "1536Mi")), stage("small", **mem("64Mi", "96Mi"))])
    pod = size_pod(_pod(sizing.parked, sizing.parked) | {"metadata": {"resourceVersion": "7"}}, sizing)
    pod["status"] = {
        "containerStatuses": [
            {"name": "slot-a", "resources": sizing.for_stage("big")},  # big ran there: 1536Mi limit
            {"name": "slot-b", "resources": sizing.parked},
        ]
    }
    api = _RefusingKubeletApi(pod, usage=100 * 2**20)
    api.resize_pod("p", "ns", {"spec": {"containers": [{"name": "slot-a", "resources": sizing.parked}]}})
    refused = api.pod["status"]["conditions"][0]
    assert refused["reason"] == "Error"  # the park: its limit is refused
    api.resizes.clear()
    lines: list[str] = []
    sizer = SlotSizer(api, "p", "ns", lines.append)
    sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, time.monotonic() + 3)
    kept = {"requests": sizing.parked["requests"], "limits": {"memory": "1536Mi"}}
    assert [b["spec"]["containers"][0] for b in api.resizes] == [
        {"name": "slot-a", "resources": kept},
        {"name": "slot-b", "resources": sizing.for_stage("small")},
    ]
    assert api.pod["status"]["conditions"] == []
    assert any("refused to lower slot-a's memory limit" in line for line in lines)
    # slot-b already sized for the stage: keeping slot-a's limit is the only resize, and it says it resized
    # (the swap plans its resourceVersion-guarded patch from the pod as it is now)
    api.pod["spec"]["containers"][0]["resources"] = json.loads(json.dumps(sizing.parked))
    api.pod["status"]["containerStatuses"][0]["resources"] = sizing.for_stage("big")
    api.pod["status"]["conditions"] = [dict(refused)]
    api.resizes.clear()
    resized = sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, time.monotonic() + 3)
    assert resized and [b["spec"]["containers"][0]["name"] for b in api.resizes] == ["slot-a"]


def test_a_background_park_logs_what_it_said_and_raises_what_it_raised_when_settled():
    """`BackgroundPark` runs `park_generation` on a thread; `settle` waits for it, then logs its lines on the
    caller's thread, logs a ChainError (the next swap parks the slot) and raises anything else."""
    from airflow_kruise_chain.core.errors import ChainError
    from airflow_kruise_chain.core.sizing import BackgroundPark

    pod, sizing = _sized_pod(generation_a=3)
    api = _ParkApi(pod)
    lines: list[str] = []
    park = BackgroundPark(api, "p", "ns", lines.append, "big", "slot-a", 3, None)
    park.settle()
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    assert len(lines) == 1 and "resize slot-a to" in lines[0]

    class Failing(_ParkApi):
        error: Exception = ChainError("the API server is away")

        def read_pod(self, name: str, namespace: str) -> dict:
            raise self.error

    lines.clear()
    BackgroundPark(Failing(pod), "p", "ns", lines.append, "big", "slot-a", 3, None).settle()
    assert lines == ["could not park slot-a after stage 'big': the API server is away"]
    Failing.error = RuntimeError("a bug")
    with pytest.raises(RuntimeError, match="a bug"):
        BackgroundPark(Failing(pod), "p", "ns", lines.append, "big", "slot-a", 3, None).settle()


def test_a_swap_shrinking_the_idle_slot_keeps_the_limit_the_kubelet_refuses_to_lower():
    """The swap parks the idle slot itself and waits: when the kubelet refuses the lower memory limit (the
    condition names that container), the slot keeps its limit with its requests parked."""

    sizing = plan_sizing([stage("big", **mem("1Gi", "1536Mi")), stage("small", **mem("64Mi", "96Mi"))])
    pod = size_pod(_pod(sizing.parked, sizing.parked) | {"metadata": {"resourceVersion": "7"}}, sizing)
    pod["spec"]["containers"][0]["resources"] = sizing.for_stage("big")  # big ran there, not parked yet
    pod["status"] = {
        "containerStatuses": [
            {"name": "slot-a", "resources": sizing.for_stage("big")},
            {"name": "slot-b", "resources": sizing.parked},
        ]
    }
    api = _RefusingKubeletApi(pod, usage=100 * 2**20)
    lines: list[str] = []
    sizer = SlotSizer(api, "p", "ns", lines.append)
    sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, time.monotonic() + 3)
    kept = {"requests": sizing.parked["requests"], "limits": {"memory": "1536Mi"}}
    assert [b["spec"]["containers"][0] for b in api.resizes] == [
        {"name": "slot-a", "resources": sizing.parked},
        {"name": "slot-a", "resources": kept},
        {"name": "slot-b", "resources": sizing.for_stage("small")},
    ]
    assert api.pod["status"]["conditions"] == []
    assert any("the kubelet refused to lower slot-a's memory limit (attempting" in line for line in lines)


def _ended_in_a(image_b: str = "acme/small:1") -> tuple[dict, ChainSizing]:
    """big has ended in slot-a (generation 3, its size); slot-b parked on `image_b`, no generation."""
    pod, sizing = _sized_pod(generation_a=3)
    pod["spec"]["containers"][1]["image"] = image_b
    return pod, sizing


def _one_slot_parked(pod: dict, sizing: ChainSizing) -> None:
    """At every step, one slot at most holds more than the parked requests."""
    parked = sizing.parked["requests"]
    sizes = [c["resources"]["requests"] for c in pod["spec"]["containers"]]
    assert parked in sizes, sizes


def test_the_next_stage_s_slot_is_sized_ahead_once_the_ended_slot_is_parked():
    """At a stage's end its task parks the slot and then sizes the idle slot the next stage will go into,
    guarded by the version the park's answer carried (no read): the next swap finds its slot sized, and
    the pod never reserves two stages at once."""
    pod, sizing = _ended_in_a()
    api = _ParkApi(pod)
    lines: list[str] = []
    sizer = SlotSizer(api, "p", "ns", lines.append)
    sizer.park_generation("big", "slot-a", 3)
    _one_slot_parked(api.pod, sizing)
    assert sizer.size_ahead("small", "acme/small:1", "slot-a", lambda _pod, _slot: True)
    assert [b["spec"]["containers"][0] for b in api.resizes] == [
        {"name": "slot-a", "resources": sizing.parked},
        {"name": "slot-b", "resources": sizing.for_stage("small")},
    ]
    assert api.resizes[1]["metadata"]["resourceVersion"] == "8"  # the park's answer
    assert api.reads == 1  # the park's read only
    _one_slot_parked(api.pod, sizing)
    assert lines[-1] == (
        "::kruise-chain:: resize slot-b to requests memory=64Mi (ahead, for the next stage 'small': "
        "slot-a is parked)"
    )
    # sized already: nothing more
    assert not sizer.size_ahead("small", "acme/small:1", "slot-a", lambda _pod, _slot: True)
    assert len(api.resizes) == 2


@pytest.mark.parametrize("case", ["other image", "slot-b runs a stage", "slot-a not parked", "static sizing"])
def test_no_slot_is_sized_ahead_unless_it_is_idle_holds_the_image_and_the_ended_slot_is_parked(case: str):
    pod, sizing = _ended_in_a(image_b="acme/other:1" if case == "other image" else "acme/small:1")
    if case == "static sizing":
        pod = size_pod(pod, None)
    api = _ParkApi(pod)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    if case != "slot-a not parked":  # e.g. the park was refused, or another stage was swapped into slot-a
        sizer.park_generation("big", "slot-a", 3)
    before = len(api.resizes)
    asked: list[str] = []

    def idle(_pod: ChainPod, slot: str) -> bool:
        asked.append(slot)
        return case != "slot-b runs a stage"

    assert not sizer.size_ahead("small", "acme/small:1", "slot-a", idle)
    assert len(api.resizes) == before
    assert asked == (["slot-b"] if case == "slot-b runs a stage" else [])
    assert api.pod["spec"]["containers"][1]["resources"] == (
        sizing.parked if case != "static sizing" else pod["spec"]["containers"][1]["resources"]
    )


def test_a_size_ahead_that_conflicts_plans_again_from_a_read():
    pod, sizing = _ended_in_a()
    api = _ParkApi(pod, conflict=True)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    assert (
        sizer.size_ahead("small", "acme/small:1", "slot-a", lambda _pod, _slot: True) is False
    )  # not parked
    api.pod["spec"]["containers"][0]["resources"] = sizing.parked
    api.conflict = True
    assert sizer.size_ahead("small", "acme/small:1", "slot-a", lambda _pod, _slot: True)
    assert api.reads == 3 and len(api.resizes) == 2  # read, 409, read, resized
    assert api.pod["spec"]["containers"][1]["resources"] == sizing.for_stage("small")


def test_the_swap_into_a_slot_sized_ahead_asks_for_nothing_and_waits_only_for_the_kubelet():
    """The next stage's swap finds its slot sized: no resize request. While the kubelet has not applied it
    (allocation behind, or the pod's resize in progress) the swap waits for it as for its own resize."""
    pod, sizing = _ended_in_a()
    pod["spec"]["containers"][0]["resources"] = sizing.parked
    pod["spec"]["containers"][1]["resources"] = sizing.for_stage("small")
    statuses = pod["status"]["containerStatuses"]
    statuses[0]["allocatedResources"] = dict(sizing.parked["requests"])
    statuses[1]["allocatedResources"] = dict(sizing.for_stage("small")["requests"])
    api = _SlowKubeletApi(pod)
    lines: list[str] = []
    sizer = SlotSizer(api, "p", "ns", lines.append)
    deadline = time.monotonic() + 0.3
    assert not sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, deadline)
    assert api.resizes == [] and api.watches == 0 and lines == []  # applied: nothing to ask or wait for

    from airflow_kruise_chain.core.errors import ResizeTimeoutError

    statuses[1]["allocatedResources"] = dict(sizing.parked["requests"])  # not allocated yet
    with pytest.raises(ResizeTimeoutError):
        sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, time.monotonic() + 0.3)
    assert api.resizes == [] and api.watches >= 1
    assert lines[0] == "waiting: the kubelet has not applied the resize of slot-b for stage 'small' yet"
    statuses[1]["allocatedResources"] = dict(sizing.for_stage("small")["requests"])
    pod["status"]["conditions"] = [{"type": "PodResizeInProgress", "status": "True"}]  # not in force yet
    with pytest.raises(ResizeTimeoutError):
        sizer.size_for_swap(api.snapshot(), "small", "slot-b", False, {"slot-a"}, time.monotonic() + 0.3)
    # a restart (image patch) needs the allocation only
    assert not sizer.size_for_swap(
        api.snapshot(), "small", "slot-b", True, {"slot-a"}, time.monotonic() + 0.3
    )
    assert api.resizes == []


class _AsyncParkApi:
    """`_ParkApi` as the triggerer's async hook answers (`conflicts.AsyncPodApi`); `refuse`: the API
    server's 422 message for the first resize (as before 1.34 for a lower memory limit)."""

    def __init__(self, api: _ParkApi, refuse: str = "") -> None:
        self.api, self.refuse = api, refuse

    async def read_pod(self, name: str, namespace: str) -> ChainPod:
        return self.api.read_pod(name, namespace)

    async def resize_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        from airflow_kruise_chain.core.errors import ResizeRefusedError

        if self.refuse:
            refused, self.refuse = self.refuse, ""
            self.api.resizes.append(body)
            raise ResizeRefusedError(refused)
        return self.api.resize_pod(name, namespace, body)


def _apark(api: _AsyncParkApi, generation: int = 3, seen: ChainPod | None = None) -> list[str]:
    import asyncio

    from airflow_kruise_chain.core.sizing import apark_generation

    lines: list[str] = []
    asyncio.run(apark_generation(api, "p", "ns", "big", "slot-a", generation, lines.append, seen))
    return lines


def test_the_triggerer_parks_a_slot_as_a_stage_task_does():
    """A deferred stage's trigger parks its slot (`apark_generation`): one resourceVersion-guarded resize,
    the pod read again after a 409, only while the slot holds the ended generation, no read for a static
    chain."""
    pod, sizing = _sized_pod(generation_a=3)
    api = _ParkApi(pod, conflict=True)
    lines = _apark(_AsyncParkApi(api))
    assert len(api.resizes) == 2 and api.reads == 2
    assert api.resizes[-1]["metadata"]["resourceVersion"] == "8"  # guarded by the version read after the 409
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    assert lines and all("resize slot-a to" in line and "parked: stage 'big' ended" in line for line in lines)
    assert _apark(_AsyncParkApi(api)) == [] and len(api.resizes) == 2  # parked already: nothing to ask
    pod, sizing = _sized_pod(generation_a=4)  # another task's stage runs in slot-a since
    api = _ParkApi(pod)
    assert _apark(_AsyncParkApi(api)) == [] and api.resizes == []
    static = size_pod(json.loads(json.dumps(_sized_pod(generation_a=3)[0])), None)
    api = _ParkApi(static)
    assert _apark(_AsyncParkApi(api), seen=api.snapshot()) == [] and api.reads == 0


def test_the_triggerers_park_keeps_a_memory_limit_the_api_server_will_not_lower():
    """Before 1.34 the API server refuses any in-place memory limit decrease: the park keeps the limit and
    parks the rest, as the stage task's does; any other refusal is the stage's ResizeRefusedError."""
    from airflow_kruise_chain.core.errors import ResizeRefusedError

    pod, sizing = _sized_pod(generation_a=3)
    pod["spec"]["containers"][0]["resources"] = mem("1Gi", "1536Mi")
    api = _ParkApi(pod)
    lines = _apark(_AsyncParkApi(api, refuse="spec: Forbidden: memory limits cannot be decreased"))
    kept = api.resizes[-1]["spec"]["containers"][0]["resources"]
    assert len(api.resizes) == 2 and kept["limits"]["memory"] == "1536Mi"
    assert kept["requests"] == sizing.parked["requests"]
    assert any("refused to lower slot-a's memory limit" in line for line in lines)
    pod, sizing = _sized_pod(generation_a=3)
    with pytest.raises(ResizeRefusedError, match="could not be sized in slot-a"):
        _apark(_AsyncParkApi(_ParkApi(pod), refuse="spec: Invalid value: qos"))


def test_the_triggerer_sizes_the_next_stage_s_slot_ahead_from_the_park_s_answer():
    """A deferred stage's trigger sizes ahead as its task would (`guarded_size_ahead` over the async client),
    from the pod its park left (no read), and only when the pod alone says the slot is idle (no log read in
    the triggerer)."""
    import asyncio

    from airflow_kruise_chain.core.conflicts import arun
    from airflow_kruise_chain.core.sizing import apark_generation, guarded_size_ahead, idle_by_pod
    from airflow_kruise_chain.core.wire import slot_annotation

    async def park_and_size(api: _AsyncParkApi, lines: list[str]) -> bool:
        parked = await apark_generation(api, "p", "ns", "big", "slot-a", 3, lines.append)
        ahead = guarded_size_ahead("small", "acme/small:1", "slot-a", idle_by_pod, lines.append, parked)
        return await arun(ahead, api, "p", "ns") is not None

    pod, sizing = _ended_in_a()
    api, lines = _ParkApi(pod), []
    assert asyncio.run(park_and_size(_AsyncParkApi(api), lines))
    assert [b["spec"]["containers"][0] for b in api.resizes] == [
        {"name": "slot-a", "resources": sizing.parked},
        {"name": "slot-b", "resources": sizing.for_stage("small")},
    ]
    assert api.resizes[1]["metadata"]["resourceVersion"] == "8" and api.reads == 1  # the park's answer
    assert lines[-1].endswith("(ahead, for the next stage 'small': slot-a is parked)")
    # slot-b holds a generation whose end the pod does not confirm: the triggerer leaves it to the swap
    pod, sizing = _ended_in_a()
    pod["metadata"]["annotations"][slot_annotation("slot-b", "generation")] = "2"
    api = _ParkApi(pod)
    assert not asyncio.run(park_and_size(_AsyncParkApi(api), []))
    assert [b["spec"]["containers"][0]["name"] for b in api.resizes] == ["slot-a"]
