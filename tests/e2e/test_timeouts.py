"""Timeouts, each named in the task's error: the stage's own (`stage_timeout`, a watchdog that also catches a
silent stage and stops it), Airflow's `execution_timeout` (the task is killed: `on_kill` stops the stage),
and the image pull while swapping in (`pull_timeout`, or `swap_timeout` running out while pulling)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local import resources as R

from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow

SILENT = "sleep 30"  # prints nothing: only the runner's start marker is in its log


def chain_dag(dag_id: str, **stage_options: Any) -> tuple[Any, Failures]:
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            chain.stage(
                "slow",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", SILENT],
                on_failure_callback=failures,
                **stage_options,
            )
    return dag, failures


def results(cluster: Any, uid: str) -> list[tuple[int, str, int, str]]:
    """(generation, stage, exit code, reason) of every result line the runner printed, without repeats."""
    found = set()
    for log in (cluster.root / "pods" / uid / "containers").rglob("*.log"):
        found |= set(
            re.findall(
                r"::kruise-chain:: result gen=(\d+) token=\S* stage=(\S+) slot=\S+ exit=(\d+) reason=(\S+)",
                log.read_text(),
            )
        )
    return sorted((int(g), s, int(e), r) for g, s, e, r in found)


def assert_stopped(cluster: Any, history: list) -> None:
    """The stage ran once and was stopped through its slot's stop annotation, not left to finish its 30 s:
    SIGTERM ends the `sh` (143), no container restart, no ContainerRecreateRequest."""
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    uid = pod["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(cluster, uid)] == [(1, "slow")]
    [(generation, stage, exit_code, reason)] = results(cluster, uid)
    assert (generation, stage) == (1, "slow")
    assert (exit_code, reason) == (143, "stopped")
    assert not [o for k, r, o in history if r is R.CRRS]
    stops = {
        (o["metadata"].get("annotations") or {}).get("airflow-kruise-chain/slot-a.stop")
        for k, r, o in history
        if r is R.PODS
    }
    assert "1 2" in stops, stops  # generation 1, the pod's grace period (2 s)
    restarts = {
        c.get("restartCount", 0)
        for k, r, o in history
        if r is R.PODS
        for c in (o.get("status") or {}).get("containerStatuses") or []
        if c["name"] == "slot-a"
    }
    assert restarts <= {0}, restarts


def test_stage_timeout_stops_a_silent_stage(e2e_cluster):
    cluster = e2e_cluster
    history = pod_events(cluster)
    dag, failures = chain_dag("chain_stage_timeout", stage_timeout=2)
    run = run_inline(dag)

    assert str(run.state) == "failed"
    assert task_states(run)["c.slow"][0] == "failed"
    assert task_states(run)["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.slow"])
    assert error.startswith("stage timeout (stage_timeout 2s): stage 'slow' (generation 1 in slot-a)"), error
    assert error.endswith("stopped it; it ended with exit code 143 (stopped)"), (
        error
    )  # read before the teardown
    assert_stopped(cluster, history)


def test_execution_timeout_kills_the_task_and_on_kill_stops_the_stage(e2e_cluster):
    from airflow.sdk.exceptions import AirflowTaskTimeout

    cluster = e2e_cluster
    history = pod_events(cluster)
    dag, failures = chain_dag("chain_execution_timeout", execution_timeout=timedelta(seconds=3))
    run = run_inline(dag)

    assert str(run.state) == "failed"
    assert task_states(run)["c.slow"][0] == "failed"
    assert isinstance(failures.errors["c.slow"], AirflowTaskTimeout)
    assert_stopped(cluster, history)


@pytest.fixture
def slow_pull_cluster(tmp_path: Path, airflow_home: Path):
    """The first two stage images and the runner's image (the chain pod's init container) are on the node;
    any other image takes a minute to pull."""
    preloaded = ("busybox:1.36", "alpine:3.20", DEFAULT_RUNNER_IMAGE)
    config = ClusterConfig(profile="fast", root=str(tmp_path / "cluster"), preloaded_images=preloaded)
    with LocalCluster(config) as cluster:
        slow = dataclasses.replace(cluster.profile, pull_latency=60.0)
        cluster.profile = cluster.kubelet.profile = slow  # the kubelet pulls (it holds its own profile)
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
        yield cluster
        os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


@pytest.mark.parametrize("prepare_next", [False, True], ids=["own-pull", "prepared-slot-pulling"])
@pytest.mark.parametrize(
    ("chain_options", "stage_options", "named"),
    [({}, {"pull_timeout": 2}, "pull_timeout 2s"), ({"swap_timeout": 3}, {}, "swap_timeout 3s")],
    ids=["pull_timeout", "swap_timeout-while-pulling"],
)
def test_image_pull_timeout(slow_pull_cluster, chain_options, stage_options, named, prepare_next):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    with DAG("chain_pull_timeout", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        # the third stage's image is pulled by its own swap, or (prepare_next) by the prepare made while `two`
        # runs: the stage then waits for that slot, and the same timeouts apply to the wait
        with KruiseChain(
            "c", namespace="default", prewarm=False, prepare_next=prepare_next, **chain_options, **FAST_POD
        ) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            big = chain.stage(
                "big",
                image="debian:bookworm-slim",
                cmds=["/bin/sh", "-c", "echo big"],
                on_failure_callback=failures,
                **stage_options,
            )
            one >> two >> big
    run = run_inline(dag)

    assert str(run.state) == "failed"
    states = task_states(run)
    assert (states["c.one"][0], states["c.two"][0], states["c.big"][0]) == ("success", "success", "failed")
    error = str(failures.errors["c.big"])
    assert error.startswith(f"image pull timeout ({named}): the image debian:bookworm-slim of stage 'big'"), (
        error
    )
    assert "ContainerCreating" in error
