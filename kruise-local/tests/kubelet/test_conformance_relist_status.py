"""What a client sees of a container start, and what a downwardAPI file holds, as the kubelet paces them:

- the sync that starts a container gave the status manager the status it found as it began; the status
  shows the new container running only once the PLEG's next relist has seen the start and the sync its
  ContainerStarted event asks for has begun (`kubelet.go` `SyncPod`: `generateAPIPodStatus` from the PLEG
  cache, then `SetPodStatus`), so an annotation patched by a client that saw the start waits for the relist
  after that sync (`GetNewerThan`);
- the volume populator re-processes the pod as the pod manager has it at its pass (`processPodVolumes`,
  `AddPodToVolume`) and the reconciler writes the files from that pod object (`volumes.VolumeLoops`).

Through the real `kubernetes` client on a realistic cluster of its own (its PLEG is slowed down here)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, status_of, wait_for
from kruise_local.volumes import PodVolumes, VolumeLoops


def test_a_started_container_shows_running_only_after_the_pleg_relisted(tmp_path: Path) -> None:
    from kubernetes import client, config

    with LocalCluster(ClusterConfig(profile="realistic", root=str(tmp_path / "r"))) as c:
        core = client.CoreV1Api(config.new_client_from_config(str(c.write_kubeconfig(tmp_path / "kc"))))
        core.create_namespaced_pod("default", pod_body("p", container("c", "sleep 300")))
        first = wait_for(lambda: running(core, "default", "p", "c"), timeout=60, what="running").container_id
        pleg = c.kubelet.plegs[next(iter(c.kubelet.nodes))]

        def relist_every(seconds: float) -> None:
            pleg.stop()
            pleg.period = seconds
            pleg.start()  # relists now, then every `seconds`

        c.call(lambda: relist_every(600))
        core.patch_namespaced_pod(
            "p", "default", {"spec": {"containers": [{"name": "c", "image": "alpine:3.20"}]}}
        )

        def started() -> bool:
            items = core.list_namespaced_event("default", field_selector="involvedObject.name=p").items
            return sum(e.count or 1 for e in items if e.reason == "Started") >= 2  # an aggregated event

        wait_for(started, timeout=60, what="the new container's Started event")
        time.sleep(2)  # no relist meanwhile: the status is still the one the starting sync found
        cs = status_of(core, "default", "p", "c")
        assert cs.state.running is None and cs.container_id == first
        c.call(lambda: relist_every(1.0))
        cs = wait_for(lambda: running(core, "default", "p", "c"), timeout=30, what="running after a relist")
        assert cs.container_id != first and cs.restart_count == 1


class _Pod(PodVolumes):
    """The volume manager's view of one pod with one downwardAPI volume."""

    def __init__(self, folder: Path) -> None:
        self.uid, self.sandbox_ready, self.terminating = "u", True, False
        self.volumes = {"info": folder}
        self.obj = self.with_annotation("0")

    @staticmethod
    def with_annotation(value: str) -> dict[str, Any]:
        item = {"path": "a", "fieldRef": {"fieldPath": "metadata.annotations['a']"}}
        return {
            "metadata": {"name": "p", "annotations": {"a": value}},
            "spec": {"volumes": [{"name": "info", "downwardAPI": {"items": [item]}}]},
        }

    def pod(self) -> dict[str, Any]:
        return self.obj


def test_the_reconciler_writes_the_pod_as_the_populator_took_it(tmp_path: Path) -> None:
    pod = _Pod(tmp_path / "info")
    loops = VolumeLoops(0.1)
    loops.to_reprocess[pod.uid] = pod  # ReprocessPod
    loops.populate()
    pod.obj = pod.with_annotation("1")  # an update after the populator's pass
    loops.reconcile()
    assert (tmp_path / "info" / "a").read_text() == "0"
    loops.to_reprocess[pod.uid] = pod  # the update's own sync
    loops.populate()
    loops.reconcile()
    assert (tmp_path / "info" / "a").read_text() == "1"
