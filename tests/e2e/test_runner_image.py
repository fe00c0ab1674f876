"""The runner image (issue 22 b), end to end on the local cluster: the chain pod holds no runner script (the
runner image of this provider's version carries it, served by kruise-local through the provider's
`kruise_local.images` entry point), so `kubectl describe` of a chain pod stays small; a runner image whose
script is not this provider's fails the setup with a message naming the image and the fix."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core.runnerimage import runner_script
from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE
from tests.e2e.inline import FAST_POD, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")
DESCRIBE_LIMIT = 6 * 1024


def chain_dag(dag_id: str, **options: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **options) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            one >> two
    return dag


def test_describe_of_a_chain_pod_is_small_and_holds_no_script(e2e_cluster, capfd, tmp_path: Path):
    history = pod_events(e2e_cluster)
    run = run_inline(chain_dag("runner_image_describe", keep_pod=True))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert pod["spec"]["initContainers"][0]["image"] == DEFAULT_RUNNER_IMAGE
    kubeconfig = e2e_cluster.write_kubeconfig(tmp_path / "describe-kubeconfig")
    described = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(kubeconfig),
            "describe",
            "pod",
            "-n",
            "default",
            pod["metadata"]["name"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "kruise-chain-runner" in described and DEFAULT_RUNNER_IMAGE in described  # the init container
    # the pod as built: all but its annotations (each stage's record and run spec) and its events, which grow
    # with the run (2 stages: 1.4 and 1.3 KB)
    built = re.sub(r"\nAnnotations:.*?\n(?=Status:)|\nEvents:.*", "\n", described, flags=re.S)
    assert len(built.encode()) < DESCRIBE_LIMIT, built
    assert len(described.encode()) < 2 * DESCRIBE_LIMIT, described
    for line in runner_script().splitlines()[:40]:  # nothing of the script, plain or encoded
        assert len(line) < 30 or line not in described
    assert "KC_RUNNER_SCRIPT" not in described


def test_a_stale_runner_image_fails_the_setup_naming_the_image_and_the_fix(
    e2e_cluster, capfd, tmp_path: Path
):
    image = tmp_path / "stale-runner.sh"
    image.write_text(runner_script().replace("(v3, sealed stages)", "(v2)"))
    e2e_cluster.catalogue.add(
        {
            "ref": "registry.example.com/kruise-chain/runner:0.0.9",
            "base": "scratch",
            "provides": ["/bin/busybox", str(image)],
            "links": {"/kruise-chain-runner/runner.sh": str(image), "/bin/sh": "busybox"},
        }
    )
    for stale in ("registry.example.com/kruise-chain/runner:0.0.9", "busybox:1.37.0-musl"):
        run = run_inline(chain_dag(f"runner_image_stale_{stale[:7]}", runner_image=stale))
        out = capfd.readouterr().out
        assert str(run.state) == "failed", out[-3000:]
        assert task_states(run)["c.setup"][0] == "failed"
        (error,) = {line for line in out.splitlines() if "cannot start: the runner image" in line}
        assert f"the runner image docker.io/library/{stale}" in error or f"the runner image {stale}" in error
        assert "is not this provider's" in error and DEFAULT_RUNNER_IMAGE in error, error
        assert "runner.Dockerfile" in error, error
        assert task_states(run)["c.setup"][2] < 120  # the failure, not the startup timeout (a bound)
