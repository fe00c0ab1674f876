"""The idle slot prepared ahead (`prepare_next`, on by default): while stage N runs, its task patches the
other slot's image to the next stage's, so that stage's swap changes annotations only; with the go by exec
(`go_via_exec`, on by default), stage N's successful end already prepares its own slot for stage N+2 while
N+1 is to say go into the other one (two ahead). A wrong prediction (a branch, a retry) still runs the right
stage once; a prepared slot holds no generation and stays parked until go."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R
from kruise_local.validation import memory_bytes

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.resources import PARKED_REQUESTS
from tests.e2e.conftest import xcoms
from tests.e2e.inline import (
    FAST_POD,
    Failures,
    pod_events,
    run_inline,
    stage_records,
    start_markers,
    task_states,
)

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")
IMAGES = [
    "busybox:1.36",
    "alpine:3.20",
    "debian:bookworm-slim",
    "python:3.11-slim",
    "ghcr.io/airflow-kruise-chain/report:0.9",
]
STEP = r"""
n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$CHAIN_SCRATCH/count"
printf '{"count": %s}' $((n + 1)) > "$CHAIN_OUTPUT"
sleep 1
"""
SIZE = {"requests": {"memory": "64Mi"}, "limits": {"memory": "96Mi"}}


def versions(history: list) -> list[dict[str, Any]]:
    return [o for k, r, o in history if r is R.PODS and k in ("ADDED", "MODIFIED")]


def image_changes(history: list) -> list[tuple[str, str]]:
    """(slot, new image) of every image change between consecutive versions of the chain pod."""
    changes, before = [], None
    for pod in versions(history):
        images = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        if before is not None:
            changes += [(slot, image) for slot, image in images.items() if before[slot] != image]
        before = images
    return changes


def assert_no_back_off(history: list) -> None:
    events = [o for k, r, o in history if r is R.EVENTS and o["involvedObject"]["kind"] == "Pod"]
    assert not [e for e in events if e["reason"] == "BackOff"], [e["message"] for e in events]
    waiting = {
        ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        for pod in versions(history)
        for cs in (pod.get("status") or {}).get("containerStatuses") or ()
    }
    assert "CrashLoopBackOff" not in waiting


def timed_pod_events(cluster: Any) -> list[tuple[float, str, Any, dict[str, Any]]]:
    """`pod_events` with the time each event was recorded."""
    history: list[tuple[float, str, Any, dict[str, Any]]] = []
    cluster.call(
        lambda: cluster.store.listen(lambda kind, r, obj, old: history.append((time.time(), kind, r, obj)))
    )
    return history


def task_start_dates(run: Any) -> dict[str, datetime]:
    """task_id -> start_date of a finished run's task instances."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        return {ti.task_id: ti.start_date for ti in tis}


def image_changed_at(timed: list) -> list[tuple[float, str, str]]:
    """(time, slot, new image) of every image change in the recorded versions of the chain pod."""
    changes, before = [], None
    for at, kind, r, pod in timed:
        if r is not R.PODS or kind not in ("ADDED", "MODIFIED"):
            continue
        images = {c["name"]: c["image"] for c in pod["spec"]["containers"]}
        if before is not None:
            changes += [(at, slot, image) for slot, image in images.items() if before[slot] != image]
        before = images
    return changes


def _image(pod: dict[str, Any], slot: str) -> str:
    return next(c["image"] for c in pod["spec"]["containers"] if c["name"] == slot)


def requests(pod: dict[str, Any], slot: str) -> int:
    container = next(c for c in pod["spec"]["containers"] if c["name"] == slot)
    return memory_bytes(((container.get("resources") or {}).get("requests") or {}).get("memory", "0"))


def sized_chain(dag_id: str, script: str) -> Any:
    """A DAG of one chain of stages s1..s5 in a row, one on each of IMAGES, each running `script`, sized."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            tasks = [
                chain.stage(f"s{k}", image=image, cmds=["/bin/sh", "-c", script], resources=SIZE)
                for k, image in enumerate(IMAGES, start=1)
            ]
            for before, after in itertools.pairwise(tasks):
                before >> after
    return dag


def test_the_next_stage_only_says_go(e2e_cluster, capfd):
    history = pod_events(e2e_cluster)
    timed = timed_pod_events(e2e_cluster)
    names = [f"s{k}" for k in range(1, len(IMAGES) + 1)]
    run = run_inline(sized_chain("prepare_next", STEP))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]

    # each stage ran once, in order, on its own image, reading the one before's data
    results = xcoms(run)
    assert [results[f"c.{s}"]["outputs"] for s in names] == [{"count": k} for k in range(1, 6)]
    assert [results[f"c.{s}"]["image"] for s in names] == IMAGES
    uid = versions(history)[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == list(enumerate(names, start=1))

    # the pod starts on s1's and s2's images; the ends of s1, s2 and s3 prepared their own slots for s3, s4
    # and s5 (two ahead), each before the next stage's task started: no stage's swap patched an image, and
    # each stage's own prepare found the next stage's image held already
    assert out.count("via annotations only") == 5
    assert "via image patch" not in out
    assert out.count("::kruise-chain:: prepare slot=") == 3
    for k, slot in ((1, "slot-a"), (2, "slot-b"), (3, "slot-a")):
        assert (
            f"prepare slot={slot} image={IMAGES[k + 1]} for the stage after next 's{k + 2}' (two ahead: "
            f"the next stage 's{k + 1}' says go into {'slot-b' if slot == 'slot-a' else 'slot-a'})"
        ) in out, out[-3000:]
    assert "for the next stage 's" not in out.replace("(ahead, for the next stage", "")
    assert out.count("::kruise-chain:: not preparing: a slot already holds") == 4  # s1 to s4's own
    assert image_changes(history) == [("slot-a", IMAGES[2]), ("slot-b", IMAGES[3]), ("slot-a", IMAGES[4])]
    started = task_start_dates(run)
    changed = image_changed_at(timed)
    assert [(slot, image) for _, slot, image in changed] == image_changes(history)
    for (at, _, _), k in zip(changed, (1, 2, 3), strict=True):
        # slot X had stage k+2's image before stage k+1's task started (it started after stage k's task ended)
        assert datetime.fromtimestamp(at, UTC) < started[f"c.s{k + 1}"], (k, at, started)
    # and before stage k+1 was swapped in: the image change comes before s(k+1)'s record in the pod
    pods = versions(history)
    for k, slot in ((1, "slot-a"), (2, "slot-b"), (3, "slot-a")):
        prepared = next(i for i, pod in enumerate(pods) if _image(pod, slot) == IMAGES[k + 1])
        swapped = next(
            i for i, pod in enumerate(pods) if f"s{k + 1}" in stage_records(pod["metadata"]["annotations"])
        )
        assert prepared < swapped, (k, prepared, swapped)
    assert_no_back_off(history)

    # nor did it resize: the ends of s1 to s4 each parked their slot, then sized the next stage's slot ahead;
    # only s1 (no stage before it) sized its own slot at its swap
    assert out.count("(ahead, for the next stage") == 4, out[-3000:]
    for name in names[1:]:
        assert f"(ahead, for the next stage '{name}'" in out
    assert out.count("(for stage '") == 1 and "(for stage 's1')" in out
    # and the pod never reserved two stages at once: in every version one slot at least is parked
    parked = memory_bytes(PARKED_REQUESTS["memory"])
    assert all(parked in (requests(pod, "slot-a"), requests(pod, "slot-b")) for pod in versions(history))

    # a prepared slot holds no generation, and stays parked while the stage before it holds its size
    prepared = [
        (pod, slot)
        for pod in versions(history)
        for slot in ("slot-a", "slot-b")
        if ChainPod.of(pod).slot(slot).prepared
    ]
    assert prepared
    for pod, slot in prepared:
        other = "slot-b" if slot == "slot-a" else "slot-a"
        assert not pod["metadata"]["annotations"].get(f"airflow-kruise-chain/{slot}.run")
        assert requests(pod, slot) == parked or requests(pod, other) == parked, (slot, pod["spec"])


def test_prepare_next_off_patches_at_the_swap(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("prepare_next_off", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, prepare_next=False, **FAST_POD) as chain:
            tasks = [
                chain.stage(f"s{k}", image=image, cmds=["/bin/sh", "-c", STEP])
                for k, image in enumerate(IMAGES[:3], start=1)
            ]
            tasks[0] >> tasks[1] >> tasks[2]
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert "prepare slot=" not in out
    assert out.count("via image patch") == 1
    assert image_changes(history) == [("slot-a", IMAGES[2])]


def test_a_go_by_annotation_prepares_only_the_next_stage_while_the_stage_runs(e2e_cluster, capfd):
    """Without the go by exec, a stage's end prepares nothing two ahead: the next stage's go by annotation
    waits for the kubelet's sync of the pod, which a restart of the other slot would hold."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("prepare_annotation", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, go_via_exec=False, **FAST_POD) as chain:
            tasks = [
                chain.stage(f"s{k}", image=image, cmds=["/bin/sh", "-c", STEP])
                for k, image in enumerate(IMAGES[:4], start=1)
            ]
            tasks[0] >> tasks[1] >> tasks[2] >> tasks[3]
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert [xcoms(run)[f"c.s{k}"]["outputs"] for k in range(1, 5)] == [{"count": k} for k in range(1, 5)]
    assert "two ahead" not in out
    assert "prepare slot=slot-a image=debian:bookworm-slim for the next stage 's3'" in out  # at s2's go
    assert out.count("via annotations only") == 4 and "via image patch" not in out
    assert image_changes(history) == [("slot-a", IMAGES[2]), ("slot-b", IMAGES[3])]
    assert_no_back_off(history)


def test_a_deferred_stage_s_trigger_prepares_two_ahead_as_its_task_would(e2e_cluster, capfd, caplog):
    """Deferred right after their swaps (`defer_after=0`), the stages end in the trigger, which parks, sizes
    the next stage's slot and prepares the ended slot for the stage after next, as a stage task does."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("prepare_deferred", schedule=None, start_date=START) as dag:
        with KruiseChain(
            "c", namespace="default", prewarm=False, deferrable=True, defer_after=0, **FAST_POD
        ) as chain:
            tasks = [
                chain.stage(f"s{k}", image=image, cmds=["/bin/sh", "-c", STEP], resources=SIZE)
                for k, image in enumerate(IMAGES[:4], start=1)
            ]
            tasks[0] >> tasks[1] >> tasks[2] >> tasks[3]
    run = run_inline(dag)
    out = capfd.readouterr().out + "\n" + caplog.text
    assert str(run.state) == "success", out[-3000:]
    assert [xcoms(run)[f"c.s{k}"]["outputs"] for k in range(1, 5)] == [{"count": k} for k in range(1, 5)]
    uid = versions(history)[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == [(k, f"s{k}") for k in range(1, 5)]
    assert out.count("running trigger in line") >= 4  # each stage ended in its trigger
    for k, slot in ((1, "slot-a"), (2, "slot-b")):
        line = f"prepare slot={slot} image={IMAGES[k + 1]} for the stage after next 's{k + 2}' (two ahead"
        assert out.count(line) == 1, (line, out[-3000:])
    assert out.count("via annotations only") == 4 and "via image patch" not in out
    assert image_changes(history) == [("slot-a", IMAGES[2]), ("slot-b", IMAGES[3])]
    assert_no_back_off(history)


def test_a_branch_that_skips_the_predicted_stage_runs_the_chosen_one_once(e2e_cluster, capfd):
    from airflow.sdk import DAG, task

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("prepare_branch", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            s1 = chain.stage("s1", image=IMAGES[0], cmds=["/bin/sh", "-c", STEP])
            s2 = chain.stage("s2", image=IMAGES[1], cmds=["/bin/sh", "-c", STEP])
            predicted = chain.stage("predicted", image=IMAGES[2], cmds=["/bin/sh", "-c", STEP])
            chosen = chain.stage("chosen", image=IMAGES[3], cmds=["/bin/sh", "-c", STEP])

            @task.branch
            def choose() -> str:
                return "c.chosen"

            s1 >> s2 >> choose() >> [predicted, chosen]
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    states = task_states(run)
    assert states["c.predicted"][0] == "skipped" and states["c.chosen"][0] == "success"
    assert xcoms(run)["c.chosen"]["outputs"] == {"count": 3}

    uid = versions(history)[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == [(1, "s1"), (2, "s2"), (3, "chosen")]
    # s1's end prepared slot-a for 'predicted' (declared first: the stage after next), so s2's prepare
    # found it held; 'chosen' swapped itself in with a normal patch, and 'predicted' never ran
    assert "prepare slot=slot-a image=debian:bookworm-slim for the stage after next 'predicted'" in out
    assert "not preparing: a slot already holds debian:bookworm-slim (stage 'predicted')" in out
    assert out.count("via image patch") == 1
    assert image_changes(history) == [("slot-a", IMAGES[2]), ("slot-a", IMAGES[3])]
    assert_no_back_off(history)


FLAKY = r"""
if [ ! -f "$CHAIN_SCRATCH/flaky.marker" ]; then
  echo "$CHAIN_GENERATION" > "$CHAIN_SCRATCH/flaky.marker"
  sleep 1
  exit 1
fi
n=$(cat "$CHAIN_SCRATCH/count")
echo $((n + 1)) > "$CHAIN_SCRATCH/count"
printf '{"count": %s}' $((n + 1)) > "$CHAIN_OUTPUT"
"""


def test_a_retried_stage_runs_again_and_the_prepared_stage_once(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("prepare_retry", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            s1 = chain.stage("s1", image=IMAGES[0], cmds=["/bin/sh", "-c", STEP])
            s2 = chain.stage("s2", image=IMAGES[1], cmds=["/bin/sh", "-c", FLAKY], retries=1, retry_delay=0)
            s3 = chain.stage("s3", image=IMAGES[2], cmds=["/bin/sh", "-c", STEP], resources=SIZE)
            s1 >> s2 >> s3
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert task_states(run)["c.s2"][:2] == ("success", 2)
    assert xcoms(run)["c.s3"]["outputs"] == {"count": 3}

    uid = versions(history)[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == [
        (1, "s1"),
        (2, "s2"),
        (3, "s2"),
        (4, "s3"),
    ]
    # s1's end prepared slot-a for s3 (two ahead); both tries of s2 found it prepared already; s3 said go
    assert out.count("prepare slot=slot-a") == 1
    assert "prepare slot=slot-a image=debian:bookworm-slim for the stage after next 's3'" in out
    # only a stage that succeeded sizes the next one's slot: s2's second try, not its first
    assert out.count("(ahead, for the next stage 's3'") == 1, out[-3000:]
    assert "not preparing: a slot already holds debian:bookworm-slim (stage 's3')" in out
    assert out.count("via annotations only") == 4 and "via image patch" not in out
    assert image_changes(history) == [("slot-a", IMAGES[2])]
    assert_no_back_off(history)


def test_a_prepared_image_that_cannot_be_pulled_fails_its_stage_at_once(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    failures = Failures()
    missing = "ghcr.io/acme/absent:1.0"
    with DAG("prepare_missing", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            s1 = chain.stage("s1", image=IMAGES[0], cmds=["/bin/sh", "-c", STEP])
            s2 = chain.stage("s2", image=IMAGES[1], cmds=["/bin/sh", "-c", STEP])
            s3 = chain.stage("s3", image=missing, cmds=["/bin/sh", "-c", STEP], on_failure_callback=failures)
            s1 >> s2 >> s3
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "failed"
    assert task_states(run)["c.s3"][:2] == ("failed", 1)
    assert (
        f"prepare slot=slot-a image={missing}" in out
    )  # s1's end prepared it; the kubelet could not pull it
    error = str(failures.errors["c.s3"])
    assert "ErrImagePull" in error or "ImagePullBackOff" in error, error
    assert missing in error and "swap timeout" not in error, error  # the pull error, not a timeout
    uid = versions(history)[0]["metadata"]["uid"]
    assert [(g, s) for g, s, _ in start_markers(e2e_cluster, uid)] == [(1, "s1"), (2, "s2")]
