"""Faults during a chain's DAG run on the local cluster: what the task does, what Airflow shows, and that no
stage ran twice and no finished stage's output was lost.

Stage starts are counted from the runner's start markers in the containers' log files on the node (one per
generation run); stage data is checked by later stages reading earlier stages' files in scratch, and in XCom.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kruise_local import LocalCluster
from kruise_local import resources as R
from kruise_local.errors import ApiError

from airflow_kruise_chain.core.constants import SCRATCH_VOLUME
from airflow_kruise_chain.core.wire import slot_annotation
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow

START = __import__("pendulum").datetime(2026, 1, 1, tz="UTC")

PREPARE = r"""
seq 1 100 > "$CHAIN_SCRATCH/numbers.txt"
echo "prepared $(wc -l < "$CHAIN_SCRATCH/numbers.txt") numbers"
printf '{"numbers": %s}' "$(wc -l < "$CHAIN_SCRATCH/numbers.txt")" > "$CHAIN_OUTPUT"
"""


def chain_pod(cluster: LocalCluster) -> dict[str, Any]:
    """The run's one chain pod (in namespace default), or AssertionError if there is not exactly one."""
    pods = cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def slot_running(pod: dict[str, Any], stage: str) -> str | None:
    """The slot whose annotations say it hosts `stage`."""
    annotations = pod["metadata"].get("annotations") or {}
    return next(
        (s for s in ("slot-a", "slot-b") if annotations.get(slot_annotation(s, "stage")) == stage), None
    )


def when_file_appears(cluster: LocalCluster, name: str, action: Any) -> threading.Thread:
    """In the background: once the chain pod's scratch holds `name`, call `action(pod)` (once)."""

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            pods = cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))
            for pod in pods:
                path = cluster.root / "pods" / pod["metadata"]["uid"] / "volumes" / SCRATCH_VOLUME / name
                if Path(path).exists():
                    action(pod)
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def stage_starts(cluster: LocalCluster, history: list) -> list[tuple[int, str]]:
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    return [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])]


# -- (a) the stage's process is killed with SIGKILL ------------------------------------------------------
WORK = r"""
test -s "$CHAIN_SCRATCH/numbers.txt" || { echo "numbers.txt from prepare is gone" >&2; exit 2; }
if [ ! -f "$CHAIN_SCRATCH/work.partial" ]; then
  echo "generation $CHAIN_GENERATION: working, then killed"
  echo "$CHAIN_GENERATION" > "$CHAIN_SCRATCH/work.partial"
  sleep 60
fi
sum=$(awk '{ s += $1 } END { print s }' "$CHAIN_SCRATCH/numbers.txt")
echo "generation $CHAIN_GENERATION: sum $sum"
printf '{"sum": %s, "killed_generation": %s}' "$sum" "$(cat "$CHAIN_SCRATCH/work.partial")" > "$CHAIN_OUTPUT"
"""


def test_a_stage_killed_with_sigkill_fails_with_137_and_its_retry_reruns_it_in_place(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    retried = Failures()
    with DAG("fault_sigkill", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            prepare = chain.stage("prepare", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            work = chain.stage(
                "work",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", WORK],
                retries=1,
                retry_delay=0,
                on_retry_callback=retried,
            )
            prepare >> work
    killed: list[int] = []
    killer = when_file_appears(
        cluster,
        "work.partial",
        lambda pod: killed.append(
            cluster.kill_processes("default", pod["metadata"]["name"], slot_running(pod, "work") or "", 9)
        ),
    )
    run = run_inline(dag)
    killer.join(timeout=5)
    out = capfd.readouterr().out

    assert killed and killed[0] >= 1  # the stage's processes were SIGKILLed
    assert str(run.state) == "success", out[-3000:]
    states = task_states(run)
    assert states["c.work"][:2] == ("success", 2)  # failed once, the Airflow retry succeeded
    error = str(retried.errors["c.work"])
    assert "exit code 137" in error and "SIGKILL" in error, error  # what Airflow shows for the first try
    assert "generation 2: working, then killed" in error  # with the stage's last lines
    assert "stage 'work' failed with exit code 137" in out  # in the task log as well

    # the killed generation was not re-run by its runner; the retry is a new generation in the same pod
    assert stage_starts(cluster, history) == [(1, "prepare"), (2, "work"), (3, "work")]
    assert len([o for k, r, o in history if r is R.PODS and k == "ADDED"]) == 1
    results = xcoms(run)
    assert results["c.prepare"]["outputs"] == {"numbers": 100}
    # prepare's file and the killed try's file both survived in scratch
    assert results["c.work"]["outputs"] == {"sum": 5050, "killed_generation": 2}
    assert results["c.work"]["generation"] == 3


# -- (b) the stage exits non-zero ------------------------------------------------------------------------
def test_a_stage_exiting_non_zero_fails_with_its_exit_code_and_last_lines(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    broken = 'echo "read $(wc -l < "$CHAIN_SCRATCH/numbers.txt") numbers"; echo "bad record 17" >&2; exit 4'
    with DAG("fault_exit_code", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            prepare = chain.stage("prepare", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            check = chain.stage(
                "check", image="alpine:3.20", cmds=["/bin/sh", "-c", broken], on_failure_callback=failures
            )
            never = chain.stage("never", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo never"])
            prepare >> check >> never
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.check"][:2] == ("failed", 1)
    assert states["c.never"][0] == "upstream_failed"
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.check"])
    assert "stage 'check' failed with exit code 4" in error
    assert error.splitlines()[-2:] == ["read 100 numbers", "bad record 17"], error  # stdout and stderr
    assert "stage 'check' failed with exit code 4" in out
    results = xcoms(run)
    assert results["c.check"]["exit_code"] == 4
    assert results["c.prepare"]["outputs"] == {"numbers": 100}  # the finished stage's result is intact
    assert stage_starts(cluster, history) == [(1, "prepare"), (2, "check")]


# -- (c) the stage exceeds its memory limit --------------------------------------------------------------
HOG = r"""
for i in 1 2 3 4 5 6 7; do echo "hog line $i"; done
echo "allocating"
awk 'BEGIN { s = "x"; for (i = 0; i < 29; i++) s = s s; print length(s) }'
echo "not reached"
"""


def test_a_stage_over_its_memory_limit_fails_naming_oomkilled(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    with DAG("fault_oom", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            prepare = chain.stage("prepare", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            hog = chain.stage(
                "hog",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", HOG],
                resources={"limits": {"memory": "64Mi"}},
                on_failure_callback=failures,
            )
            prepare >> hog
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.hog"][:2] == ("failed", 1)
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.hog"])
    assert "OOMKilled" in error and "137" in error, error
    assert "more memory than its slot's limit of 64Mi" in error, error  # the limit it ran into
    assert error.endswith(
        "last lines:\n" + "\n".join([f"hog line {i}" for i in range(1, 8)] + ["allocating"])
    )
    assert xcoms(run)["c.hog"]["log_tail"] == [f"hog line {i}" for i in range(1, 8)] + ["allocating"]
    assert "OOMKilled" in out
    assert "not reached" not in out
    assert xcoms(run)["c.prepare"]["outputs"] == {"numbers": 100}
    assert stage_starts(cluster, history) == [(1, "prepare"), (2, "hog")]  # not re-run after the kill


# -- (d) the stage's image does not exist ----------------------------------------------------------------
def test_a_missing_image_fails_the_stage_naming_the_pull_error(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    missing = "ghcr.io/acme/absent:1.0"
    with DAG("fault_missing_image", schedule=None, start_date=START) as dag:
        # the first two stages' images are the pod's initial slot images: the missing one is swapped in third
        # (by its own swap: tests/e2e/test_prepare.py has the case of a missing image prepared ahead)
        with KruiseChain(
            "c", namespace="default", prewarm=False, swap_timeout=60, prepare_next=False, **FAST_POD
        ) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            three = chain.stage(
                "three", image=missing, cmds=["/bin/sh", "-c", "echo three"], on_failure_callback=failures
            )
            one >> two >> three
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.three"][:2] == ("failed", 1)
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.three"])
    assert "ErrImagePull" in error or "ImagePullBackOff" in error, error
    assert missing in error and "not found" in error, error  # which image, and the registry's answer
    assert "swap timeout" not in error  # it failed on the pull error, not by waiting out the swap timeout
    assert f"could not start in slot-a (generation 3, image {missing}): ErrImagePull" in out  # task log
    reasons = [
        ((s.get("state") or {}).get("waiting") or {}).get("reason")
        for k, r, o in history
        if r is R.PODS and k == "MODIFIED"
        for s in o["status"].get("containerStatuses") or []
    ]
    assert "ErrImagePull" in reasons  # what the kubelet reported
    assert stage_starts(cluster, history) == [(1, "one"), (2, "two")]
    assert xcoms(run)["c.one"]["outputs"] == {"numbers": 100}


# -- (e) the API server answers 409 and 500 at random ----------------------------------------------------
FIRST = r"""
seq 1 50 > "$CHAIN_SCRATCH/a.txt"
printf '{"lines": %s}' "$(wc -l < "$CHAIN_SCRATCH/a.txt")" > "$CHAIN_OUTPUT"
"""
SECOND = r"""
awk '{ print $1 * 2 }' "$CHAIN_SCRATCH/a.txt" > "$CHAIN_SCRATCH/b.txt"
printf '{"lines": %s}' "$(wc -l < "$CHAIN_SCRATCH/b.txt")" > "$CHAIN_OUTPUT"
"""
THIRD = r"""
printf '{"total": %s}' "$(awk '{ s += $1 } END { print s }' "$CHAIN_SCRATCH/b.txt")" > "$CHAIN_OUTPUT"
"""


def test_random_409_and_500_answers_during_a_whole_run_change_nothing(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    with DAG("fault_api_errors", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=True, swap_timeout=120, **FAST_POD) as chain:
            first = chain.stage("first", image="busybox:1.36", cmds=["/bin/sh", "-c", FIRST])
            second = chain.stage("second", image="alpine:3.20", cmds=["/bin/sh", "-c", SECOND])
            third = chain.stage(
                "third", image="ghcr.io/airflow-kruise-chain/report:0.9", cmds=["/bin/sh", "-c", THIRD]
            )
            first >> second >> third
    cluster.set_random_faults(conflict=0.15, error=0.15, seed=11)
    random_fault = cluster.fault
    assert random_fault is not None
    injected: list[tuple[str, int]] = []
    first_patch = [True]

    def fault(request: Any) -> Any:
        if request.method == "PATCH" and first_patch[0]:  # the conflict path for certain, then at random
            first_patch[0] = False
            err: Any = ApiError(409, "Operation cannot be fulfilled: the object has been modified (injected)")
        else:
            err = random_fault(request)
        if err is not None:
            injected.append((request.method, err.code))
        return err

    cluster.fault = fault
    try:
        run = run_inline(dag)
    finally:
        cluster.fault = None
    out = capfd.readouterr().out

    assert str(run.state) == "success", out[-3000:]
    assert {ti: st[:2] for ti, st in task_states(run).items()} == {
        t: ("success", 1) for t in ("c.setup", "c.prewarm", "c.first", "c.second", "c.third", "c.teardown")
    }  # no Airflow retry was needed: the hook and the driver absorbed every fault
    codes = [code for _, code in injected]
    assert codes.count(500) >= 3 and codes.count(409) >= 1, injected
    assert "Kubernetes API:" in out and "failed (HTTP 500" in out  # each retry is logged in the task log

    assert stage_starts(cluster, history) == [(1, "first"), (2, "second"), (3, "third")]  # each exactly once
    results = xcoms(run)
    assert results["c.first"]["outputs"] == {"lines": 50}
    assert results["c.second"]["outputs"] == {"lines": 50}
    assert results["c.third"]["outputs"] == {"total": 2550}  # read second's file, made from first's
    posts = [(p.rsplit("/", 1)[-1], c) for m, p, c in cluster.audit if m == "POST" and c == 201]
    assert [kind for kind, _ in posts].count("pods") == 1  # one chain pod
    assert [kind for kind, _ in posts].count("configmaps") == 1  # the runner's, made once whatever the 500s
    assert [kind for kind, _ in posts].count("imagepulljobs") == 3  # one per image, none twice
    applied = [
        c for m, p, c in cluster.audit if m == "PATCH" and p.endswith("/pods/" + chain_pod_name(history))
    ]
    # one swap patch per stage applied (none lost, none twice), and each prepare (third's, at first's end)
    assert applied.count(200) == 3 + out.count("::kruise-chain:: prepare slot="), applied


def chain_pod_name(history: list) -> str:
    return next(o for k, r, o in history if r is R.PODS and k == "ADDED")["metadata"]["name"]


# -- (f) an ImagePullJob fails on the node ---------------------------------------------------------------
@pytest.mark.parametrize("on_unavailable", ["fail", "skip"])
def test_a_failed_image_pull_job_fails_prewarm_naming_image_and_node(e2e_cluster, capfd, on_unavailable):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    failures = Failures()
    absent = "ghcr.io/acme/absent:1.0"  # not in the image catalogue: every pull of it fails
    with DAG(f"fault_prewarm_{on_unavailable}", schedule=None, start_date=START) as dag:
        with KruiseChain(
            "c", namespace="default", prewarm=True, on_prewarm_unavailable=on_unavailable, **FAST_POD
        ) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            three = chain.stage("three", image=absent, cmds=["/bin/sh", "-c", "echo three"])
            one >> two >> three
        chain.prewarm_task.on_failure_callback = [failures]
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.prewarm"][:2] == ("failed", 1)
    assert {states[f"c.{s}"][0] for s in ("one", "two", "three")} == {"upstream_failed"}  # no stage ran
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.prewarm"])
    assert f"pulling {absent} failed on kruise-local" in error, error  # the image and the node
    assert "1 of 1 pull(s) failed" in error and "kubectl get nodeimage" in error, error  # where to look
    assert "::kruise-chain:: prewarmed busybox:1.36" in out  # the other images were prewarmed
    jobs = {o["spec"]["image"]: o for k, r, o in history if r is R.IMAGE_PULL_JOBS and k == "MODIFIED"}
    assert (jobs[absent]["status"].get("failed"), jobs["busybox:1.36"]["status"].get("succeeded")) == (1, 1)
    assert stage_starts(cluster, history) == []


def test_a_retried_prewarm_pulls_again_and_succeeds(e2e_cluster, capfd):
    """A prewarm that failed (the image was not in the registry yet) succeeds on its retry: each try has its
    own ImagePullJobs, so the retry does not find try 1's failed job and fail again at once."""
    from datetime import timedelta

    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    late = "ghcr.io/acme/late:1.0"  # pushed to the registry only after the first pull failed
    with DAG("fault_prewarm_retry", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=True, **FAST_POD) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            three = chain.stage("three", image=late, cmds=["/bin/sh", "-c", "echo three"])
            one >> two >> three
        chain.prewarm_task.retries = 1
        chain.prewarm_task.retry_delay = timedelta(0)
        chain.prewarm_task.on_retry_callback = [lambda _context: cluster.catalogue.add({"ref": late})]
    try:
        run = run_inline(dag)
    finally:
        cluster.catalogue.remove(late)
    out = capfd.readouterr().out

    states = task_states(run)
    assert str(run.state) == "success", (states, out[-3000:])
    assert states["c.prewarm"][:2] == ("success", 2)
    assert {states[f"c.{s}"][0] for s in ("one", "two", "three")} == {"success"}
    jobs = {o["metadata"]["name"]: o for k, r, o in history if r is R.IMAGE_PULL_JOBS and k == "MODIFIED"}
    late_jobs = sorted(
        (o["status"].get("failed", 0), o["status"].get("succeeded", 0))
        for o in jobs.values()
        if o["spec"]["image"] == late
    )
    assert late_jobs == [(0, 1), (1, 0)], late_jobs  # try 1's job failed; try 2 made a new one that succeeded
    assert len(stage_starts(cluster, history)) == 3
