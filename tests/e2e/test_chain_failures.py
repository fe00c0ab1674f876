"""Stages that fail: a non-zero exit, and an image that does not exist. Small DAGs run with `dag.test()`."""

from __future__ import annotations

import time

import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow


def test_a_failing_stage_fails_its_task_with_exit_code_and_log_tail(e2e_cluster, capfd):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    with DAG("chain_failing_stage", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            first = chain.stage(
                "first",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", "echo a; echo b; exit 3"],
                on_failure_callback=failures,
            )
            second = chain.stage("second", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo never"])
            first >> second
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.first"][0] == "failed"
    assert states["c.second"][0] == "upstream_failed"  # later stages do not run
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run

    error = str(failures.errors["c.first"])
    assert "exit code 3" in error
    assert error.splitlines()[-2:] == ["a", "b"], error  # the tail of the stage's log
    assert "stage 'first' failed with exit code 3" in out  # and it is in the task log

    result = xcoms(run)["c.first"]  # the result is pushed even though the task failed
    assert result["exit_code"] == 3
    assert result["generation"] == 1
    assert result["log_tail"] == ["a", "b"]
    assert "c.second" not in xcoms(run)

    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    assert any(k == "DELETED" and r is R.PODS and o["metadata"]["name"] == name for k, r, o in history)
    assert cluster.call(lambda: cluster.store.peek(R.PODS, ns, name)) is None
    assert [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])] == [(1, "first")]


def test_a_missing_image_fails_the_stage_quickly_naming_the_image(e2e_cluster):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    failures = Failures()
    missing = "ghcr.io/nope/missing:1"
    swap_timeout = 20
    with DAG("chain_missing_image", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        # the first two stages' images are the pod's initial slot images: the missing one is swapped in third
        with KruiseChain(
            "c", namespace="default", prewarm=False, swap_timeout=swap_timeout, **FAST_POD
        ) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            three = chain.stage(
                "three", image=missing, cmds=["/bin/sh", "-c", "echo three"], on_failure_callback=failures
            )
            one >> two >> three
    history = pod_events(cluster)
    started = time.monotonic()
    run = run_inline(dag)
    elapsed = time.monotonic() - started

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.three"][0] == "failed"
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.three"])
    assert "ErrImagePull" in error or "ImagePullBackOff" in error, error
    assert missing in error
    assert "swap timeout" not in error  # it failed on the pull error, not by waiting out the timeout
    assert states["c.three"][2] < swap_timeout  # the stage task gave up well within its swap timeout
    assert elapsed < swap_timeout + 30  # and the run did not hang (Airflow's own overhead included)
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert cluster.call(lambda: cluster.store.peek(R.PODS, "default", pod["metadata"]["name"])) is None
