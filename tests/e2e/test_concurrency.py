"""Concurrency: a swap never takes a slot that still runs a stage, and each DAG run gets its own pod.

Stage tasks are called directly (each thread is a worker) against the local cluster; stages wait on gate
files the test writes into the pod's scratch volume, so the order is forced, not timed.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kruise_local import resources as R
from kruise_local.testing import wait_for

from airflow_kruise_chain.operators.chain import ChainSetupOperator, KruiseChainOperator
from tests.e2e.inline import FAST_POD, in_thread, start_markers
from tests.provider.support import make_context

pytestmark = pytest.mark.slow

GATED = r"""
echo "$STAGE waiting"
while [ ! -f "$CHAIN_SCRATCH/go-$STAGE" ]; do sleep 0.1; done
echo "$STAGE done"
"""
IMAGES = {"a": "busybox:1.36", "b": "alpine:3.20", "c": "busybox:1.36"}


def stage(name: str, script: str = GATED) -> KruiseChainOperator:
    return KruiseChainOperator(
        task_id=name,
        chain_name="c",
        namespace="default",
        stage_name=name,
        image=IMAGES[name],
        cmds=["/bin/sh", "-c", script],
        env={"STAGE": name},
        swap_timeout=60,
    )


def setup(dag_id: str, run_id: str) -> dict[str, str]:
    stages = [{"name": n, "image": i, "cmds": ["/bin/sh", "-c", GATED]} for n, i in IMAGES.items()]
    chain = {"name": "c", "namespace": "default", "stages": stages, **FAST_POD}
    return ChainSetupOperator(task_id="setup", chain=chain).execute(make_context(dag_id, run_id))


def test_a_stage_waits_for_its_slot_to_be_free(e2e_cluster):
    cluster = e2e_cluster
    pod_name = setup("d", "run-1")["pod"]
    pod = cluster.call(lambda: cluster.store.peek(R.PODS, "default", pod_name))
    uid = pod["metadata"]["uid"]
    scratch = cluster.root / "pods" / uid / "volumes" / "scratch"

    def started() -> list[str]:
        return [s for _, s, _ in start_markers(cluster, uid)]

    runs = {}
    for name in ("a", "b"):  # two stages at once: one in each slot
        runs[name] = in_thread(lambda name=name: stage(name).execute(make_context("d", "run-1")))
        wait_for(lambda name=name: name in started(), 60, 0.1, f"{name} to start")
    runs["c"] = in_thread(lambda: stage("c").execute(make_context("d", "run-1")))
    # both slots run a stage: c must wait, not swap
    (scratch / "go-c").write_text("")  # c would finish at once if it had been swapped in
    time.sleep(1)
    assert started() == ["a", "b"]
    assert "result" not in runs["a"] and "result" not in runs["c"]
    (scratch / "go-a").write_text("")  # a ends: c takes slot-a, which holds its image
    for name in ("a", "c"):
        runs[name]["thread"].join(timeout=60)
        assert "error" not in runs[name], runs[name].get("error")
    assert "result" not in runs["b"]  # b still runs in slot-b
    (scratch / "go-b").write_text("")
    runs["b"]["thread"].join(timeout=60)
    assert runs["b"]["result"]["exit_code"] == 0

    a, b, c = (runs[n]["result"] for n in ("a", "b", "c"))
    assert [(r["generation"], r["slot"], r["exit_code"]) for r in (a, b, c)] == [
        (1, "slot-a", 0),
        (2, "slot-b", 0),
        (3, "slot-a", 0),
    ]
    assert c["started_at"] >= a["finished_at"]  # c ran in slot-a only once a had finished
    assert started() == ["a", "b", "c"]  # each stage started once: none was killed and re-run


def test_two_runs_of_a_dag_get_separate_pods(e2e_cluster):
    cluster = e2e_cluster
    write_run = r"""
test ! -f "$CHAIN_SCRATCH/run" || { echo "scratch is shared with $(cat "$CHAIN_SCRATCH/run")"; exit 1; }
echo "$RUN" > "$CHAIN_SCRATCH/run"; printf '{"run": "%s"}' "$(cat "$CHAIN_SCRATCH/run")" > "$CHAIN_OUTPUT"
"""
    pods = {run: in_thread(lambda run=run: setup("d", run)) for run in ("run-1", "run-2")}
    for outcome in pods.values():
        outcome["thread"].join(timeout=120)
        assert "error" not in outcome, outcome.get("error")

    def run_stage(run: str) -> dict[str, Any]:
        op = stage("a", write_run)
        op.env = {"RUN": run}
        return op.execute(make_context("d", run))

    results = {run: in_thread(lambda run=run: run_stage(run)) for run in ("run-1", "run-2")}
    for outcome in results.values():
        outcome["thread"].join(timeout=120)
        assert "error" not in outcome, outcome.get("error")

    names = {run: pods[run]["result"]["pod"] for run in pods}
    assert names["run-1"] != names["run-2"]
    for run, name in names.items():
        pod = cluster.call(lambda name=name: cluster.store.peek(R.PODS, "default", name))
        assert pod["metadata"]["labels"]["airflow-kruise-chain/run-id"].startswith(run)
        result = results[run]["result"]
        assert (result["generation"], result["outputs"]) == (1, {"run": run})  # its own pod and scratch
    created = [p for m, p, c in cluster.audit if m == "POST" and p.endswith("/pods") and c == 201]
    assert len(created) == 2
