"""The pipelines benchmark's arithmetic (bench/figures.py): percentile, GiB·s integration, the split of a
stage switch, the verb of a request, MET/MISSED. Pure functions on made-up records: nothing timed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench import figures


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert figures.percentile(values, 50) == 50
    assert figures.percentile(values, 95) == 95
    assert figures.percentile(values, 100) == 100
    assert figures.percentile([3.0, 1.0, 2.0], 95) == 3.0  # ceil(2.85) = 3rd of the sorted values
    assert figures.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert figures.percentile([7.0], 1) == 7.0
    assert math.isnan(figures.percentile([], 95))
    with pytest.raises(ValueError, match="percentile q"):
        figures.percentile([1.0], 0)


def test_median_of_even_and_odd_counts() -> None:
    assert figures.median([3.0, 1.0, 2.0]) == 2.0
    assert figures.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert figures.median([]) is None


def test_integrate_holds_each_value_until_the_next_sample() -> None:
    assert figures.integrate([(0.0, 2.0), (1.0, 4.0), (3.0, 0.0)]) == 2.0 + 8.0
    assert figures.integrate([(3.0, 0.0), (0.0, 2.0), (1.0, 4.0)]) == 10.0  # order does not matter
    assert figures.integrate([(0.0, 2.0), (1.0, 4.0)], end=1.5) == 2.0 + 2.0
    assert figures.integrate([(0.0, 2.0)]) == 0.0
    assert figures.integrate([]) == 0.0


def test_reserved_gib_s_integrates_bytes_over_time() -> None:
    gib = figures.GIB
    samples = [(0.0, 1 * gib), (2.0, 1.5 * gib), (3.0, 0.0), (4.0, 2 * gib)]
    assert figures.integrate([(t, v / gib) for t, v in samples], end=5.0) == pytest.approx(
        2.0 + 1.5 + 0 + 2.0
    )


def pod(ns: str, name: str, memory: str, *, node: str = "n1", phase: str = "Running", **status: Any):
    """A pod version as a watch delivers it: one container requesting `memory`."""
    container = {"name": "c", "resources": {"requests": {"memory": memory}}}
    spec = {"containers": [container], **({"nodeName": node} if node else {})}
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"{ns}-{name}"},
        "spec": spec,
        "status": {"phase": phase, **status},
    }


def test_reserved_memory_follows_every_pod_version_and_resize() -> None:
    from bench.observe import reserved_memory

    mib = 2**20
    allocated = {"containerStatuses": [{"name": "c", "allocatedResources": {"memory": "64Mi"}}]}
    resized = {"containerStatuses": [{"name": "c", "allocatedResources": {"memory": "1Gi"}}]}
    events = [
        (0.0, "ADDED", pod("bench-0", "p", "64Mi", node="", phase="Pending")),  # not bound: reserves nothing
        (1.0, "MODIFIED", pod("bench-0", "p", "64Mi", **allocated)),  # bound: 64Mi
        (1.5, "ADDED", pod("bench-1", "q", "256Mi", **allocated)),  # another pipeline's pod
        (3.0, "MODIFIED", pod("bench-0", "p", "1Gi", **allocated)),  # resize asked: the larger counts
        (4.0, "MODIFIED", pod("bench-0", "p", "64Mi", **resized)),  # allocated 1Gi until it shrinks
        (5.0, "MODIFIED", pod("bench-0", "p", "64Mi", phase="Succeeded", **resized)),  # done: frees it
        (5.5, "DELETED", pod("bench-1", "q", "256Mi", **allocated)),
    ]
    series = figures.pod_series(events, reserved_memory)
    assert [v.get("bench-0", 0) / mib for _, v in series] == [0, 64, 64, 1024, 1024, 0, 0]
    assert [v.get("bench-1", 0) / mib for _, v in series] == [0, 0, 256, 256, 256, 256, 0]
    got = figures.reserved_figures(events, reserved_memory, ["bench-0"], end=6.0)
    assert got["reserved_gib_s"] == pytest.approx((64 * 2 + 1024 * 2) / 1024)  # 1-3 s, 3-5 s
    assert got["reserved_peak_mib"] == 1024 + 256
    both = figures.reserved_figures(events, reserved_memory, ["bench-0", "bench-1"], end=6.0)
    assert both["reserved_gib_s"] == pytest.approx((2.125 + 1.0) / 2)  # the mean over the pipelines
    assert figures.reserved_figures([], reserved_memory, [], end=None)["reserved_gib_s"] is None


def test_backoff_container_seconds_from_the_pod_versions() -> None:
    def waiting(ns: str, *reasons: str) -> dict[str, Any]:
        statuses = [{"name": f"c{i}", "state": {"waiting": {"reason": r}}} for i, r in enumerate(reasons)]
        return pod(ns, "p", "64Mi", containerStatuses=[*statuses, {"name": "r", "state": {"running": {}}}])

    assert figures.backoff_count(waiting("a", "CrashLoopBackOff", "ContainerCreating")) == 1
    assert figures.backoff_count(waiting("a", "ImagePullBackOff")) == 0
    assert figures.backoff_count({"metadata": {}, "status": {}}) == 0
    events = [
        (0.0, "ADDED", waiting("a", "CrashLoopBackOff", "CrashLoopBackOff")),
        (1.0, "MODIFIED", waiting("a")),
    ]
    series = figures.pod_series(events, figures.backoff_count)
    assert figures.integrate([(t, sum(v.values())) for t, v in series], end=3.0) == 2.0


def test_peak_memory_is_not_measured_without_a_reading() -> None:
    """metrics-server (15 s scrapes, two points per container) has no reading of a short run: the peak is
    None, shown as 'not measured', never 0; a stage's peak is a reading whose window lies within it."""
    key = ("bench-0", "chain-pod", "slot-a")
    stages = {
        "p": {
            1: {"start": 100.2, "end": 100.6, "pod": "chain-pod", "container": "slot-a"},
            2: {"start": 101.0, "end": 130.4, "pod": "chain-pod", "container": "slot-b"},
            3: {"start": 131.0, "end": 150.2, "pod": "chain-pod", "container": "slot-a"},
        }
    }
    none = figures.memory_figures([(100.0, {}), (120.0, {})], {}, stages, {"p": "bench-0"})
    assert none["peak_memory_mib"] is None and none["peak_memory_per_pipeline_mib"] is None
    assert none["stage_peaks_mib"] == {"p": [None, None, None]}
    assert none["two_largest_consecutive_stages_mib"] is None
    assert (none["stages_measured"], none["stages_not_measured"]) == (0, 3)
    cell = figures.memory_cell({**none, "copies": 1})
    assert cell == "not measured; stages 0/3"
    mib = 2**20
    b_key = ("bench-0", "chain-pod", "slot-b")
    samples = [(100.0, {}), (116.0, {key: 2 * mib, b_key: 20 * mib}), (131.0, {key: 2 * mib, b_key: 2 * mib})]
    readings = {
        key: {(115.0, 15.0, 2 * mib), (146.0, 15.0, 30 * mib)},  # 100-115: stage 1 and the idle runner
        b_key: {(115.0, 15.0, 20 * mib), (130.0, 15.0, 2 * mib)},  # 115-130 lies within stage 2
    }
    got = figures.memory_figures(samples, readings, stages, {"p": "bench-0"})
    assert got["peak_memory_mib"] == 22  # the largest sum over one answer of the metrics API
    assert got["stage_peaks_mib"] == {"p": [None, 2, 30]}  # stage 1 (0.4 s) shorter than any window
    assert got["stage_peak_windows"] == {"p": [None, [115.0, 130.0], [131.0, 146.0]]}  # the readings' windows
    assert got["two_largest_consecutive_stages_mib"] == 32
    assert figures.memory_cell({**got, "copies": 1}) == "22.0; stages 2/3"
    # a window that began before the stage's start (widened to whole seconds) measured something else
    assert not figures.reading_within(115.0, 15.0, 101.0, 130.4)
    assert figures.reading_within(116.0, 15.0, 101.9, 130.4)
    assert figures.reading_within(131.0, 15.0, 116.0, 130.2)  # the end widened up to 131
    assert not figures.reading_within(132.0, 15.0, 116.0, 130.2)


def test_a_reading_time_from_the_metrics_api() -> None:
    item = {"timestamp": "2026-12-04T10:00:15Z", "window": "15.002s", "containers": []}
    taken, window = figures.reading_time(item)  # type: ignore[misc]
    assert window == pytest.approx(15.002)
    assert taken == pytest.approx(1796378415.0)
    assert figures.reading_time({"containers": []}) is None


@pytest.mark.parametrize(
    ("method", "path", "query", "verb"),
    [
        ("GET", "/api/v1/namespaces/ns/pods/p", "", "get"),
        ("GET", "/api/v1/namespaces/ns/pods", "", "list"),
        ("GET", "/api/v1/namespaces/ns/pods", "watch=true&fieldSelector=x", "watch"),
        ("GET", "/api/v1/watch/namespaces/ns/pods", "", "watch"),
        ("GET", "/api/v1/pods", "", "list"),
        ("GET", "/api/v1/namespaces/ns/pods/p/log", "follow=true", "get"),
        ("POST", "/api/v1/namespaces/ns/pods", "", "create"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "", "patch"),
        ("PUT", "/apis/apps.kruise.io/v1alpha1/namespaces/ns/containerrecreaterequests/c", "", "update"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", "", "delete"),
        ("DELETE", "/api/v1/namespaces/ns/pods", "", "deletecollection"),
        ("GET", "/api", "", "discovery"),
        ("GET", "/apis/apps.kruise.io/v1alpha1", "", "discovery"),
        ("GET", "/version", "", "discovery"),
    ],
)
def test_verb(method: str, path: str, query: str, verb: str) -> None:
    assert figures.verb(method, path, query) == verb


def test_split_gap_at_the_next_tasks_first_request() -> None:
    # stage ends at 10, the next task starts at 10.3 (Airflow's record), requests at 9 (before the end),
    # 10.1 (the previous task's clean-up, before the next task started), 10.4 and 10.6; next stage at 11
    requests = [10.6, 9.0, 10.1, 10.4]
    airflow, chain = figures.split_gap(10.0, 11.0, 10.3, requests)  # type: ignore[misc]
    assert airflow == pytest.approx(0.4)
    assert chain == pytest.approx(0.6)
    assert airflow + chain == pytest.approx(11.0 - 10.0)
    # without Airflow's record: the first request after the stage's end
    assert figures.split_gap(10.0, 11.0, None, requests) == pytest.approx((0.1, 0.9))
    # a task start recorded before the stage end (clock skew) does not move the split before the end
    assert figures.split_gap(10.0, 11.0, 9.5, requests) == pytest.approx((0.1, 0.9))
    # no request in the gap (a no-op task)
    assert figures.split_gap(10.0, 11.0, 10.3, [9.0, 12.0]) is None
    assert figures.split_gap(10.0, 11.0, None, []) is None


def test_airflow_steps_split_the_airflow_part_at_the_task_records() -> None:
    # stage k ends at 10.0, task k ends at 10.15, task k+1 starts at 10.2, its first request at 10.3
    tail, gap, head = figures.airflow_steps(10.0, 10.15, 10.2, 10.3)  # type: ignore[misc]
    assert (tail, gap, head) == pytest.approx((0.15, 0.05, 0.1))
    assert tail + gap + head == pytest.approx(10.3 - 10.0)  # the whole Airflow part, nothing left over
    # a record Airflow did not keep: no split
    assert figures.airflow_steps(10.0, None, 10.2, 10.3) is None
    assert figures.airflow_steps(10.0, 10.15, None, 10.3) is None


def test_start_to_start_from_task_instances() -> None:
    tis = {
        "bench.setup": {"start_date": "2026-12-03T10:00:00+00:00"},
        "bench.s01": {"start_date": "2026-12-03T10:00:01.000000Z"},
        "bench.s02": {"start_date": "2026-12-03T10:00:03.500000+00:00"},
        "bench.s03": {"start_date": "2026-12-03T10:00:04.000000+00:00"},
    }
    assert figures.start_to_start(tis, 3) == pytest.approx([2.5, 0.5])
    assert figures.start_to_start({"s01": tis["bench.s01"], "s02": tis["bench.s02"]}, 2) == pytest.approx(
        [2.5]
    )
    with pytest.raises(ValueError, match="s03"):
        figures.start_to_start({**tis, "bench.s03": {"start_date": None}}, 3)


def test_task_timeline_from_the_first_log_event_of_each_mark() -> None:
    events = [
        (100.5, "::kruise-chain:: swap stage=s01 slot=slot-a"),  # out of order: sorted by time
        (100.1, "Worker startup parse complete"),
        (100.4, "::kruise-chain:: resize slot-a to requests memory=64Mi"),
        (100.7, "::kruise-chain:: start gen=1 token=t stage=s01"),
        (100.8, "::kruise-chain:: start gen=1 token=t stage=s01"),  # a later copy does not move the mark
        (101.0, "::kruise-chain:: end stage=s01 generation=1 exit=0"),
    ]
    assert figures.task_timeline(100.0, 101.25, events) == pytest.approx(
        {"parsed": 0.1, "first request": 0.4, "swap": 0.5, "stage start": 0.7, "stage end": 1.0, "end": 1.25}
    )
    # a no-op task: only what its log holds, and its end
    assert figures.task_timeline(5.0, 5.5, [(5.2, "Worker startup parse complete")]) == pytest.approx(
        {"parsed": 0.2, "end": 0.5}
    )


def test_deferral_timeline_takes_each_mark_after_the_one_before() -> None:
    events = [
        (100.1, "Worker startup parse complete"),  # the first start: not the resume
        (100.6, "Pausing task as DEFERRED. "),
        (101.0, "trigger bench/run/s01/-1/1 (ID 3) starting"),
        (103.5, "Trigger fired event"),
        (104.2, "Worker startup parse complete"),
    ]
    assert figures.deferral_timeline(100.0, 104.5, events) == pytest.approx(
        {"deferred": 0.6, "trigger start": 1.0, "trigger event": 3.5, "resumed": 4.2, "end": 4.5}
    )
    # a task that did not defer: its end only
    assert figures.deferral_timeline(5.0, 5.5, events[:1]) == pytest.approx({"end": 0.5})
    # the stage's end as the trigger logged its output (before the deferral: the task's own, not a mark)
    ended = [*events, (100.3, "BENCH end id=x stage=1"), (103.2, "BENCH end id=x stage=1 t=1")]
    marks = figures.deferral_timeline(100.0, 104.5, ended)
    assert marks == pytest.approx(
        {
            "deferred": 0.6,
            "trigger start": 1.0,
            "stage end": 3.2,
            "trigger event": 3.5,
            "resumed": 4.2,
            "end": 4.5,
        }
    )
    assert list(marks) == ["deferred", "trigger start", "stage end", "trigger event", "resumed", "end"]
    assert figures.timeline_gaps(marks) == pytest.approx(
        {
            "deferred -> trigger start": 0.4,
            "trigger start -> stage end": 2.2,
            "stage end -> trigger event": 0.3,
            "trigger event -> resumed": 0.7,
            "resumed -> end": 0.3,
        }
    )


def row(
    mode: str, profile: str = "realistic", workload: str = "distinct/uniform/0.2s", n: int = 10, **kw: Any
):
    base = {
        "profile": profile,
        "mode": mode,
        "workload": workload,
        "stages": n,
        "copies": 1,
        "overhead_median_s": 1.0,
        "chain_part_median_s": 0.5,
        "backoff_container_s": 0.0,
        "backoff_events": 0,
        "reserved_gib_s": 10.0,
        "api_requests_per_stage": 10.0,
        "api_by_verb_per_stage": {"watch": 1.0},
    }
    return {**base, **kw}


def lines_for(rows: list[dict[str, Any]], what: str) -> list[str]:
    return [line for line in figures.targets(rows) if what in line]


def test_verdict_words() -> None:
    assert figures.verdict(True, "x") == "MET: x"
    assert figures.verdict(False, "x") == "MISSED: x"
    assert figures.verdict(None, "x") == "NOT MEASURED: x"


def test_target_overhead_met_and_missed() -> None:
    good = [
        row("chain", overhead_median_s=0.25, chain_part_median_s=0.05),
        row("kpo1", overhead_median_s=3.0),
        row("noop", overhead_median_s=0.2),
    ]
    (line,) = lines_for(good, "every workload")
    assert line.startswith("MET: ") and "0.250 s vs KPO tuned 3.000 s (8%)" in line
    # chain above 10 % of KPO's
    slow = [dict(good[0], overhead_median_s=0.35), good[1], dict(good[2], overhead_median_s=0.3)]
    assert lines_for(slow, "every workload")[0].startswith("MISSED: ")
    # own part above 0.1 s
    own = [dict(good[0], chain_part_median_s=0.2), *good[1:]]
    assert lines_for(own, "every workload")[0].startswith("MISSED: ")
    # more than 0.1 s above the floor
    floor = [*good[:2], dict(good[2], overhead_median_s=0.1)]
    assert lines_for(floor, "every workload")[0].startswith("MISSED: ")
    # a stage start in back-off
    backoff = [dict(good[0], backoff_events=1), *good[1:]]
    assert lines_for(backoff, "every workload")[0].startswith("MISSED: ")
    # no KPO row to compare with: not measured, and only realistic rows count
    assert lines_for([good[0], good[2]], "every workload")[0].startswith("NOT MEASURED: ")
    assert lines_for([dict(r, profile="fast") for r in good], "every workload")[0].startswith(
        "NOT MEASURED: "
    )


def test_target_reserved_memory() -> None:
    rows = [
        row("chain", workload="distinct/skewed/0.2s", reserved_gib_s=5.0),
        row("kpo", workload="distinct/skewed/0.2s", reserved_gib_s=9.0),
        row("kpo1", workload="distinct/skewed/0.2s", reserved_gib_s=6.0),
        row("all", workload="distinct/skewed/0.2s", reserved_gib_s=49.0),
    ]
    assert lines_for(rows, "on skewed")[0].startswith("MET: ")
    assert lines_for(rows, "1/N of all-at-once")[0].startswith("MISSED: ")  # 5.0 > 4.9
    rows[3]["reserved_gib_s"] = 50.0
    assert lines_for(rows, "1/N of all-at-once")[0].startswith("MET: ")  # 5.0 <= 5.0
    rows[2]["reserved_gib_s"] = 4.0  # the tuned KPO reserves less
    assert lines_for(rows, "on skewed")[0].startswith("MISSED: ")
    # no skewed workload measured
    assert lines_for([row("chain"), row("kpo")], "on skewed")[0].startswith("NOT MEASURED: ")


def test_target_flat_in_n() -> None:
    rows = [row("chain", n=3, overhead_median_s=1.0), row("chain", n=50, overhead_median_s=1.2)]
    assert lines_for(rows, "N = 50 within 20 %")[0].startswith("MET: ")
    rows[1]["overhead_median_s"] = 1.25
    assert lines_for(rows, "N = 50 within 20 %")[0].startswith("MISSED: ")
    assert lines_for(rows[:1], "N = 50 within 20 %")[0].startswith("NOT MEASURED: ")


def test_target_requests_bounded_and_watch_based() -> None:
    short = row("chain", api_requests_per_stage=9.0)
    long = row("chain", workload="distinct/uniform/5s", api_requests_per_stage=9.5)
    assert lines_for([short, long], "watch-based")[0].startswith("MET: ")
    # a poller makes more requests the longer a stage runs
    polling = dict(long, api_requests_per_stage=14.0)
    assert lines_for([short, polling], "watch-based")[0].startswith("MISSED: ")
    # too many requests per stage whatever the durations
    assert lines_for([dict(short, api_requests_per_stage=16.0)], "watch-based")[0].startswith("MISSED: ")
    # bounded, but without both durations polling cannot be told from watching
    assert lines_for([short], "watch-based")[0].startswith("NOT MEASURED: ")
    # the memory sampler's metrics reads are their own group, within their stated bound (7 for a 5 s stage
    # with the provider's default intervals, 1 s doubling up to 60 s): the other requests stay flat
    sampled = dict(long, api_requests_per_stage=13.5, api_by_verb_per_stage={"watch": 1.0, "metrics": 4.0})
    (line,) = lines_for([short, sampled], "watch-based")
    assert line.startswith("MET: ") and "4.0-4.0 (5 s stages, bound 7)" in line
    assert "N=10: 9.0 (0.2 s) vs 9.5 (5 s)" in line
    # a sampler reading once a second: past its bound
    clocked = dict(
        sampled, api_requests_per_stage=21.5, api_by_verb_per_stage={"watch": 1.0, "metrics": 12.0}
    )
    clocked["workload"] = "distinct/uniform/10s"
    assert lines_for([clocked], "watch-based")[0].startswith("MISSED: ")
    # the prewarm's ImagePullJob requests (a create and a watch per image) are counted apart too
    prewarmed = dict(short, api_requests_per_stage=16.8, api_by_verb_per_stage={"watch": 2.0, "prewarm": 2.0})
    (line,) = lines_for([prewarmed, dict(long, api_requests_per_stage=16.9)], "watch-based")
    assert "prewarm 0.0-2.0 (one ImagePullJob create and watch per image)" in line
    assert "N=10: 14.8 (0.2 s) vs 16.9 (5 s)" in line and line.startswith("MISSED: ")  # 16.9 > 14.8 + 1


def test_the_bound_on_the_other_requests_spreads_the_pipelines_own_over_its_stages() -> None:
    """15 per stage at N = 10 as before; at N = 3 the pipeline's own requests (its pod's creation, setup's
    reads, teardown) weigh three times as much per stage: v5's distinct images made 15.3 there, within."""
    assert figures.other_requests_bound(10) == 15.0
    assert figures.other_requests_bound(3) > 19 and figures.other_requests_bound(50) < 14
    few = row("chain", n=3, api_requests_per_stage=15.3)
    long = row("chain", n=3, workload="distinct/uniform/5s", api_requests_per_stage=14.0)
    (line,) = lines_for([few, long], "watch-based")
    assert line.startswith("MET: ") and "(bound 13 + 20 / N per stage)" in line
    assert lines_for([dict(few, api_requests_per_stage=20.0), long], "watch-based")[0].startswith("MISSED: ")
    many = row("chain", n=50, api_requests_per_stage=14.0)
    assert lines_for([many, dict(long, stages=50)], "watch-based")[0].startswith("MISSED: ")


def test_requests_grouped_by_verb_with_the_metrics_reads_apart() -> None:
    assert figures.request_group("GET", "/apis/metrics.k8s.io/v1beta1/namespaces/ns/pods/p", "") == "metrics"
    assert figures.request_group("GET", "/api/v1/namespaces/ns/pods/p", "") == "get"
    assert figures.request_group("GET", "/api/v1/namespaces/ns/pods", "watch=1") == "watch"
    jobs = "/apis/apps.kruise.io/v1alpha1/namespaces/ns/imagepulljobs"
    assert figures.request_group("POST", jobs, "") == "prewarm"
    assert figures.request_group("GET", jobs, "watch=True&fieldSelector=metadata.name%3Dj") == "prewarm"
    assert figures.stage_seconds("distinct/uniform/0.2s") == 0.2
    assert figures.stage_seconds("one/uniform/5s") == 5.0
    assert figures.stage_seconds("scheduler") is None


def test_targets_per_chain_variant_and_scheduler_line() -> None:
    rows = [row("chain"), row("chain-deferrable")]
    lines = figures.targets(rows, ["chain", "chain-deferrable"])
    assert sum("chain-deferrable" in line for line in lines) == 5
    assert sum(line.split(": ", 1)[1].startswith("chain ") for line in lines) == 4
    assert lines[-1].startswith("NOT MEASURED: under the real scheduler")


def test_go_request_is_the_first_pod_patch_exec_or_create_in_the_gap() -> None:
    reqs = [
        (1.0, "GET", "/api/v1/namespaces/n/pods/p"),
        (1.1, "PATCH", "/api/v1/namespaces/n/pods/p/resize"),
        (1.2, "PATCH", "/api/v1/namespaces/n/pods/p"),
        (1.3, "PATCH", "/api/v1/namespaces/n/pods/p"),
    ]
    assert figures.go_request(1.0, 2.0, reqs) == 1.2
    assert figures.go_request(1.25, 2.0, reqs) == 1.3
    assert figures.go_request(1.0, 1.15, reqs) is None
    assert figures.go_request(0.0, 9.0, [(5.0, "GET", "/api/v1/namespaces/n/pods/p/exec")]) == 5.0
    assert figures.go_request(0.0, 9.0, [(6.0, "POST", "/api/v1/namespaces/n/pods")]) == 6.0


def test_targets_v4_judge_the_realistic_chain_rows() -> None:
    def row(mode: str, n: int, median: float, p95: float, kubelet: float | None = 0.3) -> dict:
        return {
            "profile": "realistic",
            "workload": "distinct/uniform/0.2s",
            "stages": n,
            "copies": 1,
            "mode": mode,
            "overhead_median_s": median,
            "overhead_p95_s": p95,
            "kubelet_part_median_s": kubelet,
            "kubelet_part_p95_s": kubelet,
        }

    rows = [
        row("chain", 3, 0.4, 0.9),
        row("chain", 10, 0.45, 0.95),
        row("kpo1", 3, 3.0, 3.5),
        row("kpo1", 10, 3.1, 3.6),
    ]
    lines = figures.targets_v4(rows, ["chain"])
    assert [line.split(":")[0] for line in lines] == ["MET", "MET", "MET", "MET"], lines
    rows[1] = row("chain", 10, 0.7, 1.4, kubelet=None)
    lines = figures.targets_v4(rows, ["chain"])
    assert [line.split(":")[0] for line in lines] == ["MISSED", "MISSED", "MISSED", "MISSED"], lines
    assert figures.targets_v4(rows, ["chain-exec"])[0].startswith("NOT MEASURED")


def test_targets_v5_chain_against_podexec_the_floor_and_kpos_requests() -> None:
    one = "one/uniform/0.2s"
    rows = [
        row("chain", workload=one, overhead_median_s=0.15, api_requests_per_stage=12.0),
        row("podexec", workload=one, overhead_median_s=0.2),
        row("noop", workload=one, overhead_median_s=0.07),
        row("kpo1", workload=one, api_requests_per_stage=14.4),
        row("chain", overhead_median_s=0.3, api_requests_per_stage=16.0),  # distinct: no podexec row
        row("noop", overhead_median_s=0.06),
        row("kpo1", api_requests_per_stage=17.8),
    ]
    podexec, floor, requests = figures.targets_v5(rows)
    assert podexec.startswith("MET: ") and "one/uniform/0.2s N=10: 0.150 s vs 0.200 s (-0.050 s)" in podexec
    assert "distinct" not in podexec  # podexec runs one image only
    # the distinct row is 0.24 s above its floor
    assert (
        floor.startswith("MISSED: ") and "distinct/uniform/0.2s N=10: 0.300 s vs 0.060 s (+0.240 s)" in floor
    )
    assert requests.startswith("MET: ") and "one/uniform/0.2s N=10: 12.0 vs 14.4" in requests
    slower = [dict(rows[0], overhead_median_s=0.25), *rows[1:]]
    assert figures.targets_v5(slower)[0].startswith("MISSED: ")
    more = [*rows[:4], dict(rows[4], api_requests_per_stage=18.0), *rows[5:]]
    assert figures.targets_v5(more)[2].startswith("MISSED: ")
    assert [line.split(":")[0] for line in figures.targets_v5(rows[:1])] == ["NOT MEASURED"] * 3
