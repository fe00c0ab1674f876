"""What a Kubernetes user sees of a healthy chain pod: its start raises no `Unhealthy` warning (the slots'
readiness probe no longer races the runner, a startupProbe waits for it), read through the official
client's events list as `kubectl describe` shows them."""

from __future__ import annotations

from pathlib import Path

import pendulum
import pytest

from tests.e2e.inline import FAST_POD, run_inline

pytestmark = pytest.mark.slow


def test_a_healthy_chain_start_has_no_unhealthy_events(e2e_cluster, capfd, tmp_path: Path) -> None:
    from airflow.sdk import DAG
    from kubernetes import client, config

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("healthy_events", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            one >> two
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    core = client.CoreV1Api(config.new_client_from_config(str(e2e_cluster.write_kubeconfig(tmp_path / "k"))))
    events = [e for e in core.list_namespaced_event("default").items if e.involved_object.kind == "Pod"]
    assert any(e.reason == "Started" for e in events)  # the pod's events are there
    unhealthy = [e.message or "" for e in events if e.reason == "Unhealthy"]
    # the race at a slot's start: a probe before its runner made its parked file
    assert [m for m in unhealthy if "parked" in m or m.startswith("Startup probe")] == []
