"""When a container held by its crash-loop back-off starts again, per Kubernetes minor: a start refused for
the back-off is a sync error, retried by the pod worker 10-15 s later through 1.34 (`completeWork`'s
`backOffPeriod` with jitter; kubernetes/kubernetes#123602), so even a 2 s back-off waits 10 s or more; from
1.35 the error carries when the back-off runs out (kubernetes/kubernetes#133066) and the worker syncs then.
Any sync before that (here a pod update) tries the start again. Through the real `kubernetes` client, with
the node setting `crashLoopBackOff.maxContainerRestartPeriod` at 2 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.features import Features
from kruise_local.testing import container, pod_body, status_of, wait_for


def _held(core: Any) -> Any:
    cs = status_of(core, "default", "p", "c")
    w = cs.state.waiting if cs is not None else None
    return cs if w is not None and w.reason == "CrashLoopBackOff" else None


def _cluster(tmp_path: Path, version: str) -> LocalCluster:
    return LocalCluster(
        ClusterConfig(
            profile="fast",
            root=str(tmp_path / "r"),
            kubernetes_version=version,
            feature_gates={"KubeletCrashLoopBackOffMax": True},
            max_container_restart_period=2,
        )
    )


def _core(c: LocalCluster, tmp_path: Path) -> Any:
    from kubernetes import client, config

    kubeconfig = c.write_kubeconfig(tmp_path / "kubeconfig")
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def test_the_worker_retries_a_refused_start_per_minor() -> None:
    for minor, left, expected in ((34, 2.0, (10.0, 15.0)), (35, 2.0, (2.0, 3.0)), (35, 600.0, (60.0, 90.0))):
        features = Features.parse(f"1.{minor}")
        assert features.crash_loop_requeue(left, 60.0, 0.0) == expected[0]
        assert features.crash_loop_requeue(left, 60.0, 0.999999) == pytest.approx(expected[1], rel=1e-4)
    assert Features.parse("1.35").crash_loop_requeue(-1.0, 60.0, 0.5) == 0.0  # run out: at once


def test_through_1_34_a_2s_back_off_waits_for_the_workers_10s_retry_or_a_sync(tmp_path) -> None:
    with _cluster(tmp_path, "1.34.0") as c:
        core = _core(c, tmp_path)
        core.create_namespaced_pod("default", pod_body("p", container("c", "exit 1")))
        held = wait_for(lambda: _held(core), timeout=30, what="CrashLoopBackOff")
        assert held.state.waiting.message.startswith("back-off 2s ")
        time.sleep(5)  # the back-off ran out 3 s ago or more; no sync since the refusal
        again = _held(core)
        assert again is not None and again.restart_count == held.restart_count
        core.patch_namespaced_pod("p", "default", {"metadata": {"annotations": {"a": "1"}}})
        wait_for(
            lambda: status_of(core, "default", "p", "c").restart_count > held.restart_count,
            timeout=30,
            what="the start a pod update's sync made",
        )


def test_from_1_35_it_starts_when_the_back_off_runs_out(tmp_path) -> None:
    with _cluster(tmp_path, "1.35.0") as c:
        core = _core(c, tmp_path)
        core.create_namespaced_pod("default", pod_body("p", container("c", "exit 1")))
        held = wait_for(lambda: _held(core), timeout=30, what="CrashLoopBackOff")
        assert held.state.waiting.message.startswith("back-off 2s ")
        # before the 10 s a 1.34 worker would wait at the least: 2 s, a jitter of up to 1 s, the start
        wait_for(
            lambda: status_of(core, "default", "p", "c").restart_count > held.restart_count,
            timeout=9,
            what="the restart once the back-off ran out, with no other sync",
        )
