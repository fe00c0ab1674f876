"""The pipelines benchmark's recorder (bench/observe.py) against the local cluster through its API: the pod
watch sees every version of a pod (its creation, an in-place resize, its deletion), so the memory reserved
follows from the specs without metrics; with metrics-server's scrapes (realistic profile) a young pod has no
reading, and the peak is "not measured", not 0. Counts and values only, nothing timed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, wait_for

from bench import figures
from bench.observe import Sampler, reserved_memory

MIB = 2**20


@pytest.fixture
def bench_namespace(core: Any) -> Iterator[str]:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def sized(memory: str) -> dict[str, Any]:
    return {"requests": {"memory": memory}, "limits": {"memory": "512Mi"}}


def test_the_pod_watch_sees_the_spec_and_the_resize(cluster: LocalCluster, core: Any, bench_namespace: str):
    sampler = Sampler(cluster.url)
    sampler.start()
    try:
        body = pod_body("p", container("c", "sleep 60", resources=sized("64Mi")))
        core.create_namespaced_pod(bench_namespace, body)
        wait_for(lambda: running(core, bench_namespace, "p", "c"), timeout=30)
        core.patch_namespaced_pod_resize(
            "p", bench_namespace, {"spec": {"containers": [{"name": "c", "resources": sized("128Mi")}]}}
        )

        def allocated() -> bool:
            status = core.read_namespaced_pod("p", bench_namespace).status
            return any(
                (cs.allocated_resources or {}).get("memory") == "128Mi" for cs in status.container_statuses
            )

        wait_for(allocated, timeout=30)
        core.delete_namespaced_pod("p", bench_namespace, grace_period_seconds=0)
        wait_for(lambda: any(kind == "DELETED" for _, kind, _ in sampler.events), timeout=30)
    finally:
        sampler.stop()
    mine = [e for e in sampler.events if e[2]["metadata"]["namespace"] == bench_namespace]
    assert mine[0][1] == "ADDED" and mine[-1][1] == "DELETED"
    series = figures.pod_series(mine, reserved_memory)
    held = [v.get(bench_namespace, 0) / MIB for _, v in series]
    assert 64 in held and 128 in held and held[-1] == 0  # the resize is in the record, the delete frees it
    got = figures.reserved_figures(mine, reserved_memory, [bench_namespace], mine[-1][0])
    assert got["reserved_peak_mib"] == 128 and got["reserved_gib_s"] > 0


def test_no_reading_from_metrics_server_is_not_measured(tmp_path: Any) -> None:
    """Realistic profile: metrics-server scrapes every 15 s and needs two points per container, so a pod
    seconds old has no PodMetrics: every answer the sampler got is empty, and the peak is None."""
    from kubernetes import client, config

    with LocalCluster(ClusterConfig(profile="realistic", root=str(tmp_path / "cluster"))) as local:
        api = client.CoreV1Api(config.new_client_from_config(str(local.write_kubeconfig(tmp_path / "kc"))))
        api.create_namespace({"metadata": {"name": "bench-0"}})
        sampler = Sampler(local.url)
        sampler.start()
        try:
            api.create_namespaced_pod("bench-0", pod_body("p", container("c", "sleep 60")))
            wait_for(lambda: running(api, "bench-0", "p", "c"), timeout=30)
            wait_for(lambda: len(sampler.samples) >= 3, timeout=30)
        finally:
            sampler.stop()
    assert sampler.samples and all(s == {} for _, s in sampler.samples)
    assert sampler.readings == {}
    stages = {"p": {1: {"start": 0.0, "end": 1.0, "pod": "p", "container": "c"}}}
    got = figures.memory_figures(sampler.samples, sampler.readings, stages, {"p": "bench-0"})
    assert got["peak_memory_mib"] is None and got["stage_peaks_mib"] == {"p": [None]}
