"""Conformance of the local cluster's pods and kubelet with the Kubernetes facts in DESIGN.md,
driven only through the real `kubernetes` client."""

from __future__ import annotations

import json
import time

import pytest
from kruise_local.testing import container, gone, log_of, pod_body, read_log, running, status_of, wait_for
from kubernetes.client import ApiException


def test_discovery_lists_core_and_kruise(api_client, core):
    from kubernetes import client

    version = client.VersionApi(api_client).get_code()
    assert version.major == "1"
    resources = {r.name for r in core.get_api_resources().resources}
    assert {"pods", "pods/log", "pods/status", "pods/resize", "configmaps", "events", "nodes"} <= resources
    groups = {
        g.name: [v.version for v in g.versions] for g in client.ApisApi(api_client).get_api_versions().groups
    }
    assert set(groups["apps.kruise.io"]) == {"v1alpha1", "v1beta1"}
    assert "metrics.k8s.io" in groups


def test_patching_a_container_command_is_refused_with_422(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod(
            "p", namespace, {"spec": {"containers": [{"name": "c", "command": ["true"]}]}}
        )
    assert err.value.status == 422
    body = json.loads(err.value.body)
    assert body["reason"] == "Invalid"
    assert "pod updates may not change fields other than" in body["message"]


def test_adding_a_container_is_refused(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("p", namespace, {"spec": {"containers": [container("d", "sleep 1")]}})
    assert err.value.status == 422


def test_image_patch_restarts_a_running_container(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "echo run-$HOSTNAME; sleep 30")))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="container running")
    assert first.restart_count == 0
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    )
    second = wait_for(
        lambda: (cs := running(core, namespace, "p", "c")) and cs.container_id != first.container_id and cs,
        what="restart after image patch",
    )
    assert second.restart_count == 1
    assert second.image.endswith("alpine:3.20")
    assert second.last_state.terminated is not None
    assert second.last_state.terminated.container_id == first.container_id
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p")
    assert any(e.reason == "Killing" and "definition changed" in e.message for e in events.items)


def test_kubelet_restarts_at_once_after_its_own_kill(cluster, core, namespace, monkeypatch):
    """The exit-detection (PLEG relist) delay models noticing an exit the kubelet did not cause; when it
    kills a container for a spec change itself, it starts the new one in the same sync."""
    from kruise_local.profiles import Profile

    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="container running")
    monkeypatch.setattr(cluster.kubelet, "profile", Profile("slow-relist", exit_detection=60.0))
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    )
    wait_for(
        lambda: (cs := running(core, namespace, "p", "c")) and cs.container_id != first.container_id,
        timeout=30,
        what="restart well before the 60 s relist delay",
    )


def test_same_image_by_digest_restarts_without_a_pull(core, namespace):
    """`repo:tag` and `repo:tag@sha256:D` name the same image: patching one to the other changes the spec
    (kill and restart, no crash-loop back-off) but needs no pull, since the runtime resolves the digest."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30", image="busybox:1.36")))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="container running")
    digest = first.image_id.split("@", 1)[1]
    assert digest.startswith("sha256:")
    ids = [first.container_id]
    for image in (f"busybox:1.36@{digest}", "busybox:1.36", f"busybox:1.36@{digest}"):
        core.patch_namespaced_pod("p", namespace, {"spec": {"containers": [{"name": "c", "image": image}]}})
        cs = wait_for(
            lambda: (cs := running(core, namespace, "p", "c")) and cs.container_id not in ids and cs,
            timeout=8,  # a crash-loop back-off would take 10 s or more
            what=f"restart with {image}",
        )
        ids.append(cs.container_id)
        assert cs.image_id == first.image_id
    assert cs.restart_count == 3
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p")
    messages = [e.message for e in events.items]
    assert not any(m.startswith('Pulling image "busybox:1.36@') for m in messages), messages
    # 1.35 (the default): KubeletEnsureSecretPulledImages is on (image_manager.go EnsureImageExists)
    present = (
        f'Container image "busybox:1.36@{digest}" already present on machine and can be accessed by the pod'
    )
    assert present in messages


def test_unknown_digest_is_not_pulled(core, namespace):
    bad = "busybox:1.36@sha256:" + "0" * 64
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30", image=bad)))
    wait_for(
        lambda: (
            (cs := status_of(core, namespace, "p", "c"))
            and (w := cs.state.waiting)
            and w.reason in ("ErrImagePull", "ImagePullBackOff")
        ),
        what="ErrImagePull for a digest the tag does not have",
    )


def test_exited_container_under_never_is_not_restarted_on_image_change(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "exit 0"), restart="Never"))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Succeeded", what="Succeeded")
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
    )
    time.sleep(1.0)
    pod = core.read_namespaced_pod("p", namespace)
    cs = pod.status.container_statuses[0]
    assert pod.status.phase == "Succeeded"
    assert cs.restart_count == 0
    assert cs.state.terminated is not None and cs.state.terminated.exit_code == 0


def test_on_failure_restarts_only_non_zero_exits(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("ok", container("c", "exit 0"), restart="OnFailure"))
    core.create_namespaced_pod(namespace, pod_body("bad", container("c", "exit 3"), restart="OnFailure"))
    wait_for(
        lambda: core.read_namespaced_pod("ok", namespace).status.phase == "Succeeded", what="ok Succeeded"
    )
    wait_for(
        lambda: (
            (status_of(core, namespace, "bad", "c") or None)
            and status_of(core, namespace, "bad", "c").restart_count >= 1
        ),
        what="bad restarted",
    )
    assert status_of(core, namespace, "ok", "c").restart_count == 0


def test_always_restarts_then_crash_loop_backoff(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "exit 1")))
    cs = wait_for(
        lambda: (
            (s := status_of(core, namespace, "p", "c"))
            and s.state.waiting is not None
            and s.state.waiting.reason == "CrashLoopBackOff"
            and s
        ),
        what="CrashLoopBackOff",
    )
    assert cs.restart_count == 1  # first restart at once, the next one backs off 10 s
    assert cs.last_state.terminated.exit_code == 1
    assert "back-off 10s" in cs.state.waiting.message


def test_downward_api_env_is_resolved_when_the_container_starts(core, namespace, custom):
    key = "example.com/stage"
    spec = container(
        "c",
        'echo "stage=$STAGE"; sleep 30',
        env=[{"name": "STAGE", "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}}],
    )
    body = pod_body("p", spec)
    body["metadata"]["annotations"] = {key: "one"}
    core.create_namespaced_pod(namespace, body)
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    wait_for(lambda: "stage=one" in log_of(core, namespace, "p", "c"), what="log one")
    # same image, only annotations changed: the spec hash is unchanged, nothing restarts
    core.patch_namespaced_pod("p", namespace, {"metadata": {"annotations": {key: "two"}}})
    time.sleep(0.5)
    assert running(core, namespace, "p", "c").container_id == first.container_id
    # a CRR restarts it; the new instance resolves the annotation afresh
    custom.create_namespaced_custom_object(
        "apps.kruise.io",
        "v1alpha1",
        namespace,
        "containerrecreaterequests",
        {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "rerun"},
            "spec": {
                "podName": "p",
                "containers": [{"name": "c"}],
                "strategy": {"failurePolicy": "Fail"},
                "activeDeadlineSeconds": 30,
                "ttlSecondsAfterFinished": 60,
            },
        },
    )
    crr = wait_for(
        lambda: (
            (
                o := custom.get_namespaced_custom_object(
                    "apps.kruise.io", "v1alpha1", namespace, "containerrecreaterequests", "rerun"
                )
            )
            .get("status", {})
            .get("phase")
            == "Completed"
            and o
        ),
        what="CRR completed",
    )
    assert crr["status"]["containerRecreateStates"][0]["phase"] == "Succeeded"
    second = running(core, namespace, "p", "c")
    assert second.container_id != first.container_id and second.restart_count == 1
    wait_for(lambda: "stage=two" in log_of(core, namespace, "p", "c"), what="log two")


_DOWNWARD_READER = """
import os, time
path = "/podinfo/stage"
print("link", os.readlink(path), flush=True)
last = None
while True:
    value = open(path).read()
    if value != last:
        print("seen", len(value), "".join(sorted(set(value))), flush=True)
        last = value
    time.sleep(0.001)
"""


def test_downward_api_volume_files_follow_annotation_patches_atomically(core, namespace):
    """A pod update that changes a projected annotation rewrites the downwardAPI volume file while the
    container runs (no restart); the file is a symlink through `..data` that is swapped atomically, so a
    reader polling it sees each value whole, never a partial file."""
    key = "example.com/stage"
    size = 3000
    spec = {
        "name": "c",
        "image": "python:3.11-slim",
        "command": ["python", "-c", _DOWNWARD_READER],
        "volumeMounts": [{"name": "podinfo", "mountPath": "/podinfo"}],
    }
    volume = {
        "name": "podinfo",
        "downwardAPI": {
            "items": [{"path": "stage", "fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}]
        },
    }
    body = pod_body("p", spec, volumes=[volume])
    body["metadata"]["annotations"] = {key: "a" * size}
    core.create_namespaced_pod(namespace, body)
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    wait_for(lambda: f"seen {size} a" in log_of(core, namespace, "p", "c"), what="first value")
    for value in ("b" * size, "c" * size, "d" * size):
        core.patch_namespaced_pod("p", namespace, {"metadata": {"annotations": {key: value}}})
        wait_for(
            lambda v=value: f"seen {size} {v[0]}" in log_of(core, namespace, "p", "c"),
            what=f"{value[0]} seen",
        )
    lines = log_of(core, namespace, "p", "c").splitlines()
    assert lines[0] == "link ..data/stage"
    assert lines[1:] == [f"seen {size} {c}" for c in "abcd"]  # each value whole, in order, nothing partial
    cs = running(core, namespace, "p", "c")
    assert cs.container_id == first.container_id and cs.restart_count == 0


def test_projected_volume_joins_its_sources_and_follows_annotation_patches(core, namespace):
    """A projected volume (`pkg/volume/projected` `collectData`) holds the files of all its sources in one
    folder, each with its item's mode, else the volume's defaultMode; its downwardAPI files follow annotation
    patches while the container runs, as a downwardAPI volume's do; `kubectl describe` names only the source
    kinds (`printProjectedVolumeSource`)."""
    key = "example.com/stage"
    core.create_namespaced_config_map(
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"k": "from-cm"}},
    )
    field = {"fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}
    volume = {
        "name": "meta",
        "projected": {
            "defaultMode": 0o440,
            "sources": [
                {"downwardAPI": {"items": [{"path": "stage", **field}]}},
                {"configMap": {"name": "cm", "items": [{"key": "k", "path": "cm/k", "mode": 0o400}]}},
            ],
        },
    }
    script = (
        "stat -L -c '%n %a' /m/stage /m/cm/k; cat /m/cm/k; echo; "
        'while :; do echo "stage=$(cat /m/stage)"; sleep 0.1; done'
    )
    spec = container("c", script, volumeMounts=[{"name": "meta", "mountPath": "/m", "readOnly": True}])
    body = pod_body("p", spec, volumes=[volume])
    body["metadata"]["annotations"] = {key: "one"}
    core.create_namespaced_pod(namespace, body)
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    wait_for(lambda: "stage=one" in log_of(core, namespace, "p", "c"), what="first value")
    lines = log_of(core, namespace, "p", "c").splitlines()
    assert lines[:3] == ["/m/stage 440", "/m/cm/k 400", "from-cm"]
    core.patch_namespaced_pod("p", namespace, {"metadata": {"annotations": {key: "two"}}})
    wait_for(lambda: "stage=two" in log_of(core, namespace, "p", "c"), what="the patched value")
    cs = running(core, namespace, "p", "c")
    assert cs.container_id == first.container_id and cs.restart_count == 0
    projected = core.read_namespaced_pod("p", namespace).spec.volumes[0].projected
    assert projected.default_mode == 0o440 and len(projected.sources) == 2


def test_a_projected_volume_of_a_missing_configmap_fails_its_mount_with_the_api_s_error(core, namespace):
    """A projected configMap source that does not exist fails the mount with the API's NotFound message
    (`configmaps "x" not found`: `collectData` passes the client's error on), unless it is optional."""
    volume = {"name": "v", "projected": {"sources": [{"configMap": {"name": "missing"}}]}}
    spec = container("c", "sleep 30", volumeMounts=[{"name": "v", "mountPath": "/v"}])
    core.create_namespaced_pod(namespace, pod_body("p", spec, volumes=[volume]))

    def failed_mount() -> str:
        events = core.list_namespaced_event(namespace).items
        return next((e.message for e in events if e.reason == "FailedMount"), "")

    message = wait_for(failed_mount, what="FailedMount")
    assert message == 'MountVolume.SetUp failed for volume "v" : configmaps "missing" not found'
    optional = {"name": "v", "projected": {"sources": [{"configMap": {"name": "missing", "optional": True}}]}}
    core.create_namespaced_pod(namespace, pod_body("q", spec, volumes=[optional]))
    wait_for(lambda: running(core, namespace, "q", "c"), what="running with an optional missing source")


def test_termination_message_and_reason(core, namespace):
    spec = container("c", "echo done-42 > /dev/termination-log; exit 4")
    core.create_namespaced_pod(namespace, pod_body("p", spec, restart="Never"))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Failed", what="Failed")
    t = status_of(core, namespace, "p", "c").state.terminated
    assert (t.exit_code, t.reason, t.message.strip()) == (4, "Error", "done-42")


def test_readiness_probe_sets_ready(core, namespace):
    probe = {"exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]}, "periodSeconds": 1}
    core.create_namespaced_pod(
        namespace, pod_body("p", container("c", "sleep 1; touch /tmp/ready; sleep 30", readinessProbe=probe))
    )
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    assert status_of(core, namespace, "p", "c").ready is False
    wait_for(lambda: status_of(core, namespace, "p", "c").ready, what="ready")
    conds = {c.type: c.status for c in core.read_namespaced_pod("p", namespace).status.conditions}
    assert conds["Ready"] == "True" and conds["PodScheduled"] == "True"


def test_missing_image_goes_err_image_pull_then_backoff(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "true", image="nope/missing:1")))
    reasons = set()

    def seen() -> bool:
        cs = status_of(core, namespace, "p", "c")
        if cs is not None and cs.state.waiting is not None:
            reasons.add(cs.state.waiting.reason)
        return {"ErrImagePull", "ImagePullBackOff"} <= reasons

    wait_for(seen, what="ErrImagePull then ImagePullBackOff")
    events = core.list_namespaced_event(namespace).items
    assert {"Pulling", "Failed", "BackOff"} <= {e.reason for e in events}
    hint = "not in kruise-local's image catalogue: add it to images.yaml or pass --catalogue"
    assert any(e.reason == "Failed" and hint in e.message for e in events)
    # kuberuntime_container.go startContainer records "Error: %v" of every EnsureImageExists error, the
    # back-off's too (images.ErrImagePullBackOff): a Warning next to the image manager's Normal BackOff
    failed = {(e.type, e.message, e.involved_object.field_path) for e in events if e.reason == "Failed"}
    assert ("Warning", "Error: ErrImagePull", "spec.containers{c}") in failed
    wait_for(
        lambda: any(
            e.reason == "Failed" and e.type == "Warning" and e.message == "Error: ImagePullBackOff"
            for e in core.list_namespaced_event(namespace).items
        ),
        what="Failed: Error: ImagePullBackOff",
    )


def test_a_missing_images_pull_back_off_is_the_pods_own(core, namespace):
    """The kubelet keys an image pull's back-off by pod and image (image_manager.go EnsureImageExists:
    `backOffKey := fmt.Sprintf("%s_%s", pod.UID, container.Image)`): a pod that asks for an image another pod
    of the node backs off from pulls it itself (Pulling, ErrImagePull), not ImagePullBackOff at once."""
    image = "nope/missing:2"
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "true", image=image)))

    def reason(pod: str) -> str | None:
        cs = status_of(core, namespace, pod, "c")
        return cs.state.waiting.reason if cs is not None and cs.state.waiting is not None else None

    wait_for(lambda: reason("p") == "ImagePullBackOff", what="p backing off (10 s)")
    core.create_namespaced_pod(namespace, pod_body("q", container("c", "true", image=image)))
    reasons: set[str | None] = set()

    def pulled() -> bool:
        reasons.add(reason("q"))
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=q").items
        return any(e.reason == "Pulling" for e in events) and "ErrImagePull" in reasons

    wait_for(pulled, timeout=5, what="q pulling the image itself while p backs off")
    assert reason("p") == "ImagePullBackOff"


def test_a_deleted_pods_image_pull_back_off_is_forgotten_after_600s_idle(cluster, core, namespace):
    """The kubelet never removes a pod's image pull back-off keys when the pod goes: after each successful
    pull, image_manager.go `EnsureImageExists` calls `m.backOff.GC()`, which (client-go flowcontrol
    `Backoff.GC`) forgets the keys not updated for twice the maximum back-off (2 x 300 s). A pod still backing
    off updates its key at each failed pull, and keeps it. The node's clock is moved forward."""
    node = next(iter(cluster.kubelet.nodes))
    image = "nope/missing:3"

    def entries() -> dict[str, float]:
        return cluster.call(
            lambda: {k: v[0] for k, v in cluster.kubelet.nodes[node].image_backoff.entries.items()}
        )

    def reason(pod: str) -> str | None:
        cs = status_of(core, namespace, pod, "c")
        return cs.state.waiting.reason if cs is not None and cs.state.waiting is not None else None

    try:
        for pod in ("gone", "live"):
            core.create_namespaced_pod(namespace, pod_body(pod, container("c", "true", image=image)))
            wait_for(lambda pod=pod: reason(pod) == "ImagePullBackOff", what=f"{pod} backing off")
        gone = f"{core.read_namespaced_pod('gone', namespace).metadata.uid}_{image}"
        live = f"{core.read_namespaced_pod('live', namespace).metadata.uid}_{image}"
        core.delete_namespaced_pod("gone", namespace, grace_period_seconds=0)
        wait_for(lambda: "gone" not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items})
        assert entries()[gone] == 10.0  # nothing removes it with its pod

        cluster.advance_node_clock(node, 400)  # "live" pulls again, fails: its key updated (20 s)
        wait_for(lambda: entries()[live] == 20.0, what="live's second failed pull")
        cluster.advance_node_clock(node, 250)  # gone's key 650 s idle, live's 250 s
        spec = container("c", "sleep 30", imagePullPolicy="Always")
        core.create_namespaced_pod(namespace, pod_body("pulls", spec))
        wait_for(lambda: running(core, namespace, "pulls", "c"), what="a successful pull")
        left = entries()
        assert gone not in left
        assert left[live] >= 20.0  # still backing off, doubled from its last failure
        wait_for(
            lambda: reason("live") in ("ImagePullBackOff", "ErrImagePull"), what="live still backing off"
        )
    finally:
        cluster.call(lambda: setattr(cluster.kubelet.nodes[node], "clock_offset", 0.0))


def test_never_pull_of_a_missing_image_waits_and_retries(core, namespace):
    """imagePullPolicy Never with the image absent: waiting ErrImageNeverPull, retried by later syncs. The
    local kubelet retried at once, with no await between tries, and the whole cluster stopped answering."""
    ref = "gcr.io/distroless/static-debian12:never-pulled"
    core.create_namespaced_pod(
        namespace, pod_body("p", container("c", "true", image=ref, imagePullPolicy="Never"))
    )
    wait_for(
        lambda: (
            (cs := status_of(core, namespace, "p", "c")) is not None
            and cs.state.waiting is not None
            and cs.state.waiting.reason == "ErrImageNeverPull"
        ),
        what="ErrImageNeverPull",
    )
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
    assert {(e.type, e.reason, e.message) for e in events} >= {
        ("Warning", "ErrImageNeverPull", f'Container image "{ref}" is not present with pull policy of Never'),
        ("Warning", "Failed", "Error: ErrImageNeverPull"),  # startContainer's "Error: %v" of the error
    }
    core.create_namespaced_pod(namespace, pod_body("q", container("c", "sleep 30")))
    wait_for(lambda: running(core, namespace, "q", "c"), what="another pod still starts")


def test_if_not_present_skips_a_pull_the_node_already_has(core, namespace):
    spec = container("c", "sleep 30", image="debian:bookworm-slim", imagePullPolicy="IfNotPresent")
    core.create_namespaced_pod(namespace, pod_body("a", spec))
    wait_for(lambda: running(core, namespace, "a", "c"), what="a running")
    core.create_namespaced_pod(namespace, pod_body("b", spec))
    wait_for(lambda: running(core, namespace, "b", "c"), what="b running")
    msgs = [
        e.message for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=b").items
    ]
    assert any("already present on machine" in m for m in msgs)
    assert not any(m.startswith("Pulling") for m in msgs)


def test_graceful_deletion_sends_sigterm_then_removes(core, namespace, tmp_path):
    script = "trap 'sleep 0.5; echo got-term > /host/term; exit 0' TERM; while :; do sleep 0.1; done"
    spec = container("c", script, volumeMounts=[{"name": "h", "mountPath": "/host"}])
    core.create_namespaced_pod(
        namespace, pod_body("p", spec, volumes=[{"name": "h", "hostPath": {"path": str(tmp_path)}}])
    )
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    core.delete_namespaced_pod("p", namespace)
    # the pod stays, marked for deletion, until the kubelet has stopped its containers
    assert core.read_namespaced_pod("p", namespace).metadata.deletion_timestamp is not None
    wait_for(lambda: (tmp_path / "term").exists(), what="SIGTERM seen by the container")

    wait_for(lambda: gone(core, namespace, "p"), what="pod removed")
    # kuberuntime_container.go killContainer: an event about each container it stops, before the preStop
    # hook and the stop ("Stopping container %s" when the caller gives no message, as a deletion's kill)
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=p,reason=Killing"
    ).items
    assert [(e.type, e.message, e.involved_object.field_path) for e in events] == [
        ("Normal", "Stopping container c", "spec.containers{c}")
    ]


def test_an_evicted_pods_kubelet_stops_its_containers_with_the_kubelets_events(core, namespace):
    """`pods/eviction` (EvictionREST.Create) records no event: it deletes the pod, and its kubelet stops each
    running container with Killing "Stopping container %s" about it (`killContainer`)."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p", "namespace": namespace},
    }
    core.create_namespaced_pod_eviction("p", namespace, eviction)

    wait_for(lambda: gone(core, namespace, "p"), what="pod removed")
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=p,reason=Killing"
    ).items
    assert [(e.type, e.message, e.involved_object.field_path) for e in events] == [
        ("Normal", "Stopping container c", "spec.containers{c}")
    ]


def test_logs_container_previous_tail_timestamps(core, namespace):
    script = "for i in 1 2 3 4 5; do echo line-$i; done; sleep 30"
    core.create_namespaced_pod(namespace, pod_body("p", container("a", script), container("b", "sleep 30")))
    wait_for(lambda: "line-5" in log_of(core, namespace, "p", "a"), what="logs")
    with pytest.raises(ApiException) as err:
        read_log(core, namespace, "p", None)
    assert (
        err.value.status == 400
        and "a container name must be specified" in json.loads(err.value.body)["message"]
    )
    assert read_log(core, namespace, "p", "a", tail_lines=2) == "line-4\nline-5\n"
    stamped = read_log(core, namespace, "p", "a", timestamps=True).splitlines()
    assert stamped[0].split(" ", 1)[1] == "line-1" and stamped[0].split(" ", 1)[0].endswith("Z")
    with pytest.raises(ApiException) as err:
        read_log(core, namespace, "p", "a", previous=True)
    assert err.value.status == 400
    core.patch_namespaced_pod(
        "p", namespace, {"spec": {"containers": [{"name": "a", "image": "alpine:3.20"}]}}
    )
    wait_for(lambda: status_of(core, namespace, "p", "a").restart_count == 1, what="restart")
    assert "line-5" in read_log(core, namespace, "p", "a", previous=True)


def test_log_follow_streams_until_the_container_exits(core, namespace):
    core.create_namespaced_pod(
        namespace,
        pod_body("p", container("c", "for i in 1 2 3; do echo tick-$i; sleep 0.2; done"), restart="Never"),
    )
    wait_for(
        lambda: status_of(core, namespace, "p", "c") and status_of(core, namespace, "p", "c").container_id,
        what="started",
    )
    resp = core.read_namespaced_pod_log("p", namespace, container="c", follow=True, _preload_content=False)
    text = b"".join(resp.stream()).decode()
    assert text == "tick-1\ntick-2\ntick-3\n"


def test_log_follow_waits_for_writes_not_on_a_timer(core, namespace, monkeypatch):
    """The kubelet follows a log on inotify (cri-client logs.go `ReadLogs`, `waitLogs`): it reads again on an
    event in the log's directory, or after `logForceCheckPeriod` (1 s) without one. A line written after 3
    quiet seconds reaches the follow, the follow ends once the container has exited, and in between the
    follow read the file about once a second, not on a short timer."""
    from kruise_local import crilog

    core.create_namespaced_pod(
        namespace, pod_body("p", container("c", "echo first; sleep 3; echo last"), restart="Never")
    )
    wait_for(lambda: "first" in log_of(core, namespace, "p", "c"), what="first line")
    uid = core.read_namespaced_pod("p", namespace).metadata.uid
    empty_reads: list[str] = []
    read_more = crilog._read_more

    def counted(f):
        data = read_more(f)
        if not data and uid in f.name:
            empty_reads.append(f.name)
        return data

    monkeypatch.setattr(crilog, "_read_more", counted)
    resp = core.read_namespaced_pod_log("p", namespace, container="c", follow=True, _preload_content=False)
    assert b"".join(resp.stream()).decode() == "first\nlast\n"
    # about 3 s quiet and up to 1 s after the last line: one read per second, plus one around each event and
    # the end (a 50 ms poll made about 80); a loaded machine only makes fewer
    assert 1 <= len(empty_reads) <= 12, empty_reads


def test_pod_metrics_report_real_memory(api_client, core, namespace):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    from kubernetes import client

    m = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", namespace, "pods", "p"
    )
    mem = m["containers"][0]["usage"]["memory"]
    assert mem.endswith("Ki") and 100 < int(mem[:-2]) < 200_000


# Holds 48 MiB, then posix_spawn()s a child whose file action (opening a FIFO nobody writes) blocks it before
# its exec: glibc's posix_spawn (and its system(), which awk's system() calls) clones with CLONE_VM and
# CLONE_VFORK, so until then the child shares the parent's address space. The shell says "spawned" once the
# child is there.
_VFORK_HOLD = """
import os
hold = bytearray(48 << 20)
for i in range(0, len(hold), 4096):
    hold[i] = 1
os.mkfifo("/tmp/never-written")
os.posix_spawn("/bin/true", ["true"], dict(os.environ),
               file_actions=[(os.POSIX_SPAWN_OPEN, 3, "/tmp/never-written", os.O_RDONLY, 0)])
"""


def test_pod_metrics_count_an_address_space_shared_by_a_vfork_child_once(api_client, core, namespace):
    """metrics-server serves the kubelet's container_memory_working_set_bytes (cgroup usage minus
    inactive_file): pages are charged to the cgroup once, so a vfork child that shares its parent's memory
    until its exec adds none, however long it takes to exec."""
    from kubernetes import client

    script = (
        f"python3 -c '{_VFORK_HOLD}' & pid=$!; "
        'until [ -n "$(cat /proc/$pid/task/$pid/children)" ]; do sleep 0.05; done; echo spawned; sleep 60'
    )
    core.create_namespaced_pod(namespace, pod_body("p", container("c", script, image="python:3.11-slim")))
    wait_for(lambda: "spawned" in log_of(core, namespace, "p", "c"), timeout=60, what="vfork child")
    m = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", namespace, "pods", "p"
    )
    mem = m["containers"][0]["usage"]["memory"]
    assert mem.endswith("Ki")
    used = int(mem[:-2]) * 1024
    assert 48 << 20 < used < 72 << 20, f"{used / 2**20:.1f} MiB: the shared 48 MiB counted twice?"


def test_pod_metrics_list_omits_pods_without_a_running_sandbox(api_client, core, namespace):
    """metrics-server lists what it has samples for: an unschedulable pod is left out, not a 404 for all."""
    from kubernetes import client

    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 30")))
    core.create_namespaced_pod(
        namespace, pod_body("stuck", container("c", "sleep 30"), nodeSelector={"no-such": "node"})
    )
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    listed = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "metrics.k8s.io", "v1beta1", namespace, "pods"
    )
    assert [m["metadata"]["name"] for m in listed["items"]] == ["p"]
    with pytest.raises(ApiException) as e:
        client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            "metrics.k8s.io", "v1beta1", namespace, "pods", "stuck"
        )
    assert e.value.status == 404


def test_resize_subresource_changes_only_resources(core, namespace, api_client):
    spec = container(
        "c", "sleep 30", resources={"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}
    )
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    patch = {
        "spec": {
            "containers": [
                {"name": "c", "resources": {"limits": {"memory": "128Mi"}, "requests": {"memory": "128Mi"}}}
            ]
        }
    }
    core.patch_namespaced_pod_resize("p", namespace, patch)
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.spec.containers[0].resources.limits["memory"] == "128Mi"
    bigger = {
        "spec": {
            "containers": [
                {"name": "c", "resources": {"limits": {"memory": "256Mi"}, "requests": {"memory": "256Mi"}}}
            ]
        }
    }
    with pytest.raises(ApiException) as err:  # the main resource still refuses resource changes
        core.patch_namespaced_pod("p", namespace, bigger)
    assert err.value.status == 422


def _resize_memory(core, namespace, name, cname, memory):
    patch = {
        "spec": {
            "containers": [
                {"name": cname, "resources": {"limits": {"memory": memory}, "requests": {"memory": memory}}}
            ]
        }
    }
    core.patch_namespaced_pod_resize(name, namespace, patch)


def test_resize_not_required_is_applied_in_place_without_a_restart(core, namespace):
    """KEP-1287: a memory resize under resizePolicy NotRequired (the default) changes the running container's
    limits in place: same container, restartCount unchanged, status resources and allocatedResources
    updated."""
    spec = container(
        "c", "sleep 60", resources={"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}}
    )
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    assert first.resources.limits["memory"] == "64Mi"
    _resize_memory(core, namespace, "p", "c", "128Mi")
    cs = wait_for(
        lambda: (s := running(core, namespace, "p", "c")) and s.resources.limits["memory"] == "128Mi" and s,
        what="resources applied",
    )
    assert cs.container_id == first.container_id
    assert cs.restart_count == 0
    assert cs.allocated_resources["memory"] == "128Mi"
    time.sleep(0.5)  # a restart, if any, would show by now
    assert running(core, namespace, "p", "c").container_id == first.container_id


def test_resize_restart_container_policy_restarts(core, namespace):
    spec = container(
        "c",
        "sleep 60",
        resources={"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}},
        resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}],
    )
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    first = wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    _resize_memory(core, namespace, "p", "c", "128Mi")
    cs = wait_for(
        lambda: (s := running(core, namespace, "p", "c")) and s.container_id != first.container_id and s,
        what="restart for the resize",
    )
    assert cs.restart_count == 1
    assert cs.resources.limits["memory"] == "128Mi"
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p")
    assert any(e.reason == "Killing" and "resize requires restart" in e.message for e in events.items)
