"""The scheduling queue moves its unschedulable pods back when a node is added (`eventhandlers.go`
`addNodeToCache`, `MoveAllToActiveOrBackoffQueue` on `NodeAdd`): how a pod waiting for a cluster autoscaler's
new node gets it. Through the official client."""

from __future__ import annotations

from pathlib import Path

from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, wait_for
from kubernetes import client, config


def test_an_unschedulable_pod_is_scheduled_on_a_node_added_later(tmp_path: Path) -> None:
    settings = ClusterConfig(
        profile="fast",
        allocatable={"cpu": "2", "memory": "1Gi", "pods": "110"},
        node_allocatable={"big": {"memory": "4Gi"}},
        root=str(tmp_path / "root"),
    )
    with LocalCluster(settings) as cluster:
        core = client.CoreV1Api(config.new_client_from_config(str(cluster.write_kubeconfig(tmp_path / "k"))))
        wanted = {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}
        core.create_namespaced_pod("default", pod_body("p", container("c", "sleep 60", resources=wanted)))

        def unschedulable() -> str:
            conditions = core.read_namespaced_pod("p", "default").status.conditions or []
            return next((c.message for c in conditions if c.reason == "Unschedulable"), "")

        assert "1 Insufficient memory" in wait_for(unschedulable, what="Unschedulable")
        cluster.call(lambda: cluster.add_node("big"))
        wait_for(lambda: running(core, "default", "p", "c"), timeout=30, what="running on the new node")
        assert core.read_namespaced_pod("p", "default").spec.node_name == "big"
