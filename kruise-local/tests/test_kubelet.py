"""Unit tests of the local kubelet's pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kruise_local.backoff import Backoff, check_max_container_restart_period, go_duration
from kruise_local.container import spec_hash


def test_container_hash_covers_only_name_and_image() -> None:
    base = {"name": "c", "image": "busybox:1.36", "command": ["sleep", "1"]}
    same = [
        {**base, "command": ["true"]},
        {**base, "env": [{"name": "A", "value": "1"}]},
        {**base, "resources": {"limits": {"memory": "1Gi"}}},
        {**base, "args": ["x"], "workingDir": "/tmp"},
    ]
    assert {spec_hash(c) for c in same} == {spec_hash(base)}
    assert spec_hash({**base, "image": "busybox:1.37"}) != spec_hash(base)
    assert spec_hash({**base, "name": "d"}) != spec_hash(base)


def test_go_duration() -> None:
    assert [go_duration(s) for s in (10, 20, 80, 160, 300, 1.5, 2)] == [
        "10s",
        "20s",
        "1m20s",
        "2m40s",
        "5m0s",
        "1.5s",
        "2s",
    ]


T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_backoff_doubles_caps_and_expires() -> None:
    b = Backoff()
    assert b.in_backoff_since("k", at(0), at(1)) == 0  # unknown key: not in back-off
    b.next("k", at(0), at(0))
    assert b.get("k") == 10
    assert b.in_backoff_since("k", at(5), at(6)) == 9  # counted from the event (FinishedAt), not the update
    assert b.in_backoff_since("k", at(5), at(15)) == 0
    delays = []
    for i in range(1, 8):
        b.next("k", at(i), at(i))
        delays.append(b.get("k"))
    assert delays == [20, 40, 80, 160, 300, 300, 300]
    # an event more than 600 s after the last update: not in back-off, and Next starts over
    assert b.in_backoff_since("k", at(7 + 601), at(7 + 601)) == 0
    b.next("k", at(7 + 601), at(7 + 601))
    assert b.get("k") == 10


def test_backoff_gc_and_a_lower_maximum() -> None:
    b = Backoff(max=2)
    b.next("k", at(0), at(0))
    assert b.get("k") == 2  # the initial back-off is lowered to the maximum
    b.next("k", at(1), at(1))
    assert b.get("k") == 2
    b.gc(at(1 + 601))
    assert b.get("k") == 0


def test_max_container_restart_period_range() -> None:
    assert check_max_container_restart_period(1) == 1.0
    assert check_max_container_restart_period(300) == 300.0
    for bad in (0, 0.99, 300.5, True, "10"):
        with pytest.raises(ValueError, match="maxContainerRestartPeriod"):
            check_max_container_restart_period(bad)  # type: ignore[arg-type]
