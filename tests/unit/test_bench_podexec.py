"""bench/pipeline_dags.py's `podexec` mode (issue 40): one pod of the one image made by the DAG, one
cncf.kubernetes KubernetesPodExecOperator per stage, the pod deleted by a teardown; the stage program's BENCH
lines also in a file (an exec's output reaches no container log). Nothing timed here: the DAG's shape, the
pod's spec, the plan's rule and the stage program's marks, run by the local `sh`."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.pipeline_dags import (
    STAGE_SCRIPT,
    WORKLOADS,
    applicable,
    build_dag,
    image,
    podexec_pod,
    stage_args,
)
from bench.pipelines import plan, read_noop_timeline


def test_the_podexec_dag_makes_one_pod_execs_each_stage_in_order_and_deletes_it(tmp_path: Path) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod_exec import KubernetesPodExecOperator

    dag = build_dag("podexec", 3, "realistic-podexec-one-n3-0", "bench-0", str(tmp_path), WORKLOADS["one"])
    stages = [dag.get_task(f"s{k:02d}") for k in (1, 2, 3)]
    assert all(isinstance(s, KubernetesPodExecOperator) for s in stages)
    assert {s.pod_name for s in stages} == {"podexec-realistic-podexec-one-n3-0"}
    assert {(s.namespace, s.container_name) for s in stages} == {("bench-0", "stage")}
    for k, s in enumerate(stages, 1):  # the stage program with its arguments, and the marks file last
        assert s.command == [
            "/bin/sh",
            "-c",
            STAGE_SCRIPT,
            *stage_args(k, "/scratch", "realistic-podexec-one-n3-0", 0.2),
            "/bench/marks.log",
        ]
    up, down = dag.get_task("pod_up"), dag.get_task("pod_down")
    assert up.downstream_task_ids == {"s01", "pod_down"}
    assert stages[0].downstream_task_ids == {"s02"} and stages[1].downstream_task_ids == {"s03"}
    assert stages[2].downstream_task_ids == {"pod_down"}
    assert down.is_teardown and not any(s.is_teardown for s in stages)


@pytest.mark.parametrize("workload", ["distinct", "alternating", "skewed", "long"])
def test_podexec_runs_the_one_image_workload_only(workload: str, tmp_path: Path) -> None:
    assert not applicable("podexec", WORKLOADS[workload])
    assert applicable("chain", WORKLOADS[workload]) and applicable("podexec", WORKLOADS["one"])
    with pytest.raises(ValueError, match="one image and uniform resources only"):
        build_dag("podexec", 3, "p", "bench-0", str(tmp_path), WORKLOADS[workload])


def test_the_plan_leaves_podexec_out_of_the_workloads_it_cannot_run() -> None:
    args = argparse.Namespace(
        profiles=["realistic"],
        workloads=["distinct", "one"],
        stages=[10],
        stages_given=True,
        quick=False,
        modes=["chain", "podexec"],
        copies=1,
        copies_stages=10,
    )
    assert plan(args) == [
        ("realistic", "chain", "distinct", 10, 1),
        ("realistic", "chain", "one", 10, 1),
        ("realistic", "podexec", "one", 10, 1),
    ]


def test_the_podexec_pod_idles_in_the_one_image_with_scratch_and_the_marks_folder() -> None:
    pod = podexec_pod("podexec-x", image(1, "one"), "/tmp/marks")
    (container,) = pod["spec"]["containers"]
    assert container["image"] == image(1, "one") and container["name"] == "stage"
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/scratch", "/bench"}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {}}
    assert volumes["marks"]["hostPath"]["path"] == "/tmp/marks"
    assert pod["spec"]["restartPolicy"] == "Never"


@pytest.mark.skipif(
    shutil.which("awk") is None or shutil.which("cksum") is None, reason="needs awk and cksum"
)
def test_the_stage_program_appends_its_bench_lines_to_the_marks_file_as_it_prints_them(
    tmp_path: Path,
) -> None:
    data, shared = tmp_path / "data", tmp_path / "shared" / "p"
    data.mkdir()
    shared.mkdir(parents=True)
    marks = shared / "marks.log"
    args = stage_args(1, str(data), "p", 0)
    args[4] = "50"  # records: small
    done = subprocess.run(
        ["/bin/sh", "-c", STAGE_SCRIPT, *args, str(marks)], capture_output=True, text=True, check=True
    )
    printed = [line for line in done.stdout.splitlines() if line.startswith("BENCH ")]
    assert [line.split()[1] for line in printed] == ["start", "end"]
    assert marks.read_text().splitlines() == printed
    events = read_noop_timeline(tmp_path / "shared")
    assert [(e["kind"], e["id"], e["stage"]) for e in events] == [("start", "p", "1"), ("end", "p", "1")]
    # without the seventh argument (every other mode) nothing is written
    subprocess.run(
        ["/bin/sh", "-c", STAGE_SCRIPT, *stage_args(2, str(data), "p", 0)], capture_output=True, check=True
    )
    assert marks.read_text().splitlines() == printed
