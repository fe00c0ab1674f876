"""The follow machine of one generation (core/follow.py), without I/O: snapshots, log lines, stream ends and
time in, decisions out. Both follow loops (the worker's in core/followloop.py, the triggerer's in
triggers/output.py) only carry these decisions out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_kruise_chain.core.follow import (
    HAND_OVER_AFTER,
    REOPEN_DELAY,
    RESULT_COPY_WAIT,
    SILENT_REPLAY_AFTER,
    GenerationFollow,
    Next,
    since_seconds,
)
from airflow_kruise_chain.core.podview import StageRecord
from tests.unit.podfactory import chain_pod, running, terminated, waiting

TOKEN = "t0k"
RECORD = StageRecord(
    3, "slot-b", "acme/load:1", 1, "containerd://old", "2024-05-01T10:00:00Z", "patch", "", TOKEN
)
START = f"::kruise-chain:: start gen=3 token={TOKEN} stage=load slot=slot-b at=2024-05-01T10:00:01Z"
RESULT = (
    f"::kruise-chain:: result gen=3 token={TOKEN} stage=load slot=slot-b exit=0 reason=completed "
    "started=2024-05-01T10:00:01Z finished=2024-05-01T10:00:02Z outputs=- outputs_status=absent streams=2"
)


def pod(slot_b, *, generation: int = 3, record: StageRecord = RECORD, **kw):
    hosted = {**slot_b, "generation": generation, "stage": "load"} if slot_b is not None else None
    return chain_pod(
        records={"load": record}, slots={"slot-a": running("containerd://a"), "slot-b": hosted}, **kw
    )


def follow(**kw) -> GenerationFollow:
    return GenerationFollow("load", "slot-b", 3, TOKEN, **kw)


def test_a_waiting_slot_is_reported_once_per_reason_then_its_container_is_opened() -> None:
    f = follow()
    first = f.see(pod(waiting("ContainerCreating", "containerd://old")), 0.0)
    assert (first.next, first.report, first.status.reason) == (Next.WAIT, True, "ContainerCreating")
    assert f.see(pod(waiting("ContainerCreating", "containerd://old")), 1.0).report is False
    assert f.see(pod(waiting("PodInitializing", "containerd://old")), 2.0).report is True
    assert not f.started
    step = f.see(pod(running("containerd://new")), 3.0)
    assert step.next is Next.OPEN and step.status.container_id == "containerd://new"
    assert f.started and f.streaming == "containerd://new"
    assert f.see(pod(running("containerd://new")), 4.0).next is Next.WAIT  # its stream is open


def test_lines_are_logged_once_and_the_result_waits_for_its_copy_from_the_other_stream() -> None:
    f = follow()
    f.see(pod(running("containerd://new")), 0.0)
    step = f.read(["parked runner", START, START, "hello"], 1.0)
    assert step.lines == (START, "hello") and step.started is not None and step.next is Next.WAIT
    step = f.read([RESULT, "late stderr line"], 2.0)
    assert (
        step.next is Next.WAIT and step.at == 2.0 + RESULT_COPY_WAIT and step.lines == ("late stderr line",)
    )
    assert f.read([RESULT], 3.0).next is Next.ENDED
    assert f.output.result is not None and f.output.counted == 3


def test_a_result_whose_copy_never_comes_ends_the_follow_after_the_copy_wait() -> None:
    f = follow()
    f.see(pod(running("containerd://new")), 0.0)
    f.read([START, RESULT], 1.0)
    assert f.tick(None, 1.0 + RESULT_COPY_WAIT - 0.1).next is Next.WAIT
    assert f.tick(None, 1.0 + RESULT_COPY_WAIT).next is Next.ENDED
    # or the stream ends first: the result is all there is, the pod is not asked
    g = follow()
    g.see(pod(running("containerd://new")), 0.0)
    g.read([START, RESULT], 1.0)
    assert g.stream_ended(None, 2.0).next is Next.ENDED


def test_a_stream_cut_while_its_container_runs_is_opened_again_and_its_lines_are_not_logged_twice() -> None:
    f = follow()
    now = pod(running("containerd://new"))
    f.see(now, 0.0)
    f.read([START, "one"], 1.0)
    step = f.stream_ended(now, 2.0)
    assert (step.next, step.at) == (Next.WAIT, 2.0 + REOPEN_DELAY)
    assert f.tick(now, 2.0 + REOPEN_DELAY / 2).next is Next.WAIT
    assert f.tick(now, 2.0 + REOPEN_DELAY).next is Next.OPEN
    step = f.read([START, "one", "two"], 3.0)  # the log again from its start
    assert step.lines == ("two",) and step.started is not None


def test_a_reader_that_can_hand_over_gives_up_after_so_many_reopens_of_one_container() -> None:
    f = follow(hand_over_after=HAND_OVER_AFTER)
    now, t = pod(running("containerd://new")), 0.0
    assert f.see(now, t).next is Next.OPEN
    for _ in range(HAND_OVER_AFTER):
        t += 1.0
        assert f.stream_ended(now, t).next is Next.WAIT
        assert f.tick(now, t + REOPEN_DELAY).next is Next.OPEN
    assert f.stream_ended(now, t + 1.0).next is Next.GAVE_UP
    # the worker cannot hand over: it never gives up
    g = follow()
    g.see(now, 0.0)
    for i in range(3 * HAND_OVER_AFTER):
        assert g.stream_ended(now, float(i)).next is Next.WAIT
        assert g.tick(now, i + REOPEN_DELAY).next is Next.OPEN


def test_a_restart_resets_the_reopen_count_and_its_new_container_is_followed() -> None:
    f = follow(hand_over_after=1)
    first = pod(running("containerd://new"))
    f.see(first, 0.0)
    f.stream_ended(first, 1.0)
    f.tick(first, 2.0)  # reopened once
    stopped = f.stream_ended(pod(terminated("containerd://new", 137, "OOMKilled")), 3.0)
    assert (
        stopped.next is Next.STOPPED
    )  # the result is in the slot's history, or the restarted runner prints it
    assert f.see(pod(terminated("containerd://new", 137, "OOMKilled")), 4.0).next is Next.WAIT
    restarted = pod(running("containerd://again"))
    assert f.see(restarted, 5.0).next is Next.OPEN
    assert f.stream_ended(restarted, 6.0).next is Next.WAIT  # a new container: counted from 0 again


def test_a_ready_slot_says_nothing_of_its_generation_only_the_result_line_ends_it() -> None:
    """A slot is Ready while its runner serves it, running the stage too (no readiness probe fails on a
    healthy chain): a Ready pod neither ends the follow nor makes its stream due; the result line does."""
    f = follow()
    f.see(pod(running("containerd://new")), 0.0)
    f.read([START], 1.0)
    ready = f.see(pod(running("containerd://new", ready=True)), 2.0)
    assert (ready.next, ready.at) == (Next.WAIT, 1.0 + SILENT_REPLAY_AFTER)  # only the silence's limit
    assert f.tick(pod(running("containerd://new", ready=True)), 60.0).next is Next.WAIT  # still streaming
    f.read([RESULT, RESULT], 61.0)
    assert f.output.complete


def test_a_silent_stream_asks_the_runner_for_a_result_rotated_out_of_the_log_once() -> None:
    """A stage that ended while no one read its stream (the worker died, the task was deferred) may have had
    its result line rotated out of the slot's log since: the stream opened now shows none, and the pod cannot
    say the generation ended. Its runner is asked to print the result again from its records."""
    f = follow()
    assert f.see(pod(running("containerd://new", ready=True)), 0.0).next is Next.OPEN
    step = f.read(["later output of another generation"], 1.0)  # the log as rotated: no line of generation 3
    assert step.at == 1.0 + SILENT_REPLAY_AFTER
    assert f.tick(pod(running("containerd://new", ready=True)), 60.0).next is Next.WAIT  # not silent enough
    replay = f.tick(pod(running("containerd://new", ready=True)), step.at)
    assert (replay.next, f.replayed, f.streaming) == (Next.REPLAY, "containerd://new", "containerd://new")
    later = 2 * step.at + SILENT_REPLAY_AFTER
    assert f.tick(None, later).next is Next.WAIT and f.replay_at is None  # once per container
    assert f.read([RESULT, RESULT], later).next is Next.ENDED  # the runner printed it again
    # a new container (the slot restarted) is asked again when its stream is silent, a stream with the
    # result line never
    g = follow()
    g.see(pod(running("containerd://new")), 0.0)
    g.read([START, "working", RESULT], 5.0)
    assert g.replay_at is None


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        (None, Next.LOST),
        (pod(running("containerd://new"), deleting=True), Next.LOST),
        (pod(running("containerd://new"), phase="Failed"), Next.LOST),
        (pod(waiting("ErrImagePull", "containerd://old", message="not found")), Next.FAILED_TO_START),
        (pod(running("containerd://later"), generation=5), Next.MOVED_ON),  # the slot hosts another one
        (
            pod(running("containerd://new"), record=StageRecord(7, "slot-b", "acme/load:1", 2, "", "", "go")),
            Next.MOVED_ON,  # the stage was swapped in again (another try)
        ),
    ],
)
def test_what_ends_a_follow_without_its_stream(snapshot, expected) -> None:
    f = follow()
    assert f.see(snapshot, 0.0).next is expected
    g = follow()
    g.see(pod(running("containerd://new")), 0.0)
    assert g.stream_ended(snapshot, 1.0).next is expected  # the same once its stream ended


def test_an_annotations_only_swap_streams_from_just_before_it() -> None:
    now = datetime(2024, 5, 1, 10, 0, 10, 500000, tzinfo=UTC)
    assert follow(swapped_at="2024-05-01T10:00:00Z", go=True).since(now) == 12
    assert follow(swapped_at="2024-05-01T10:00:00Z").since(now) is None  # a restart: the container's start
    assert since_seconds("garbage", now) is None
    assert since_seconds("2024-05-01T10:00:30Z", now) == 1  # a clock behind the swap's: at least 1 s
