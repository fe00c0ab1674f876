"""The watch history (kube-apiserver's watch cache, `watch_cache.go` `resizeCacheLocked`) bounded by count,
age and bytes (`kruise_local/history.py`), and a watch from a resourceVersion it no longer reaches answered
410 Gone through the official client."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kruise_local import resources as R
from kruise_local.history import EVENT_FRESH_SECONDS, HISTORY_BYTES, LOWER_BOUND_CAPACITY, History
from kubernetes import watch
from kubernetes.client import ApiException


@dataclass
class Ev:
    rv: int


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _fill(history: History, clock: Clock, count: int, start: int, step: float = 0.0, size: int = 10) -> int:
    for rv in range(start, start + count):
        history.append(Ev(rv), size)
        clock.now += step
    return start + count


def test_capacity_doubles_while_every_kept_event_is_fresh():
    clock = Clock()
    history = History(5000, clock=clock)
    _fill(history, clock, 1000, 1)
    assert len(history) == 1000 and history.expired == 0  # 100 -> 200 -> ... -> 1600, nothing dropped
    assert history.capacity == 1600


def test_capacity_stops_at_the_upper_bound():
    clock = Clock()
    history = History(300, clock=clock)
    _fill(history, clock, 1000, 1)
    assert (len(history), history.capacity, history.expired) == (300, 300, 700)


def test_stale_events_are_dropped_as_the_capacity_halves():
    clock = Clock()
    history = History(5000, clock=clock)
    rv = _fill(history, clock, 800, 1)  # capacity 800, all fresh
    assert history.capacity == 800
    clock.now += EVENT_FRESH_SECONDS + 1
    rv = _fill(history, clock, 1, rv)  # full and the newest quarter stale: halved to 400
    assert (history.capacity, len(history)) == (400, 400)
    for _ in range(4):  # each burst after a quiet time halves it again, down to the lower bound
        clock.now += EVENT_FRESH_SECONDS + 1
        rv = _fill(history, clock, history.capacity - len(history) + 1, rv)
    assert history.capacity == LOWER_BOUND_CAPACITY and len(history) == LOWER_BOUND_CAPACITY
    assert history.expired == rv - 1 - LOWER_BOUND_CAPACITY


def test_the_byte_budget_drops_the_oldest_but_keeps_the_newest():
    clock = Clock()
    history = History(5000, budget=1000, clock=clock)
    _fill(history, clock, 30, 1, size=100)
    assert (len(history), history.bytes, history.expired) == (10, 1000, 20)
    history.append(Ev(31), 5000)  # one event over the budget is still kept
    assert [e.rv for e in history.events] == [31] and history.expired == 30


def test_a_watch_from_a_dropped_version_is_410_gone(cluster, core, namespace):
    body = {"metadata": {"name": "big"}, "data": {"v": ""}}
    first = core.create_namespaced_config_map(namespace, body).metadata.resource_version
    value = 1024 * 1024 - 64
    for i in range(HISTORY_BYTES // value + 2):  # more versions than the byte budget keeps
        body["data"] = {"v": str(i % 10) * value}
        last = core.replace_namespaced_config_map("big", namespace, body).metadata.resource_version
    assert cluster.call(lambda: cluster.store.compacted(R.CONFIGMAPS)) >= int(first)
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=first, timeout_seconds=5
        ):
            pass
    assert err.value.status == 410 and "too old resource version" in str(err.value.reason)
    core.patch_namespaced_config_map("big", namespace, {"metadata": {"labels": {"a": "b"}}})
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map, namespace, resource_version=last, timeout_seconds=10
    ):
        assert (event["type"], event["object"].metadata.labels) == ("MODIFIED", {"a": "b"})
        w.stop()
