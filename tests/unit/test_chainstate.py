"""Monitoring state: memory from PodMetrics, stage timelines, the chain view, the dashboard link."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from airflow_kruise_chain.core.chainstate import StageMonitor, StageTrack, chain_view, stage_phases
from airflow_kruise_chain.core.metrics import (
    SHORTEST_WINDOW,
    MemorySampler,
    container_memory,
    max_reads,
    sample_time,
)
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.status import StageResult, StartMarker
from airflow_kruise_chain.links import pod_dashboard_url
from tests.unit.podfactory import chain_pod, running


def metrics(**usage: str) -> dict:
    return {"containers": [{"name": n.replace("_", "-"), "usage": {"memory": m}} for n, m in usage.items()]}


def track(stage: str, slot: str, generation: int, second: int, **extra: object) -> dict:
    base = f"2026-01-01T00:00:{second:02d}"
    return StageTrack(
        chain="etl",
        namespace="ns",
        pod="etl-1",
        stage=stage,
        slot=slot,
        generation=generation,
        image=f"img/{stage}:1",
        try_number=1,
        action="patch",
        state="succeeded",
        swapped_at=f"{base}.100000+00:00",
        container_stopped_at=f"{base}Z",
        container_started_at=f"{base}Z",
        started_at=f"{base}.400000+00:00",
        finished_at=f"{base}.900000+00:00",
        exit_code=0,
        **extra,
    ).to_xcom()


def test_container_memory_reads_kubernetes_quantities() -> None:
    assert container_memory(metrics(slot_a="2048Ki", slot_b="3Mi", other="1000")) == {
        "slot-a": 2 * 1024 * 1024,
        "slot-b": 3 * 1024 * 1024,
        "other": 1000,
    }
    assert container_memory(None) == {}


def test_sampler_keeps_the_peaks_and_gives_up_without_metrics() -> None:
    readings = iter([metrics(slot_a="1Mi", slot_b="1Mi"), metrics(slot_a="5Mi", slot_b="1Mi"), None])
    sampler = MemorySampler(lambda: next(readings, None), "slot-a", interval=60, max_misses=2)
    for _ in range(5):
        sampler.sample()
    peak = sampler.peak()
    assert (peak.container_bytes, peak.pod_bytes, peak.samples) == (5 * 2**20, 6 * 2**20, 2)
    assert sampler.misses == 2  # stopped asking after two reads without metrics

    never = MemorySampler(lambda: None, "slot-a", interval=0.01)
    with never:
        pass
    assert never.peak().container_bytes is None


def test_phases_clamp_whole_second_kubelet_times_into_the_swap() -> None:
    data = StageTrack.from_xcom(track("transform", "slot-b", 2, 5))
    phases = {p["phase"]: p for p in stage_phases(data, "2026-01-01T00:00:09+00:00")}
    # the kubelet's 00:05 (truncated) is before the swap at 00:05.1: clamped to the swap
    assert phases["swap"]["seconds"] == 0 and phases["pull"]["seconds"] == 0.3
    assert phases["run"]["seconds"] == 0.5
    assert phases["park"]["start"] == "2026-01-01T00:00:05.900000+00:00" and phases["park"]["seconds"] == 3.1


def test_chain_view_without_the_pod_rebuilds_slots_and_parks_until_the_next_swap() -> None:
    tracks = [
        track("aggregate", "slot-a", 3, 3),
        track("generate", "slot-a", 1, 1),
        track("transform", "slot-b", 2, 2),
    ]
    view = chain_view(tracks, ended_at="2026-01-01T00:00:10+00:00")
    assert [s["stage"] for s in view["stages"]] == ["generate", "transform", "aggregate"]
    park = {s["stage"]: s["phases"][-1] for s in view["stages"]}
    assert park["generate"]["end"] == "2026-01-01T00:00:03.100000+00:00"  # until aggregate took slot-a
    assert park["transform"]["end"] == park["aggregate"]["end"] == "2026-01-01T00:00:10+00:00"
    assert [(s["slot"], s["stage"], s["state"]) for s in view["slots"]] == [
        ("slot-a", "aggregate", "gone"),
        ("slot-b", "transform", "gone"),
    ]
    assert not view["live"] and view["pod_state"] == "not read: the DAG run has ended"


def test_monitor_publishes_swap_start_and_result_from_the_driver_events() -> None:
    published: list[dict] = []
    lines: list[str] = []
    pod = {
        "metadata": {"annotations": {}},
        "status": {
            "containerStatuses": [
                {
                    "name": "slot-b",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:02Z"}},
                    "lastState": {"terminated": {"finishedAt": "2026-01-01T00:00:01Z"}},
                }
            ]
        },
    }
    data = StageTrack.from_xcom(track("transform", "slot-b", 2, 0))
    data.swapped_at, data.state = None, "swapping"
    monitor = StageMonitor(
        data,
        publish=published.append,
        read_metrics=lambda: metrics(slot_b="4Mi"),
        log=lines.append,
        interval=0.01,
    )
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with monitor.sampling():
        monitor.swapped(at - timedelta(seconds=1))  # the request's time: the stage may start before this call
        monitor.waiting("slot-a", "ErrImagePull", "")  # the other slot: not this stage's wait
        monitor.waiting("slot-b", "ContainerCreating", "pulling")
        monitor.started(StartMarker(2, "transform", "slot-b", at, "t"), ChainPod.of(pod).slot("slot-b"))
        time.sleep(0.05)
        monitor.ended(StageResult("transform", 2, "slot-b", "img", 0, "completed", at, at, 0.0, log_tail=[]))
    assert [p["state"] for p in published] == ["swapping", "running", "succeeded"]
    assert published[0]["swapped_at"] == "2025-12-31T23:59:59+00:00" < published[1]["started_at"]
    assert published[1]["container_started_at"] == "2026-01-01T00:00:02Z"
    assert published[1]["container_stopped_at"] == "2026-01-01T00:00:01Z"
    assert [w["reason"] for w in published[1]["waiting"]] == ["ContainerCreating"]
    assert published[2]["memory_peak_bytes"] == 4 * 2**20 and published[2]["exit_code"] == 0
    assert any(line.startswith("::kruise-chain:: pull stage=transform") for line in lines)
    assert any(
        line.startswith("::kruise-chain:: memory stage=transform slot=slot-b peak=4.0 MiB") for line in lines
    )


def test_dashboard_url_from_a_base_or_a_template() -> None:
    assert (
        pod_dashboard_url("data", "etl-1", "https://k8s.example/")
        == "https://k8s.example/#/pod/data/etl-1?namespace=data"
    )
    assert (
        pod_dashboard_url("data", "etl-1", "https://headlamp.example/c/main/pods/{namespace}/{pod}")
        == "https://headlamp.example/c/main/pods/data/etl-1"
    )


def test_live_slots_show_the_stages_image_not_the_spelling_a_swap_patched_in() -> None:
    from airflow_kruise_chain.core.podview import StageRecord

    digest = "sha256:" + "ab" * 32
    record = StageRecord(1, "slot-a", "img/x:1", 1, "containerd://1", "2026-01-01T00:00:00Z", "patch")
    pod = chain_pod(
        records={"x": record},
        slots={
            "slot-a": running(
                "containerd://2", ready=True, generation=1, stage="x", image=f"img/x:1@{digest}"
            ),
            "slot-b": running("containerd://3", ready=True, image="img/y:1"),
        },
    )
    view = chain_view([track("x", "slot-a", 1, 1)], pod=pod)
    assert [(s["slot"], s["stage"], s["image"], s["state"]) for s in view["slots"]] == [
        ("slot-a", "x", "img/x:1", "parked"),
        ("slot-b", None, "img/y:1", "parked"),
    ]


def test_memory_sampling_starts_with_the_stage_not_with_the_swap() -> None:
    """No metrics reads while the slot is still starting (pull, back-off): sampling begins at the runner's
    start marker, so a slow start costs no requests; a stage that never started has no memory samples."""
    reads: list[int] = []

    def read() -> dict:
        reads.append(1)
        return metrics(slot_b="4Mi")

    def sampled(stage: str, slot: str, generation: int) -> StageMonitor:
        return StageMonitor(
            StageTrack.from_xcom(track(stage, slot, generation, 0)),
            publish=lambda _state: None,
            read_metrics=read,
            log=lambda _line: None,
            interval=0.01,
        )

    monitor = sampled("transform", "slot-b", 2)
    with monitor.sampling():
        monitor.waiting("slot-b", "ImagePullBackOff", "")
        time.sleep(0.1)
        assert reads == []
        monitor.started(StartMarker(2, "transform", "slot-b", datetime(2026, 1, 1, tzinfo=UTC)), None)
    assert reads and monitor.track.memory_peak_bytes == 4 * 2**20

    never = sampled("load", "slot-a", 3)
    reads.clear()
    with never.sampling():
        time.sleep(0.05)
    assert reads == [] and never.track.memory_peak_bytes is None


def stamped(taken: datetime, window: str, **usage: str) -> dict:
    """A PodMetrics as metrics-server serves it: the sample's `timestamp` and `window` with the usage."""
    return {**metrics(**usage), "timestamp": taken.strftime("%Y-%m-%dT%H:%M:%SZ"), "window": window}


def test_sample_time_reads_the_timestamp_and_the_go_duration_window() -> None:
    taken = datetime(2026, 1, 1, 0, 0, 7, tzinfo=UTC)
    assert sample_time(stamped(taken, "15.001s", a="1Mi")) == (taken, 15.001)
    assert sample_time(stamped(taken, "1m0s", a="1Mi")) == (taken, 60.0)
    assert sample_time(metrics(a="1Mi")) == (None, 0.0)  # no timestamp: nothing known
    assert sample_time({"timestamp": "yesterday", "window": "1s"}) == (None, 0.0)
    assert sample_time({"timestamp": "2026-01-01T00:00:00Z", "window": "soon"}) == (None, 0.0)


def test_a_sample_the_metrics_server_has_not_renewed_is_not_read_again() -> None:
    """metrics-server replaces a pod's sample once per --metric-resolution (window 15 s here): a stage that
    runs for less than that costs one read, however short `interval` is."""
    reads: list[int] = []

    def read() -> dict:
        reads.append(1)
        return stamped(datetime.now(UTC), "15s", slot_a="4Mi")

    sampler = MemorySampler(read, "slot-a", interval=0.01, max_interval=0.01)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    assert reads == [1] and sampler.peak().container_bytes == 4 * 2**20 and sampler.peak().reads == 1


def test_the_gap_between_reads_doubles_up_to_the_cap() -> None:
    """Without a timestamp to go by, the reads still back off: a stage of T seconds makes at most
    max_reads(T) of them (1 + log2(cap / interval) + T / cap), not T / interval."""
    reads: list[float] = []

    def read() -> dict:
        reads.append(time.monotonic())
        return metrics(slot_a="4Mi")

    sampler = MemorySampler(read, "slot-a", interval=0.01, max_interval=0.08)
    began = time.monotonic()
    with sampler:
        time.sleep(0.8)
    elapsed = time.monotonic() - began
    assert 1 <= len(reads) <= max_reads(elapsed, 0.01, 0.08)
    assert max_reads(5, 1, 60) == 7 and max_reads(600, 1, 60) == 17 and max_reads(0.2, 1, 60) == 7
    assert max_reads(10, 0, 60) == 0


def test_a_sample_taken_before_the_stage_started_is_not_its_memory() -> None:
    """The metrics server's sample can predate the stage by up to its resolution: it measured the slot's
    previous stage (or the parked runner), so it counts neither as a sample nor for the peak; the next read
    waits for the sample after it."""
    started = datetime.now(UTC)
    old = stamped(started - timedelta(seconds=5), "15s", slot_a="900Mi")
    sampler = MemorySampler(lambda: old, "slot-a", interval=0.01)
    sampler.start(since=started)
    sampler.stop()
    peak = sampler.peak()
    assert (peak.container_bytes, peak.pod_bytes, peak.samples, peak.reads) == (None, None, 0, 1)


def test_a_sample_taken_after_the_stage_ended_is_not_its_memory() -> None:
    """The end's read can return a sample scraped after the stage's program exited (the idle runner): it is
    not the stage's; one whose whole window lies within the stage is (the API's timestamps are whole
    seconds: the stage's ends are widened to them)."""
    now = datetime.now(UTC)
    sampler = MemorySampler(lambda: stamped(now, "1s", slot_a="900Mi"), "slot-a", interval=60)
    sampler.start(since=now - timedelta(seconds=30))
    sampler.stop(until=now - timedelta(seconds=10))
    peak = sampler.peak()
    assert (peak.container_bytes, peak.samples, peak.reads) == (None, 0, 1)
    # a reading during the stage said its window (1 s, the fast local profile's live readings), which the
    # stage outlasts: its end's read counts
    readings = iter(
        [stamped(now - timedelta(seconds=5), "1s", slot_a="1Mi"), stamped(now, "1s", slot_a="4Mi")]
    )
    inside = MemorySampler(lambda: next(readings), "slot-a", interval=60)
    inside.start(since=now.replace(microsecond=500000) - timedelta(seconds=1))
    inside.sample()
    inside.stop(until=now.replace(microsecond=900000))
    assert inside.peak().container_bytes == 4 * 2**20 and inside.peak().reads == 2


def test_a_stage_shorter_than_the_metrics_window_is_not_measured() -> None:
    """metrics-server's reading covers the window between its last two scrapes (15 s as shipped): for a
    stage shorter than that no reading's window lies within the stage, so its peak is not measured (None),
    never the idle runner's 1.8 MiB the reading taken just before or during it shows. A stage shorter than
    the window of the readings seen (15 s), or without one, shorter than metrics-server's shortest (10 s),
    makes no read at its end: it could not count, and it would delay the stage's end."""
    started = datetime.now(UTC)
    during = stamped(started.replace(microsecond=0) + timedelta(seconds=1), "15s", slot_a="1843Ki")
    sampler = MemorySampler(lambda: during, "slot-a", interval=60)
    sampler.start(since=started)
    sampler.sample()  # read while it ran (the first gap passed)
    sampler.stop(until=started + timedelta(seconds=12))
    peak = sampler.peak()
    assert (peak.container_bytes, peak.samples, peak.window_from, peak.reads) == (None, 0, None, 1)
    unread = MemorySampler(lambda: during, "slot-a", interval=60)
    unread.start(since=started)
    unread.stop(until=started + timedelta(seconds=5))
    assert (unread.peak().container_bytes, unread.peak().reads) == (None, 0)
    assert SHORTEST_WINDOW == 10.0


def test_a_reading_whose_window_lies_within_the_stage_is_its_peak_with_that_window() -> None:
    started = datetime(2026, 1, 1, 0, 0, 0, 300000, tzinfo=UTC)
    readings = iter(
        [
            stamped(datetime(2026, 1, 1, 0, 0, 16, tzinfo=UTC), "15s", slot_a="40Mi", slot_b="1Mi"),
            stamped(datetime(2026, 1, 1, 0, 0, 31, tzinfo=UTC), "15s", slot_a="30Mi", slot_b="1Mi"),
        ]
    )
    sampler = MemorySampler(lambda: next(readings), "slot-a", interval=60)
    sampler.since, sampler.until = started, started + timedelta(seconds=40)
    sampler.sample()
    sampler.sample()
    peak = sampler.peak()
    assert (peak.container_bytes, peak.pod_bytes, peak.samples) == (40 * 2**20, 41 * 2**20, 2)
    assert (peak.window_from, peak.window_to) == (
        datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 16, tzinfo=UTC),
    )


def test_the_monitor_publishes_the_peak_s_window_or_says_not_measured() -> None:
    lines: list[str] = []
    published: list[dict] = []
    now = datetime.now(UTC)

    def monitor(reading: dict) -> StageMonitor:
        return StageMonitor(
            StageTrack.from_xcom(track("t", "slot-a", 1, 0)),
            publish=published.append,
            read_metrics=lambda: reading,
            log=lines.append,
            interval=60,
        )

    short = monitor(stamped(now, "15s", slot_a="2Mi"))
    with short.sampling():
        short.started(StartMarker(1, "t", "slot-a", now - timedelta(seconds=1)), None)
    assert short.track.memory_peak_bytes is None and short.track.memory_window is None
    assert "not measured" in lines[-1]
    long = monitor(stamped(now, "15s", slot_a="2Mi"))
    with long.sampling():
        long.started(StartMarker(1, "t", "slot-a", now - timedelta(seconds=20)), None)
    begun = (now.replace(microsecond=0) - timedelta(seconds=15)).isoformat()
    assert long.track.memory_window == [begun, now.replace(microsecond=0).isoformat()]
    assert long.track.memory_peak_bytes == 2 * 2**20 and "window=" in lines[-1]
