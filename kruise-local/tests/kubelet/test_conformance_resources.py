"""Conformance of the local cluster's resource accounting with Kubernetes 1.35, through the real client:
the scheduler's resource fit (`noderesources/fit.go`), the kubelet's resize admission (`allocation_manager.go`
`handlePodResourcesResize`: Deferred / Infeasible, PodResizeInProgress, allocatedResources), the memory limit
a resize applies to the running processes, and the 1.34+ kubelet check that refuses to lower a memory limit
below the usage (`validateMemoryResizeAction`)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, status_of, wait_for
from kubernetes import client, config, watch
from kubernetes.client import ApiException

GI = 2**30
MI = 2**20
ALLOCATE = 'awk \'BEGIN { s = "x"; for (i = 0; i < 27; i++) s = s s; print length(s); system("sleep 120") }\''
"""hold ~128 MiB (a 2^27-byte string) until killed"""


def _client(c: LocalCluster, tmp: Path) -> client.CoreV1Api:
    api = config.new_client_from_config(config_file=str(c.write_kubeconfig(tmp / "kubeconfig")))
    return client.CoreV1Api(api)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A one-node cluster whose node has 1 GiB of allocatable memory."""
    c = LocalCluster(
        ClusterConfig(
            profile="fast",
            allocatable={"cpu": "2", "memory": "1Gi", "pods": "110"},
            root=str(tmp_path_factory.mktemp("small")),
        )
    )
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def score(small: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> client.CoreV1Api:
    return _client(small, tmp_path_factory.mktemp("small-kube"))


@pytest.fixture
def ns(score: client.CoreV1Api) -> Iterator[str]:
    name = f"r-{uuid.uuid4().hex[:8]}"
    score.create_namespace({"metadata": {"name": name}})
    yield name
    score.delete_namespace(name)


def memory(amount: str, limit: str | None = None) -> dict[str, dict[str, str]]:
    return {"requests": {"memory": amount}, "limits": {"memory": limit or amount}}


def resize(core: client.CoreV1Api, ns: str, name: str, cname: str, resources: dict) -> None:
    core.patch_namespaced_pod_resize(
        name, ns, {"spec": {"containers": [{"name": cname, "resources": resources}]}}
    )


def condition(core: client.CoreV1Api, ns: str, name: str, ctype: str):
    pod = core.read_namespaced_pod(name, ns)
    return next((c for c in pod.status.conditions or [] if c.type == ctype), None)


def test_node_allocatable_is_configurable_per_node(tmp_path):
    c = LocalCluster(
        ClusterConfig(
            profile="fast",
            nodes=2,
            allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"},
            node_allocatable={"node-1": {"memory": "2Gi"}},
            root=str(tmp_path / "root"),
        )
    ).start()
    try:
        nodes = {n.metadata.name: n.status.allocatable for n in _client(c, tmp_path).list_node().items}
    finally:
        c.stop()
    assert nodes == {
        "node-0": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "node-1": {"cpu": "4", "memory": "2Gi", "pods": "110"},
    }


def test_a_pod_that_does_not_fit_stays_pending_until_capacity_frees(score, ns):
    """`fit.go`: requests beyond what the node has left -> Pending, PodScheduled False/Unschedulable,
    `Insufficient memory`, event FailedScheduling; scheduled once the pod holding the memory is gone."""
    score.create_namespaced_pod(ns, pod_body("big", container("c", "sleep 120", resources=memory("700Mi"))))
    wait_for(lambda: running(score, ns, "big", "c"), what="big running")
    score.create_namespaced_pod(ns, pod_body("late", container("c", "sleep 120", resources=memory("500Mi"))))
    cond = wait_for(lambda: condition(score, ns, "late", "PodScheduled"), what="PodScheduled")
    assert (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cond.message.startswith("0/1 nodes are available: 1 Insufficient memory."), cond.message
    pod = score.read_namespaced_pod("late", ns)
    assert pod.status.phase == "Pending" and pod.spec.node_name is None
    events = score.list_namespaced_event(ns, field_selector="involvedObject.name=late").items
    assert any(e.reason == "FailedScheduling" and "Insufficient memory" in e.message for e in events)

    score.delete_namespaced_pod("big", ns, grace_period_seconds=0)
    wait_for(lambda: running(score, ns, "late", "c"), timeout=30, what="late scheduled and running")
    assert condition(score, ns, "late", "PodScheduled").status == "True"


def test_a_pod_larger_than_the_node_never_schedules(score, ns):
    score.create_namespaced_pod(ns, pod_body("huge", container("c", "sleep 1", resources=memory("2Gi"))))
    cond = wait_for(lambda: condition(score, ns, "huge", "PodScheduled"), what="PodScheduled")
    assert cond.reason == "Unschedulable" and "1 Insufficient memory" in cond.message


def test_a_resize_beyond_the_node_is_infeasible(score, ns):
    score.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 120", resources=memory("64Mi"))))
    first = wait_for(lambda: running(score, ns, "p", "c"), what="running")
    resize(score, ns, "p", "c", memory("2Gi"))
    cond = wait_for(lambda: condition(score, ns, "p", "PodResizePending"), what="PodResizePending")
    assert (cond.status, cond.reason) == ("True", "Infeasible")
    assert cond.message == f"Node didn't have enough capacity: memory, requested: {2 * GI}, capacity: {GI}"
    cs = status_of(score, ns, "p", "c")
    assert cs.allocated_resources["memory"] == "64Mi" and cs.resources.limits["memory"] == "64Mi"
    assert cs.container_id == first.container_id
    events = score.list_namespaced_event(ns, field_selector="involvedObject.name=p").items
    assert any(e.reason == "ResizeInfeasible" for e in events)

    resize(score, ns, "p", "c", memory("128Mi"))  # a feasible one replaces it
    wait_for(
        lambda: (s := status_of(score, ns, "p", "c")) and s.resources.limits["memory"] == "128Mi",
        what="the feasible resize applied",
    )
    assert condition(score, ns, "p", "PodResizePending") is None


def test_a_resize_that_does_not_fit_now_is_deferred_then_applied(score, ns):
    score.create_namespaced_pod(ns, pod_body("hog", container("c", "sleep 120", resources=memory("600Mi"))))
    score.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 120", resources=memory("100Mi"))))
    wait_for(lambda: running(score, ns, "hog", "c") and running(score, ns, "p", "c"), what="both running")
    resize(score, ns, "p", "c", memory("600Mi"))
    cond = wait_for(lambda: condition(score, ns, "p", "PodResizePending"), what="PodResizePending")
    assert (cond.status, cond.reason) == ("True", "Deferred")
    assert cond.message == (
        f"Node didn't have enough resource: memory, requested: {600 * MI}, used: {600 * MI}, capacity: {GI}"
    )
    assert status_of(score, ns, "p", "c").allocated_resources["memory"] == "100Mi"
    # the scheduler counts the desired requests of a deferred resize: no room for a 300Mi pod now
    score.create_namespaced_pod(ns, pod_body("third", container("c", "sleep 1", resources=memory("300Mi"))))
    assert wait_for(lambda: condition(score, ns, "third", "PodScheduled"), what="third").status == "False"

    score.delete_namespaced_pod("hog", ns, grace_period_seconds=0)
    cs = wait_for(
        lambda: (s := status_of(score, ns, "p", "c")) and s.allocated_resources["memory"] == "600Mi" and s,
        timeout=30,
        what="the deferred resize admitted",
    )
    wait_for(lambda: condition(score, ns, "p", "PodResizePending") is None, what="pending cleared")
    wait_for(lambda: condition(score, ns, "p", "PodResizeInProgress") is None, what="in progress cleared")
    assert cs.restart_count == 0


def test_an_admitted_resize_is_in_progress_until_the_container_runs_with_it(score, ns):
    """Seen through a watch: first the new allocation with PodResizeInProgress and the old actual resources,
    then the new actual resources and no resize condition, the container never restarted."""
    score.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 120", resources=memory("64Mi"))))
    first = wait_for(lambda: running(score, ns, "p", "c"), what="running")
    version = score.read_namespaced_pod("p", ns).metadata.resource_version
    resize(score, ns, "p", "c", memory("128Mi"))
    seen = []
    for event in watch.Watch().stream(
        score.list_namespaced_pod,
        ns,
        field_selector="metadata.name=p",
        resource_version=version,
        timeout_seconds=30,
    ):
        pod = event["raw_object"]
        cs = pod["status"]["containerStatuses"][0]
        conditions = {c["type"] for c in pod["status"].get("conditions") or []}
        seen.append((cs.get("allocatedResources"), cs["resources"]["limits"]["memory"], conditions))
        if cs["resources"]["limits"]["memory"] == "128Mi" and "PodResizeInProgress" not in conditions:
            break
    in_progress = [s for s in seen if "PodResizeInProgress" in s[2]]
    assert in_progress, seen
    assert in_progress[0][0] == {"memory": "128Mi"} and in_progress[0][1] == "64Mi"
    assert seen[-1][0] == {"memory": "128Mi"} and "PodResizePending" not in seen[-1][2]
    assert running(score, ns, "p", "c").container_id == first.container_id


def test_lowering_a_memory_limit_below_the_usage_is_refused_and_retried(score, ns):
    """1.34+: a NotRequired memory limit decrease is allowed by the API server; the kubelet does not apply
    it while the container uses at least the new limit (PodResizeInProgress reason Error), and tries again."""
    score.create_namespaced_pod(ns, pod_body("p", container("c", ALLOCATE, resources=memory("512Mi"))))
    first = wait_for(lambda: running(score, ns, "p", "c"), what="running")
    wait_for(
        lambda: (m := score.read_namespaced_pod_log("p", ns, container="c")) and "134217728" in m,
        what="memory held",
    )
    resize(score, ns, "p", "c", memory("64Mi"))
    cond = wait_for(
        lambda: (c := condition(score, ns, "p", "PodResizeInProgress")) and c.reason == "Error" and c,
        what="PodResizeInProgress Error",
    )
    assert re.fullmatch(
        r'attempting to set container "c" memory limit \(67108864\) below current usage \(\d+\)', cond.message
    ), cond.message
    cs = running(score, ns, "p", "c")
    assert cs.container_id == first.container_id, "the container was not OOM-killed"
    assert cs.resources.limits["memory"] == "512Mi" and cs.allocated_resources["memory"] == "64Mi"

    resize(score, ns, "p", "c", memory("256Mi"))  # above the usage: applied
    wait_for(
        lambda: (s := running(score, ns, "p", "c")) and s.resources.limits["memory"] == "256Mi",
        what="256Mi applied",
    )
    wait_for(lambda: condition(score, ns, "p", "PodResizeInProgress") is None, what="in progress cleared")
    assert running(score, ns, "p", "c").container_id == first.container_id


def test_a_lowered_limit_applies_to_the_running_processes(small, score, ns):
    """After a resize down, the container is OOM-killed when it exceeds its new limit."""
    script = f"while [ ! -e /w/go ]; do sleep 0.05; done; {ALLOCATE}"
    spec = container("c", script, resources=memory("512Mi"), volumeMounts=[{"name": "w", "mountPath": "/w"}])
    score.create_namespaced_pod(
        ns, pod_body("p", spec, restart="Never", volumes=[{"name": "w", "emptyDir": {}}])
    )
    wait_for(lambda: running(score, ns, "p", "c"), what="running")
    resize(score, ns, "p", "c", memory("64Mi"))
    wait_for(
        lambda: (s := running(score, ns, "p", "c")) and s.resources.limits["memory"] == "64Mi",
        what="64Mi applied",
    )
    uid = score.read_namespaced_pod("p", ns).metadata.uid
    (small.kubelet.workers[uid].volumes["w"] / "go").write_text("")
    cs = wait_for(
        lambda: (s := status_of(score, ns, "p", "c")) and s.state.terminated and s, what="terminated"
    )
    assert cs.state.terminated.reason == "OOMKilled"


def test_a_resize_of_a_container_not_running_applies_at_its_next_start(score, ns):
    spec = container("c", "sleep 0.2; exit 1", resources=memory("64Mi"))
    score.create_namespaced_pod(ns, pod_body("p", spec, restart="OnFailure"))
    wait_for(lambda: (s := status_of(score, ns, "p", "c")) and s.restart_count >= 1, what="a restart")
    resize(score, ns, "p", "c", memory("96Mi"))
    cs = wait_for(
        lambda: (s := status_of(score, ns, "p", "c")) and s.allocated_resources["memory"] == "96Mi" and s,
        what="allocated",
    )
    first_count = cs.restart_count
    cs = wait_for(
        lambda: (
            (s := status_of(score, ns, "p", "c"))
            and s.restart_count > first_count
            and s.resources.limits["memory"] == "96Mi"
            and s
        ),
        timeout=60,
        what="started again with the new limit",
    )


def test_a_resize_may_not_change_the_qos_class(score, ns):
    guaranteed = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
    score.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 60", resources=guaranteed)))
    with pytest.raises(ApiException) as err:
        resize(score, ns, "p", "c", {"requests": {"memory": "32Mi"}})
    assert err.value.status == 422
    assert "Pod QOS Class may not change as a result of resizing" in err.value.body


def test_without_in_place_resize_the_subresource_is_not_served(tmp_path):
    c = LocalCluster(ClusterConfig(profile="fast", kubernetes_version="1.32.4", root=str(tmp_path / "r")))
    c.start()
    try:
        core = _client(c, tmp_path)
        assert client.VersionApi(core.api_client).get_code().git_version.startswith("v1.32.4")
        core.create_namespaced_pod(
            "default", pod_body("p", container("c", "sleep 30", resources=memory("64Mi")))
        )
        with pytest.raises(ApiException) as err:
            resize(core, "default", "p", "c", memory("128Mi"))
        assert err.value.status == 404
        resources = {r.name for r in core.get_api_resources().resources}
        assert "pods/resize" not in resources and "pods/status" in resources
    finally:
        c.stop()


def test_a_resize_with_a_stale_resource_version_is_a_conflict(score, ns):
    """A patch body's metadata.resourceVersion is a precondition on the resize subresource too (409)."""
    score.create_namespaced_pod(ns, pod_body("p", container("c", "sleep 60", resources=memory("64Mi"))))
    stale = score.read_namespaced_pod("p", ns).metadata.resource_version
    score.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"moved": "on"}}})
    body = {
        "metadata": {"resourceVersion": stale},
        "spec": {"containers": [{"name": "c", "resources": memory("96Mi")}]},
    }
    with pytest.raises(ApiException) as err:
        score.patch_namespaced_pod_resize("p", ns, body)
    assert err.value.status == 409
    assert score.read_namespaced_pod("p", ns).spec.containers[0].resources.requests["memory"] == "64Mi"
    # with the version just read it goes through, but the kubelet's status writes (the pod starting) move the
    # version on too: read again on a conflict, as client-go's retry.RetryOnConflict does
    for _ in range(20):
        body["metadata"]["resourceVersion"] = score.read_namespaced_pod("p", ns).metadata.resource_version
        try:
            score.patch_namespaced_pod_resize("p", ns, body)
            break
        except ApiException as e:
            assert e.status == 409, e
    else:
        pytest.fail("the resize conflicted 20 times in a row")
    assert score.read_namespaced_pod("p", ns).spec.containers[0].resources.requests["memory"] == "96Mi"
