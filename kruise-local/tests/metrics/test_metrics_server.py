"""The modelled metrics-server's storage rules (`metrics_server.py`, metrics-server `pkg/storage/pod.go`)."""

from __future__ import annotations

from kruise_local.metrics_server import MetricsServer, Point

POD = {"metadata": {"name": "p", "namespace": "ns"}}
KEY = ("ns", "p")
MiB = 1 << 20


def server() -> MetricsServer:
    return MetricsServer(15.0, dict)


def scrape(at: float, **containers: tuple[float, int]) -> dict:
    return {KEY: {name: Point(start, at, 0, mem) for name, (start, mem) in containers.items()}}


def test_a_container_needs_two_points_and_serves_the_last_reading_over_their_window() -> None:
    ms = server()
    ms.store(scrape(1000.0, a=(998.0, 5 * MiB)))  # 2 s old: no previous point
    assert ms.pod_metrics(POD) is None
    ms.store(scrape(1015.0, a=(998.0, 7 * MiB)))
    m = ms.pod_metrics(POD)
    assert m is not None and m["window"] == "15s" and m["timestamp"].endswith(":16:55Z")
    assert m["containers"] == [{"name": "a", "usage": {"cpu": "0", "memory": f"{7 * 1024}Ki"}}]


def test_a_fresh_container_between_10_s_and_the_resolution_has_its_start_as_previous_point() -> None:
    ms = server()
    ms.store(scrape(1000.0, a=(988.0, MiB)))
    m = ms.pod_metrics(POD)
    assert m is not None and m["window"] == "12s"
    ms = server()
    ms.store(scrape(1000.0, a=(991.0, MiB)))  # 9 s old: none
    assert ms.pod_metrics(POD) is None


def test_a_restarted_container_hides_the_whole_pod_until_its_second_point() -> None:
    ms = server()
    ms.store(scrape(1000.0, a=(900.0, MiB), b=(900.0, MiB)))
    ms.store(scrape(1015.0, a=(900.0, MiB), b=(900.0, MiB)))
    assert ms.pod_metrics(POD) is not None
    ms.store(scrape(1030.0, a=(900.0, MiB), b=(1025.0, MiB)))  # b restarted 5 s before the scrape
    assert ms.pod_metrics(POD) is None
    ms.store(scrape(1045.0, a=(900.0, MiB), b=(1025.0, 3 * MiB)))
    m = ms.pod_metrics(POD)
    assert m is not None and {c["name"] for c in m["containers"]} == {"a", "b"} and m["window"] == "15s"


def test_a_scrape_no_newer_than_the_last_keeps_the_previous_point() -> None:
    ms = server()
    ms.store(scrape(1000.0, a=(900.0, MiB)))
    ms.store(scrape(1015.0, a=(900.0, MiB)))
    ms.store(scrape(1015.0, a=(900.0, 2 * MiB)))  # the kubelet's stats did not move
    m = ms.pod_metrics(POD)
    assert m is not None and m["window"] == "15s" and m["containers"][0]["usage"]["memory"] == "2048Ki"
