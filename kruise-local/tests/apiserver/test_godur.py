"""Go's `time.Duration.String()` and `Duration.Truncate`, against the outputs Go documents: the `time`
package's own table (`time_test.go` `durationTests`), the `Duration.String` and `Duration.Truncate` examples
(`example_test.go`), and the kubelet's pull messages as real clusters print them."""

from __future__ import annotations

import pytest
from kruise_local.backoff import go_duration
from kruise_local.godur import (
    HOUR,
    MICROSECOND,
    MILLISECOND,
    MINUTE,
    NANOSECOND,
    SECOND,
    duration_string,
    seconds_to_duration,
    truncate,
)

# time_test.go durationTests (the String side of each pair)
GO_DURATION_TESTS = [
    ("0s", 0),
    ("1ns", 1 * NANOSECOND),
    ("1.1µs", 1100 * NANOSECOND),
    ("2.2ms", 2200 * MICROSECOND),
    ("3.3s", 3300 * MILLISECOND),
    ("4m5s", 4 * MINUTE + 5 * SECOND),
    ("4m5.001s", 4 * MINUTE + 5001 * MILLISECOND),
    ("5h6m7.001s", 5 * HOUR + 6 * MINUTE + 7001 * MILLISECOND),
    ("8m0.000000001s", 8 * MINUTE + 1 * NANOSECOND),
    ("2562047h47m16.854775807s", (1 << 63) - 1),
    ("-2562047h47m16.854775808s", -(1 << 63)),
]


@pytest.mark.parametrize(("text", "d"), GO_DURATION_TESTS)
def test_duration_string_is_gos(text: str, d: int) -> None:
    assert duration_string(d) == text


@pytest.mark.parametrize(
    ("text", "d"),
    [
        # example_test.go ExampleDuration_String
        ("1h2m0.3s", 1 * HOUR + 2 * MINUTE + 300 * MILLISECOND),
        ("300ms", 300 * MILLISECOND),
        # the units ExampleDuration_Truncate prints with %6s
        ("1µs", MICROSECOND),
        ("1ms", MILLISECOND),
        ("1s", SECOND),
        ("2s", 2 * SECOND),
        ("1m0s", MINUTE),
        ("10m0s", 10 * MINUTE),
        ("1h0m0s", HOUR),
        # the kubelet's pull events as real clusters show them
        ("313ms", 313 * MILLISECOND),
        ("1.594s", 1594 * MILLISECOND),
        ("2m3.5s", 2 * MINUTE + 3500 * MILLISECOND),
        ("-1.5s", -1500 * MILLISECOND),
        ("-300ms", -300 * MILLISECOND),
    ],
)
def test_duration_string_examples(text: str, d: int) -> None:
    assert duration_string(d) == text


def test_truncate_is_gos_example() -> None:
    """example_test.go ExampleDuration_Truncate: 1h15m30.918273645s truncated to each unit."""
    d = HOUR + 15 * MINUTE + 30 * SECOND + 918273645
    units = [NANOSECOND, MICROSECOND, MILLISECOND, SECOND, 2 * SECOND, MINUTE, 10 * MINUTE, HOUR]
    assert [duration_string(truncate(d, m)) for m in units] == [
        "1h15m30.918273645s",
        "1h15m30.918273s",
        "1h15m30.918s",
        "1h15m30s",
        "1h15m30s",
        "1h15m0s",
        "1h10m0s",
        "1h0m0s",
    ]


def test_truncate_rounds_toward_zero_and_ignores_non_positive_units() -> None:
    assert truncate(-1_500_700 * MICROSECOND, MILLISECOND) == -1_500 * MILLISECOND
    assert truncate(-2 * SECOND, MILLISECOND) == -2 * SECOND
    assert truncate(-1_000_001, MILLISECOND) == -MILLISECOND
    assert truncate(1_999_999, MILLISECOND) == MILLISECOND
    assert truncate(999_999, MILLISECOND) == 0
    assert truncate(12345, 0) == 12345 and truncate(12345, -5) == 12345


def test_seconds_become_whole_nanoseconds() -> None:
    assert seconds_to_duration(0.3134) == 313_400_000
    assert duration_string(truncate(seconds_to_duration(0.3134), MILLISECOND)) == "313ms"
    assert duration_string(truncate(seconds_to_duration(0.0009), MILLISECOND)) == "0s"
    assert duration_string(truncate(seconds_to_duration(1.5946), MILLISECOND)) == "1.594s"


def test_go_duration_of_seconds_keeps_its_callers_outputs() -> None:
    """backoff.go_duration (seconds): the crash-loop back-off's, the probe timeout's and the metrics
    window's texts, now also below a second and above an hour."""
    assert [go_duration(s) for s in (10, 20, 80, 160, 300, 1.5, 2, 15.001)] == [
        "10s",
        "20s",
        "1m20s",
        "2m40s",
        "5m0s",
        "1.5s",
        "2s",
        "15.001s",
    ]
    assert go_duration(0.5) == "500ms"
    assert go_duration(3600) == "1h0m0s"
    assert go_duration(0) == "0s"
