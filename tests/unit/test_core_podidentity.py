"""Which chain pod of its run the setup task may reuse (core/podidentity.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

from airflow_kruise_chain.core import (
    ChainSpec,
    StageSpec,
    build_chain_pod,
)
from airflow_kruise_chain.core.podidentity import SPEC_HASH_ANNOTATION, spec_hash, stamp, unusable_reason
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.wire import GENERATION_ANNOTATION


def built(image: str = "busybox:1.36") -> tuple[dict[str, Any]]:
    """What setup builds: the chain pod alone (the runner comes from its init container)."""
    spec = ChainSpec(name="c", namespace="default", stages=[StageSpec("one", image, ["true"])])
    pod = build_chain_pod(spec, pod_name="c-pod", dag_id="d", run_id="r", first_images=spec.first_images)
    return (pod,)


def running(pod: dict[str, Any], waiting: str | None = None, generation: int = 0) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"][GENERATION_ANNOTATION] = str(generation)
    state = {"waiting": {"reason": waiting, "message": "not found"}} if waiting else {"running": {}}
    pod["status"] = {
        "phase": "Pending" if waiting else "Running",
        "containerStatuses": [{"name": s, "state": state} for s in ("slot-a", "slot-b")],
    }
    return pod


def test_the_hash_is_stable_and_follows_what_setup_builds() -> None:
    assert spec_hash(*built()) == spec_hash(*built())
    assert spec_hash(*built()) != spec_hash(*built("alpine:3.20"))


def test_a_healthy_pod_built_from_the_same_chain_is_reused() -> None:
    (pod,) = built()
    digest = spec_hash(pod)
    assert unusable_reason(ChainPod.of(running(stamp(pod, digest))), digest) is None


def test_a_pod_built_from_another_definition_of_the_chain_is_replaced() -> None:
    old = stamp(*built()[:1], spec_hash(*built()))
    digest = spec_hash(*built("alpine:3.20"))
    reason = unusable_reason(ChainPod.of(running(old)), digest)
    assert reason and "another definition of the chain" in reason and digest in reason
    unstamped = running(built()[0])  # made before pods carried the hash
    assert SPEC_HASH_ANNOTATION not in unstamped["metadata"]["annotations"]
    assert "spec hash none" in (unusable_reason(ChainPod.of(unstamped), digest) or "")


def test_a_pod_whose_slot_never_started_is_replaced_until_a_stage_ran_in_it() -> None:
    (pod,) = built()
    digest = spec_hash(pod)
    reason = unusable_reason(ChainPod.of(running(stamp(pod, digest), waiting="ImagePullBackOff")), digest)
    assert reason == "slot-a cannot start: ImagePullBackOff: not found"
    # once stages ran, the scratch holds their data: a stage's image that fails is that stage's failure
    used = running(stamp(pod, digest), waiting="ImagePullBackOff", generation=2)
    assert unusable_reason(ChainPod.of(used), digest) is None
    # waiting for an ordinary reason is no reason to replace it
    assert (
        unusable_reason(ChainPod.of(running(stamp(pod, digest), waiting="ContainerCreating")), digest) is None
    )


def test_a_lost_pod_is_replaced() -> None:
    (pod,) = built()
    digest = spec_hash(pod)
    failed = running(stamp(pod, digest))
    failed["status"]["phase"] = "Failed"
    assert unusable_reason(ChainPod.of(failed), digest) == "the chain pod is Failed"


def test_inputs_are_missing_for_predecessors_that_never_ran_in_the_pod() -> None:
    from airflow_kruise_chain.core.podidentity import missing_inputs
    from airflow_kruise_chain.core.wire import stage_annotation

    pod = running(built()[0])
    assert missing_inputs(ChainPod.of(pod), ["one", "two"]) == ["one", "two"]
    record = {"generation": 1, "slot": "slot-a", "image": "busybox:1.36", "try": 1}
    pod["metadata"]["annotations"][stage_annotation("one")] = json.dumps(record)
    assert missing_inputs(ChainPod.of(pod), ["one", "two"]) == ["two"]


def test_retiring_a_record_is_a_conditional_patch_of_that_annotation_only() -> None:
    from airflow_kruise_chain.core.podidentity import generation_identity, retire_patch
    from airflow_kruise_chain.core.wire import stage_annotation

    pod = running(built()[0])
    pod["metadata"].update(uid="u-1", resourceVersion="42")
    assert retire_patch(ChainPod.of(pod), "one") == {
        "metadata": {"resourceVersion": "42", "annotations": {stage_annotation("one"): None}}
    }
    assert generation_identity(ChainPod.of(pod), 3) == {"pod_uid": "u-1", "generation": 3}
