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
