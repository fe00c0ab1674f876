"""Which chain pod of its run the setup task may reuse (core/podidentity.py)."""

from __future__ import annotations

import json
from typing import Any

from airflow_kruise_chain.core import (
    ChainSpec,
    StageSpec,
    build_chain_pod,
)
from airflow_kruise_chain.core.podidentity import SPEC_HASH_ANNOTATION, spec_hash, stamp, unusable_reason
from airflow_kruise_chain.core.podview import ChainPod, StageRecord
from tests.unit.podfactory import chain_pod, container


def built(image: str = "busybox:1.36") -> tuple[dict[str, Any]]:
    """What setup builds: the chain pod alone (the runner comes from its init container)."""
    spec = ChainSpec(name="c", namespace="default", stages=[StageSpec("one", image, ["true"])])
    pod = build_chain_pod(spec, pod_name="c-pod", dag_id="d", run_id="r", first_images=spec.first_images)
    return (pod,)


def running(
    digest: str | None = None,
    waiting: str | None = None,
    generation: int = 0,
    phase: str | None = None,
    **kw: Any,
) -> ChainPod:
    """A chain pod with the spec hash `digest` (None: made before pods carried it), both slots running or
    waiting for `waiting`, at the chain's `generation`."""
    state = container("waiting", reason=waiting, message="not found") if waiting else container("running")
    return chain_pod(
        slots=dict.fromkeys(("slot-a", "slot-b"), state),
        generation=generation,
        phase=phase or ("Pending" if waiting else "Running"),
        annotations={SPEC_HASH_ANNOTATION: digest} if digest else {},
        **kw,
    )


def test_the_hash_is_stable_and_follows_what_setup_builds() -> None:
    assert spec_hash(*built()) == spec_hash(*built())
    assert spec_hash(*built()) != spec_hash(*built("alpine:3.20"))


def test_setup_stamps_the_hash_on_the_pod_it_builds() -> None:
    (pod,) = built()
    digest = spec_hash(pod)
    assert stamp(pod, digest)["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == digest


def test_a_healthy_pod_built_from_the_same_chain_is_reused() -> None:
    digest = spec_hash(*built())
    assert unusable_reason(running(digest), digest) is None


def test_a_pod_built_from_another_definition_of_the_chain_is_replaced() -> None:
    old = running(spec_hash(*built()))
    digest = spec_hash(*built("alpine:3.20"))
    reason = unusable_reason(old, digest)
    assert reason and "another definition of the chain" in reason and digest in reason
    unstamped = running()  # made before pods carried the hash
    assert "spec hash none" in (unusable_reason(unstamped, digest) or "")


def test_a_pod_whose_slot_never_started_is_replaced_until_a_stage_ran_in_it() -> None:
    digest = spec_hash(*built())
    reason = unusable_reason(running(digest, waiting="ImagePullBackOff"), digest)
    assert reason == "slot-a cannot start: ImagePullBackOff: not found"
    # once stages ran, the scratch holds their data: a stage's image that fails is that stage's failure
    assert unusable_reason(running(digest, waiting="ImagePullBackOff", generation=2), digest) is None
    # waiting for an ordinary reason is no reason to replace it
    assert unusable_reason(running(digest, waiting="ContainerCreating"), digest) is None


def test_a_lost_pod_is_replaced() -> None:
    digest = spec_hash(*built())
    assert unusable_reason(running(digest, phase="Failed"), digest) == "the chain pod is Failed"
    assert unusable_reason(running(digest, deleting=True), digest) is not None


def test_inputs_are_missing_for_predecessors_that_never_ran_in_the_pod() -> None:
    from airflow_kruise_chain.core.podidentity import missing_inputs

    assert missing_inputs(running(), ["one", "two"]) == ["one", "two"]
    record = StageRecord(1, "slot-a", "busybox:1.36", 1, "", "2024-05-01T10:00:00Z", "patch")
    assert missing_inputs(running(records={"one": record}), ["one", "two"]) == ["two"]


def test_retiring_a_record_is_a_conditional_patch_of_the_records_without_it() -> None:
    from airflow_kruise_chain.core.podidentity import generation_identity, retire_patch

    one, two, three = (
        StageRecord(g, "slot-a", "busybox:1.36", 1, "", "", "go", token="t") for g in (1, 2, 3)
    )
    pod = running(uid="u-1", resource_version="42", records={"three": three, "two": two, "one": one})
    patch = retire_patch(pod, "two")
    assert patch["metadata"]["resourceVersion"] == "42"
    ((key, value),) = patch["metadata"]["annotations"].items()  # that annotation only
    assert key == "airflow-kruise-chain/stages"
    assert list(json.loads(value)) == ["three", "one"]  # the others kept, newest first
    retired = ChainPod.of({**pod.raw, "metadata": {**pod.raw["metadata"], "annotations": {key: value}}})
    assert retired.records == {"three": three, "one": one}
    # the last one: the annotation goes (nothing empty left in kubectl describe)
    alone = running(resource_version="7", records={"one": one})
    assert retire_patch(alone, "one") == {
        "metadata": {"resourceVersion": "7", "annotations": {"airflow-kruise-chain/stages": None}}
    }
    assert generation_identity(pod, 3) == {"pod_uid": "u-1", "generation": 3}


def test_marking_a_generation_delivered_is_a_conditional_patch_of_its_record_alone() -> None:
    from airflow_kruise_chain.core.podidentity import delivered_patch

    one, two = (StageRecord(g, "slot-a", "busybox:1.36", 1, "", "", "go", token="t") for g in (1, 2))
    pod = running(resource_version="42", records={"two": two, "one": one})
    patch = delivered_patch(pod, "two", 2)
    assert patch is not None and patch["metadata"]["resourceVersion"] == "42"
    ((key, value),) = patch["metadata"]["annotations"].items()
    assert key == "airflow-kruise-chain/stages" and list(json.loads(value)) == ["two", "one"]  # order kept
    marked = ChainPod.of({**pod.raw, "metadata": {**pod.raw["metadata"], "annotations": {key: value}}})
    assert marked.records["two"].delivered and not marked.records["one"].delivered
    assert marked.records["one"] == one and json.loads(value)["one"] == one.to_dict()  # untouched, no flag
    # nothing to mark: already marked, another generation (swapped in again since), or no record
    assert delivered_patch(marked, "two", 2) is None
    assert delivered_patch(pod, "two", 1) is None
    assert delivered_patch(pod, "three", 1) is None
    # a malformed flag is not a delivery
    odd = {**json.loads(value), "one": {**one.to_dict(), "delivered": "yes"}}
    assert not StageRecord.from_dict(odd["one"]).delivered


def test_marking_delivered_replans_from_a_fresh_read_after_a_conflict_and_says_whether_it_holds() -> None:
    import asyncio

    from airflow_kruise_chain.core.conflicts import arun
    from airflow_kruise_chain.core.errors import ConflictError
    from airflow_kruise_chain.core.podidentity import DELIVER_CONFLICTS, mark_delivered

    record = StageRecord(2, "slot-b", "busybox:1.36", 1, "", "", "go", token="t")

    class Api:
        def __init__(self, conflicts: int, pod: ChainPod | None) -> None:
            self.conflicts, self.pod, self.calls = conflicts, pod, []

        async def read_pod(self, name: str, namespace: str) -> ChainPod | None:
            self.calls.append("read")
            return self.pod

        async def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
            self.calls.append("patch")
            if self.conflicts:
                self.conflicts -= 1
                raise ConflictError("409")
            assert self.pod is not None
            annotations = {**self.pod.annotations, **body["metadata"]["annotations"]}
            self.pod = ChainPod.of(
                {**self.pod.raw, "metadata": {**self.pod.raw["metadata"], "annotations": annotations}}
            )
            return self.pod

    pod = running(resource_version="5", records={"two": record})
    api = Api(1, pod)
    assert asyncio.run(arun(mark_delivered("two", 2, pod), api, "p", "ns")) is True
    assert api.calls == ["patch", "read", "patch"]  # planned from the pod given, then from a fresh read
    assert api.pod is not None and api.pod.records["two"].delivered
    assert asyncio.run(arun(mark_delivered("two", 2), api, "p", "ns")) is True  # already: no patch
    assert api.calls[-1] == "read"
    assert asyncio.run(arun(mark_delivered("two", 3), api, "p", "ns")) is False  # another generation
    assert asyncio.run(arun(mark_delivered("two", 2), Api(0, None), "p", "ns")) is False  # the pod is gone
    stubborn = Api(DELIVER_CONFLICTS, pod)
    assert asyncio.run(arun(mark_delivered("two", 2), stubborn, "p", "ns")) is False
    assert stubborn.calls.count("patch") == DELIVER_CONFLICTS
