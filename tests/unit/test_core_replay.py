"""An adopted generation's output read back from its slot's log (core/replay.py)."""

from __future__ import annotations

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.replay import generation_output, read_generation_output
from tests.unit.podfactory import chain_pod, running


def start(gen: int) -> str:
    return f"::kruise-chain:: start gen={gen} stage=s{gen} slot=slot-b at=2024-05-01T10:00:00Z"


def result(gen: int) -> str:
    return (
        f"::kruise-chain:: result gen={gen} stage=s{gen} slot=slot-b exit=0 reason=completed "
        "started=2024-05-01T10:00:00Z finished=2024-05-01T10:01:30Z outputs=- outputs_status=absent"
    )


MEMORY = "::kruise-chain:: memory 3Mi"
LOG = [start(2), "two", result(2), start(4), "four a", MEMORY, "four b", result(4), "x"]


def test_the_output_runs_from_the_start_marker_to_the_result_line_of_that_generation() -> None:
    assert list(generation_output(LOG, 4)) == [start(4), "four a", MEMORY, "four b", result(4)]
    assert list(generation_output(LOG, 2)) == [start(2), "two", result(2)]


def test_no_output_without_the_start_marker() -> None:
    # a runner that restarted on an ended generation prints only its result again
    assert list(generation_output(["boot", result(4)], 4)) == []
    assert list(generation_output(LOG, 3)) == []


class Logs:
    def __init__(self, current: list[str], previous: list[str]) -> None:
        self.logs = {False: "\n".join(current), True: "\n".join(previous)}
        self.calls: list[bool] = []

    def read_log(self, name: str, namespace: str, container: str, *, previous: bool = False) -> str:
        self.calls.append(previous)
        return self.logs[previous]


def pod(generation: int) -> ChainPod:
    return chain_pod(name="p", slots={"slot-b": running("containerd://b", generation=generation)})


def test_the_previous_log_is_read_when_the_slot_moved_on_or_restarted() -> None:
    moved = Logs(current=[start(6), "six"], previous=LOG)
    assert read_generation_output(moved, pod(6), "ns", "slot-b", 4)[1] == "four a"
    assert moved.calls == [True]  # the current container runs generation 6: not read
    restarted = Logs(current=[result(4)], previous=LOG)
    assert read_generation_output(restarted, pod(4), "ns", "slot-b", 4)[-2] == "four b"
    assert restarted.calls == [False, True]
    assert read_generation_output(Logs([], []), pod(4), "ns", "slot-b", 4) == []
