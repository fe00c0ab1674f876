"""Per-stage slot sizing (core.sizing): sizes, the parked minimum, the QoS class, the order of resizes."""

from __future__ import annotations

import json
import time

import pytest

from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec
from airflow_kruise_chain.core.resources import (
    PARKED_LIMITS,
    PARKED_REQUESTS,
    ChainSizing,
    plan_sizing,
    qos_class,
)
from airflow_kruise_chain.core.sizing import SlotSizer, infeasible_message, resize_steps, size_pod


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


def test_the_idle_slot_is_parked_before_the_next_slot_grows():
    parked = {"requests": {"memory": "16Mi"}}
    pod = _pod({"requests": {"memory": "512Mi"}}, parked)
    steps = resize_steps(pod, "slot-b", "slot-a", {"requests": {"memory": "256Mi"}}, parked, other_idle=True)
    assert steps == [("slot-a", parked), ("slot-b", {"requests": {"memory": "256Mi"}})]
    # a busy other slot is left alone; a slot already sized needs no resize (1024Mi == 1Gi)
    pod = _pod({"requests": {"memory": "1024Mi"}}, parked)
    assert (
        resize_steps(pod, "slot-a", "slot-b", {"requests": {"memory": "1Gi"}}, parked, other_idle=False) == []
    )


def test_size_pod_parks_both_slots_and_carries_the_sizing():
    sizing = plan_sizing([stage("a", **mem("64Mi")), stage("b", **mem("512Mi"))])
    pod = size_pod(
        _pod({"requests": {"memory": "512Mi"}}, {"requests": {"memory": "512Mi"}}) | {"metadata": {}}, sizing
    )
    assert [c["resources"] for c in pod["spec"]["containers"]] == [sizing.parked, sizing.parked]
    assert ChainSizing.from_pod(pod) == sizing
    static = size_pod({"metadata": {}, "spec": {"containers": []}}, None)
    assert ChainSizing.from_pod(static) is None


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
    """A ResizeApi over one pod: resizes guarded by resourceVersion (409 once, when `conflict`), applied at
    once by a 'kubelet' (allocatedResources follow the spec)."""

    def __init__(self, pod: dict, conflict: bool = False) -> None:
        self.pod, self.conflict, self.resizes, self.reads = pod, conflict, [], 0

    def read_pod(self, name: str, namespace: str) -> dict:
        self.reads += 1
        return json.loads(json.dumps(self.pod))

    def resize_pod(self, name: str, namespace: str, body: dict) -> dict:
        from airflow_kruise_chain.core.errors import ConflictError

        self.resizes.append(body)
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
        return json.loads(json.dumps(self.pod))

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
    SlotSizer(api, "p", "ns", lambda _line: None).park_generation("big", "slot-a", 3, time.monotonic() + 5)
    assert len(api.resizes) == 2 and api.reads == 2  # the 409 re-read the pod, the second resize parked
    assert api.pod["spec"]["containers"][0]["resources"] == sizing.parked
    # another task has swapped slot-a since (generation 4 runs there): its size is left alone
    pod, sizing = _sized_pod(generation_a=4)
    api = _ParkApi(pod)
    SlotSizer(api, "p", "ns", lambda _line: None).park_generation("big", "slot-a", 3, time.monotonic() + 5)
    assert api.resizes == [] and api.pod["spec"]["containers"][0]["resources"] == sizing.for_stage("big")


def test_a_statically_sized_chain_parks_without_reading_the_pod():
    """The sizing annotation is fixed when setup creates the pod: the pod as last read tells a static chain,
    so its stage tasks make no park read; a sized chain's park still reads the pod to guard its resize."""
    from airflow_kruise_chain.core.podview import ChainPod

    pod, sizing = _sized_pod(generation_a=3)
    static = size_pod(json.loads(json.dumps(pod)), None)
    api = _ParkApi(static)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    sizer.park_generation("big", "slot-a", 3, time.monotonic() + 5, seen=ChainPod.of(static))
    assert api.reads == 0 and api.resizes == []
    api = _ParkApi(pod)
    sizer = SlotSizer(api, "p", "ns", lambda _line: None)
    sizer.park_generation("big", "slot-a", 3, time.monotonic() + 5, seen=ChainPod.of(pod))
    assert api.reads == 1 and api.pod["spec"]["containers"][0]["resources"] == sizing.parked
