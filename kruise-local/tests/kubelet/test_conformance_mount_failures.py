"""How the kubelet reports a pod whose Secret or ConfigMap is missing, through the official client: the
volume manager's `FailedMount` events (`mounting.py`: each volume's mount retried on the
`nestedpendingoperations` back-off, 500 ms doubling, one event per failure aggregated into a growing `count`,
no sandbox before the volumes are mounted) and the container runtime's `CreateContainerConfigError`
(`kubelet_env.py`: `makeEnvironmentVariables`' errors, the configMap and secret managers' NotFound), tried
again when the pod worker syncs again after the failed sync (`backoff.sync_error_requeue`: 10-15 s).

Timing is asserted only as lower bounds the back-off guarantees (a loaded machine can only be later) and
generous upper bounds."""

from __future__ import annotations

import time

from kruise_local.testing import container, pod_body, running, wait_for


def _failed_mounts(core, namespace: str, pod: str) -> dict[str, int]:
    """message -> count of the pod's FailedMount events."""
    events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    return {e.message: e.count for e in events if e.reason == "FailedMount"}


def test_a_missing_secret_fails_the_mount_at_once_then_again_on_the_back_off(core, namespace):
    volumes = [{"name": "creds", "secret": {"secretName": "no-such-creds"}}, {"name": "tmp", "emptyDir": {}}]
    spec = container("c", "sleep 30", volumeMounts=[{"name": "creds", "mountPath": "/creds"}])
    created = time.monotonic()
    core.create_namespaced_pod(namespace, pod_body("p", spec, volumes=volumes))
    message = 'MountVolume.SetUp failed for volume "creds" : secret "no-such-creds" not found'
    wait_for(lambda: message in _failed_mounts(core, namespace, "p"), timeout=15, what="FailedMount")
    status = core.read_namespaced_pod("p", namespace).status
    assert status.pod_ip is None  # `SyncPod` waits for the volumes before it creates the sandbox
    ready = {c.type: c.status for c in status.conditions or []}
    assert ready.get("PodReadyToStartContainers") == "False"

    wait_for(lambda: _failed_mounts(core, namespace, "p")[message] >= 4, timeout=60, what="4 failed mounts")
    assert time.monotonic() - created >= 0.5 + 1 + 2  # tries at 0, 0.5, 1.5 and 3.5 s at the earliest
    assert len(_failed_mounts(core, namespace, "p")) == 1  # one aggregated event, its count growing

    secret = {"metadata": {"name": "no-such-creds"}, "stringData": {"k": "v"}}
    core.create_namespaced_secret(namespace, secret)
    wait_for(lambda: running(core, namespace, "p", "c"), timeout=60, what="running once the secret exists")


def test_each_volume_is_mounted_on_its_own(core, namespace):
    """One operation per volume: two missing objects are two events from the first try on."""
    volumes = [
        {"name": "a", "secret": {"secretName": "missing-a"}},
        {"name": "b", "configMap": {"name": "missing-b"}},
    ]
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30"), volumes=volumes))
    wanted = {
        'MountVolume.SetUp failed for volume "a" : secret "missing-a" not found',
        'MountVolume.SetUp failed for volume "b" : configmap "missing-b" not found',
    }
    wait_for(lambda: set(_failed_mounts(core, namespace, "p")) == wanted, timeout=15, what="two FailedMount")


def _waiting(core, namespace: str, pod: str) -> tuple[str, str] | None:
    statuses = core.read_namespaced_pod(pod, namespace).status.container_statuses or []
    waiting = statuses[0].state.waiting if statuses else None
    return (waiting.reason, waiting.message) if waiting else None


def test_a_config_map_key_ref_to_a_missing_config_map_names_the_config_map(core, namespace):
    """`makeEnvironmentVariables` returns the configMap manager's NotFound as it is (`configmap "x" not
    found`), not the missing-key error, which is for a configMap that exists."""
    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x"}}}]
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "echo $X; sleep 30", env=env)))
    expected = ("CreateContainerConfigError", 'configmap "settings" not found')
    wait_for(lambda: _waiting(core, namespace, "p") == expected, timeout=15, what=str(expected))
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
    failed = [e for e in events if e.reason == "Failed"]
    assert [e.message for e in failed] == ['Error: configmap "settings" not found']
    assert failed[0].involved_object.field_path == "spec.containers{c}"
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"y": "1"}})
    expected = ("CreateContainerConfigError", f"couldn't find key x in ConfigMap {namespace}/settings")
    wait_for(lambda: _waiting(core, namespace, "p") == expected, timeout=30, what=str(expected))


def test_a_container_config_error_is_tried_again_at_the_worker_s_requeue(core, namespace):
    """The failed start is a sync error: the pod worker syncs again `backOffPeriod` (10 s, jittered up to
    15 s) later (`completeWork`), not at once: the second Failed event comes 10 s after the first at the
    earliest; a Secret created meanwhile is found then."""
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "x"}}}]
    created = time.monotonic()
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "echo $X; sleep 30", env=env)))

    def failures() -> int:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
        return sum(e.count or 1 for e in events if e.reason == "Failed")

    wait_for(lambda: failures() >= 1, timeout=15, what="the first Failed event")
    wait_for(lambda: failures() >= 2, timeout=40, what="the second try")
    assert time.monotonic() - created >= 10
    secret = {"metadata": {"name": "later"}, "stringData": {"x": "here"}}
    core.create_namespaced_secret(namespace, secret)
    wait_for(lambda: running(core, namespace, "p", "c"), timeout=40, what="running at the next try")
