"""The slot's log stream a follow reads is let go when the follow ends: a stage task (or a `dag.test()`
process running many) keeps no reader of a slot's log behind, which would read every later generation's
output of that slot on a thread of its own for nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from airflow_kruise_chain.core import StageResult
from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from tests.unit.test_core_output import LATE, Api
from tests.unit.test_core_swap import EXTRACT, FakePod


class LiveApi(Api):
    """The slot's log as a live stream: what is appended comes, until the reader lets it go."""

    def __init__(self, pod: FakePod, log: list[str]) -> None:
        super().__init__(pod, log)
        self.appended = threading.Event()
        self.released = threading.Event()
        self.read: list[str] = []

    def append(self, line: str) -> None:
        self.log = [*self.log, line]
        self.appended.set()

    def follow_log(self, name: str, namespace: str, container: str, **_: Any) -> Iterator[str]:
        def stream() -> Iterator[str]:
            sent = 0
            try:
                while True:
                    while sent < len(self.log):
                        sent += 1
                        self.read.append(self.log[sent - 1])
                        yield self.log[sent - 1]
                    self.appended.wait(0.05)
                    self.appended.clear()
            finally:  # the reader closed the stream, or dropped it
                self.released.set()

        return stream()


def test_a_follow_that_ended_lets_the_slots_log_stream_go() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)
    api = LiveApi(pod, [line.replace("t0k", plan.token) for line in LATE])
    result = StageDriver(api, "etl-abc", "data").follow(plan, Timeouts(swap=5))
    assert isinstance(result, StageResult) and result.exit_code == 4
    for n in range(3):  # the slot's next generation prints: nobody of the ended follow reads it
        api.append(f"a later generation's line {n}")
    assert api.released.wait(5), "the ended follow's stream is still read"
    assert "a later generation's line 2" not in api.read
