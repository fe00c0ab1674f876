"""`core/startup.py`: what a starting chain pod's snapshots and events mean (StartupWatch, no I/O), and
`wait_started` over a fake API (no events permission, the timeout's message)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kruise_chain.core.errors import PodStartError, StageTimeoutError
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.startup import StartupWatch, wait_started
from tests.unit.podfactory import chain_pod, running, waiting

POD = chain_pod(phase="Pending")
USERS = {("secret", "creds"): ["load", "save"], ("configMap", "settings"): ["load"]}


def watch(**kw: Any) -> StartupWatch:
    return StartupWatch("chains", USERS, **kw)


def event(reason: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message}


def test_a_missing_secret_volume_names_the_secret_its_readers_and_the_fix() -> None:
    said = 'MountVolume.SetUp failed for volume "kc-secret-1" : secret "creds" not found'
    problem = watch().event(POD, event("FailedMount", said), 0)
    assert problem is not None and problem.reason == "FailedMount" and problem.said == said
    assert (
        problem.what == "Secret 'creds' does not exist in namespace 'chains' (read by stage 'load', 'save')"
    )
    assert "kubectl create secret generic creds -n chains --from-literal=KEY=VALUE" in problem.fix


@pytest.mark.parametrize(
    ("error", "what"),
    [
        ('configmap "settings" not found', "ConfigMap 'settings' does not exist"),
        ('configmaps "settings" not found', "ConfigMap 'settings' does not exist"),  # a projected source
        ('secrets "other" not found', "Secret 'other' does not exist in namespace 'chains'"),
    ],
)
def test_each_not_found_of_the_volume_plugins_is_named(error: str, what: str) -> None:
    problem = watch().event(
        POD, event("FailedMount", f'MountVolume.SetUp failed for volume "v" : {error}'), 0
    )
    assert problem is not None and problem.what.startswith(what)


def test_a_missing_key_of_a_secret_volume_names_the_secret_from_the_pod_spec() -> None:
    raw = dict(POD.raw)
    raw["spec"] = {**raw["spec"], "volumes": [{"name": "v", "secret": {"secretName": "creds", "items": []}}]}
    said = 'MountVolume.SetUp failed for volume "v" : references non-existent secret key: token'
    problem = watch().event(ChainPod.of(raw), event("FailedMount", said), 0)
    assert problem is not None
    assert problem.what.startswith("Secret 'creds' in namespace 'chains' has no key 'token'")


def test_a_mount_failure_that_may_pass_is_not_a_problem_but_is_said_at_the_timeout() -> None:
    said = 'MountVolume.SetUp failed for volume "data" : rpc error: code = DeadlineExceeded'
    w = watch()
    assert w.event(POD, event("FailedMount", said), 0) is None
    assert w.timeout_hint() == f"; the cluster said: FailedMount: {said}"


@pytest.mark.parametrize(
    ("reason", "message", "what"),
    [
        ("CreateContainerConfigError", "couldn't find key k in Secret chains/creds", "Secret 'creds' in"),
        ("CreateContainerConfigError", 'configmap "settings" not found', "ConfigMap 'settings' does not"),
        (
            "CreateContainerConfigError",
            'container has runAsNonRoot and image will run as root (pod: "p_chains(u)", container: slot-a)',
            "container slot-a would run as root",
        ),
        ("ErrImagePull", "not found", "container slot-a cannot pull its image"),
        ("CrashLoopBackOff", "back-off 10s", "container slot-a cannot start"),
    ],
)
def test_a_slot_that_cannot_start_is_named(reason: str, message: str, what: str) -> None:
    pod = chain_pod(phase="Pending", slots={"slot-a": waiting(reason, message=message, image="acme/x:1")})
    problem = watch().pod(pod, 0)
    assert problem is not None and problem.reason == reason and problem.what.startswith(what)
    assert "(acme/x:1)" in problem.what


def test_creating_and_initializing_are_no_problem() -> None:
    pod = chain_pod(phase="Pending", slots={s: waiting("PodInitializing") for s in ("slot-a", "slot-b")})
    assert watch().pod(pod, 0) is None


def unschedulable(message: str = "0/1 nodes are available: 1 Insufficient memory.") -> ChainPod:
    raw = dict(POD.raw)
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    raw["status"] = {"phase": "Pending", "conditions": [condition]}
    return ChainPod.of(raw)


def test_no_node_is_a_problem_once_the_scale_up_wait_passed() -> None:
    w = watch(scale_up_wait=30)
    assert w.pod(unschedulable(), 100) is None
    assert w.overdue(129) is None
    problem = w.overdue(130)
    assert (
        problem is not None and problem.reason == "FailedScheduling" and "Insufficient memory" in problem.said
    )
    assert "lower the largest stage's requests" in problem.fix and "scale_up_wait" in problem.fix


def test_a_triggered_scale_up_is_waited_for_and_a_refused_one_is_not() -> None:
    w = watch(scale_up_wait=30)
    w.pod(unschedulable(), 0)
    assert (
        w.event(POD, event("TriggeredScaleUp", "pod triggered scale-up: [{pool 1->2 (max: 3)}]"), 1) is None
    )
    assert w.overdue(1000) is None
    refused = watch(scale_up_wait=30)
    refused.pod(unschedulable(), 0)
    problem = refused.event(POD, event("NotTriggerScaleUp", "pod didn't trigger scale-up: max size"), 1)
    assert problem is not None and problem.reason == "NotTriggerScaleUp"
    assert "Insufficient memory" in problem.said and "max size" in problem.said


def test_a_missing_claim_is_a_problem_at_once() -> None:
    said = '0/1 nodes are available: persistentvolumeclaim "data" not found.'
    problem = watch().pod(unschedulable(said), 0)
    assert problem is not None and problem.what.startswith("PersistentVolumeClaim 'data' does not exist")


def test_placement_fixes_follow_the_scheduler_s_reason() -> None:
    for said, fix in (
        ("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.", "node_selector"),
        ("0/1 nodes are available: 1 node(s) had untolerated taint {x: y}.", "tolerations"),
    ):
        w = watch(scale_up_wait=0)
        w.pod(unschedulable(said), 0)
        problem = w.overdue(0)
        assert problem is not None and fix in problem.fix


class FakeApi:
    """One pod that stays Pending; events that the identity may not list."""

    def __init__(self, pod: ChainPod) -> None:
        self.pod = pod

    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        return self.pod

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]:
        yield self.pod

    def pod_events(self, namespace: str, uid: str) -> list[dict[str, Any]] | None:
        return None


def test_without_events_the_timeout_says_where_to_look() -> None:
    said: list[str] = []
    with pytest.raises(StageTimeoutError) as timeout:
        wait_started(FakeApi(POD), "p", "chains", 0.01, watch(), log=lambda *a: said.append(a[0] % a[1:]))
    assert "kubectl get events -n chains --field-selector involvedObject.name=p" in str(timeout.value)
    assert said == ["cannot list events in chains (docs/rbac.md): what is missing is named at the timeout"]


def test_an_unschedulable_pod_fails_with_the_scheduler_s_words() -> None:
    with pytest.raises(PodStartError) as failed:
        wait_started(FakeApi(unschedulable()), "p", "chains", 10, watch(scale_up_wait=0), log=lambda *a: None)
    assert failed.value.reason == "FailedScheduling"
    assert str(failed.value).startswith("chain pod chains/p cannot start: no node can run the chain pod")


def test_the_pod_is_started_once_both_runners_serve_their_slots_before_ready() -> None:
    """A slot's startup probe (`runner --up`) passes once its runner serves it; the kubelet shows `started`
    at once (`SetContainerStartup`), Ready only from the pod's next sync (`UpdatePodStatus`), a relist
    later: the start waits for `started` on both running slots, not for Ready."""
    slots = {s: running(f"containerd://{s}", started=True) for s in ("slot-a", "slot-b")}
    pod = chain_pod(slots=slots)
    assert wait_started(FakeApi(pod), "p", "chains", 5, watch(), log=lambda *a: None) is pod
    slots["slot-b"] = running("containerd://slot-b", started=False)
    with pytest.raises(StageTimeoutError):
        wait_started(FakeApi(chain_pod(slots=slots)), "p", "chains", 0.2, watch(), log=lambda *a: None)
