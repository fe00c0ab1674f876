"""A container is created from the one pod object its sync started with, through the official client: the
image it pulls, its environment (a downward-API `fieldRef` to an annotation) and the spec hash it is labelled
with all come from that object (`kuberuntime_manager.go` `SyncPod` passes its `pod` to `startContainer`,
which pulls `container.Image` (`EnsureImageExists`), builds the env from the same pod
(`generateContainerConfig` -> `kubelet_pods.go` `makeEnvironmentVariables`) and labels the container with
`HashContainer(container)` (`newContainerLabels`)). A pod changed again while that pull runs is the next
sync's: the container started from the earlier object is killed for the new spec and started afresh.

Before, kruise-local started the image it had pulled with the env and spec hash of the pod as it was after
the pull: a container on the superseded image, with the newer object's env, that no sync ever replaced."""

from __future__ import annotations

from pathlib import Path

from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, wait_for
from kubernetes import client, config

CATALOGUE = """
images:
  - {ref: "pulls.test/big:1", size: 256Mi, cmd: [sh]}
  - {ref: "pulls.test/a:1", size: 1Mi, cmd: [sh]}
  - {ref: "pulls.test/b:1", size: 1Mi, cmd: [sh]}
"""
NOTE = {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}}


def _patch(core: client.CoreV1Api, image: str, note: str) -> None:
    body = {
        "metadata": {"annotations": {"note": note}},
        "spec": {"containers": [{"name": "c", "image": image}]},
    }
    core.patch_namespaced_pod("p", "default", body)


def _pulling(core: client.CoreV1Api, image: str) -> bool:
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=p").items
    return any(e.reason == "Pulling" and image in (e.message or "") for e in events)


def _log(core: client.CoreV1Api, previous: bool = False) -> str:
    answer = core.read_namespaced_pod_log(
        "p", "default", container="c", previous=previous, _preload_content=False
    )
    return answer.data.decode()


def test_a_container_gets_the_env_of_the_pod_whose_image_it_pulled(tmp_path: Path) -> None:
    (tmp_path / "images.yaml").write_text(CATALOGUE)
    settings = ClusterConfig(
        profile="realistic", root=str(tmp_path / "r"), catalogue=str(tmp_path / "images.yaml")
    )
    with LocalCluster(settings) as c:
        kubeconfig = str(c.write_kubeconfig(tmp_path / "kc"))
        core = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
        script = "echo note=$NOTE; trap 'exit 0' TERM; while :; do sleep 1; done"
        body = pod_body("p", container("c", script, image="pulls.test/a:1", env=[NOTE]))
        body["metadata"]["annotations"] = {"note": "a"}
        core.create_namespaced_pod("default", body)
        wait_for(lambda: running(core, "default", "p", "c"), timeout=30, what="the first container")
        _patch(core, "pulls.test/big:1", "big")
        wait_for(lambda: _pulling(core, "pulls.test/big:1"), timeout=30, what="the big image's pull")
        _patch(core, "pulls.test/b:1", "b")  # while the big image is pulled (seconds, realistic profile)

        def on_b() -> bool:
            shown = running(core, "default", "p", "c")
            return shown is not None and shown.image.endswith("pulls.test/b:1")

        wait_for(on_b, timeout=60, what="the container on the last image")
        assert _log(core).splitlines()[0] == "note=b"
        # the container started for the big image had that object's env, and was replaced (one restart
        # for the big image, one for b's)
        shown = running(core, "default", "p", "c")
        assert shown.restart_count == 2
        assert _log(core, previous=True).splitlines()[0] == "note=big"
