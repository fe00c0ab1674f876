"""What a Kubernetes user sees of a healthy chain pod: no `Unhealthy` warning at all (no readiness or startup
probe fails while stages run: a slot is Ready while its runner serves it, running a stage or parked), read
through the official client's events list as `kubectl describe` shows them; and what `kubectl` itself shows
of it: each runner marker line once per stream in `kubectl logs`, and which stage ran where."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pendulum
import pytest

from tests.e2e.inline import FAST_POD, run_inline, stage_records

pytestmark = pytest.mark.slow

STAGES = (  # two image swaps, then annotations-only swaps (the slots hold the images); each runs ~2.5 s so
    # that the kubelet probes the slots (every second) many times while their stages run
    ("one", "busybox:1.36"),
    ("two", "alpine:3.20"),
    ("three", "busybox:1.36"),
    ("four", "alpine:3.20"),
)


def test_a_healthy_four_stage_run_has_no_probe_failure_events(e2e_cluster, capfd, tmp_path: Path) -> None:
    from airflow.sdk import DAG
    from kubernetes import client, config

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("healthy_events", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            tasks = [
                chain.stage(
                    name, image=image, cmds=["/bin/sh", "-c", f"echo {name}; sleep 2.5; echo {name} >&2"]
                )
                for name, image in STAGES
            ]
            for before, after in itertools.pairwise(tasks):
                before >> after
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    kubeconfig = e2e_cluster.write_kubeconfig(tmp_path / "k")
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    events = [e for e in core.list_namespaced_event("default").items if e.involved_object.kind == "Pod"]
    assert sum(e.reason == "Started" for e in events) >= 2  # the pod's events are there
    unhealthy = [(e.count or 1, e.message or "") for e in events if e.reason == "Unhealthy"]
    assert unhealthy == []  # neither a readiness nor a startup probe failed, not once
    pod = core.list_namespaced_pod("default").items[0]
    assert [s.ready for s in pod.status.container_statuses] == [True, True]  # both runners serve their slot
    # which stage ran where: stage -> slot -> generation in the pod's annotations (`kubectl get pod -o yaml`)
    notes = pod.metadata.annotations
    records = stage_records(notes)
    assert list(records) == [name for name, _ in reversed(STAGES)]  # one annotation, newest first
    where = {name: records[name] for name, _ in STAGES}
    assert [where[name]["generation"] for name, _ in STAGES] == [1, 2, 3, 4]
    for name, image in STAGES:
        slot = where[name]["slot"]
        assert where[name]["image"] == image and slot in ("slot-a", "slot-b")
    for name in ("three", "four"):  # what each slot holds now
        slot = where[name]["slot"]
        assert (
            notes[f"airflow-kruise-chain/{slot}.stage"],
            notes[f"airflow-kruise-chain/{slot}.generation"],
        ) == (
            name,
            str(where[name]["generation"]),
        )
    if shutil.which("kubectl") is not None:
        _kubectl_shows_each_marker_once(str(kubeconfig), pod.metadata.name, tmp_path)


def _kubectl_shows_each_marker_once(kubeconfig: str, pod: str, tmp_path: Path) -> None:
    def kubectl(*args: str) -> str:
        cmd = ["kubectl", "--kubeconfig", kubeconfig, "--cache-dir", str(tmp_path / "cache"), *args]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout

    seen: dict[str, list[str]] = {}
    for slot in ("slot-a", "slot-b"):
        lines = kubectl("logs", pod, "-c", slot).splitlines()
        markers = [line for line in lines if line.startswith("::kruise-chain::")]
        assert len(markers) == len(set(markers)), markers  # each runner line once
        for line in markers:
            kind, stage = line.split()[1], next(w for w in line.split() if w.startswith("stage="))
            seen.setdefault(stage.removeprefix("stage="), []).append(kind)
    for name, _ in STAGES:  # the latest generation of each slot is in its log: its start and both ends
        if name in seen:
            assert sorted(seen[name]) == ["result", "start", "stderr-end", "stderr-start"], seen
    assert len(seen) >= 2, seen
