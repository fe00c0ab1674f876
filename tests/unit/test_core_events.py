"""The driver reports a followed generation through typed events (`core.events`), not through log text."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.podview import ChainPod, Slot
from airflow_kruise_chain.core.status import StageResult, StartMarker
from tests.unit.test_core_swap import EXTRACT, FakePod


class Recorder:
    """A `StageEvents` that records what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def swapped(self, at: datetime | None = None) -> None:
        self.events.append(("swapped", at))

    def waiting(self, slot: str, reason: str, message: str) -> None:
        self.events.append(("waiting", (slot, reason, message)))

    def started(self, marker: StartMarker, slot: Slot | None) -> None:
        self.events.append(("started", (marker.generation, slot.started_at if slot else None)))

    def ended(self, result: StageResult) -> None:
        self.events.append(("ended", result.exit_code))

    def failed(self, error: BaseException) -> None:
        self.events.append(("failed", type(error).__name__))


class ScriptedApi:
    """The pod as `versions` (each watch brings the next one) and the slot's log as `lines`."""

    def __init__(self, versions: list[dict[str, Any]], lines: list[str]) -> None:
        self.versions = versions
        self.lines = lines
        self.logged: list[str] = []

    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        return ChainPod.of(copy.deepcopy(self.versions[0]))

    def watch_pod(self, *_: Any, **__: Any) -> Iterator[ChainPod | None]:
        if len(self.versions) > 1:
            self.versions.pop(0)
        yield ChainPod.of(copy.deepcopy(self.versions[0]))

    def follow_log(self, *_: Any, **__: Any) -> Iterator[str]:
        yield from self.lines


def line(kind: str, generation: int, token: str, rest: str) -> str:
    return f"::kruise-chain:: {kind} gen={generation} token={token} stage=extract slot=slot-a {rest}"


def test_follow_reports_swapped_waiting_started_and_ended() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)  # annotations only: the slot's runner runs it
    running = copy.deepcopy(pod.pod)
    pod.wait("slot-a", "ContainerCreating", "pulling")
    waiting = copy.deepcopy(pod.pod)
    forged = "::kruise-chain:: slot-a ErrImagePull"  # stage output that looks like the driver's own lines
    api = ScriptedApi(
        [waiting, running],
        [
            line("start", 1, plan.token, "at=2024-05-01T10:00:00Z"),
            forged,
            line("start", 1, "forged", "at=2024-05-01T10:00:09Z"),
            line(
                "result",
                1,
                plan.token,
                "exit=0 reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z "
                "outputs=- outputs_status=absent",
            ),
        ],
    )
    logged: list[str] = []
    recorder = Recorder()
    result = StageDriver(api, "etl-abc", "data", log=logged.append).follow(
        plan, Timeouts(swap=30), events=recorder
    )
    assert isinstance(result, StageResult) and result.exit_code == 0
    assert recorder.events == [
        ("swapped", None),
        ("waiting", ("slot-a", "ContainerCreating", "pulling")),
        ("started", (1, "2024-05-01T10:00:00Z")),
        ("ended", 0),
    ]
    assert forged in logged  # the stage's line is output, logged as such, and no event


def test_follow_reports_a_failure() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)
    pod.wait("slot-a", "ErrImagePull", "no such image")
    pod.status("slot-a")["containerID"] = "containerd://new"
    api = ScriptedApi([copy.deepcopy(pod.pod)], [])
    recorder = Recorder()
    try:
        StageDriver(api, "etl-abc", "data").follow(plan, Timeouts(swap=30), events=recorder)
    except Exception as err:
        assert type(err).__name__ == "StageStartError"
    else:
        raise AssertionError("a failed start must raise")
    assert recorder.events == [("swapped", None), ("failed", "StageStartError")]
