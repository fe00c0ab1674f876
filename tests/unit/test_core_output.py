"""A generation's output as the task log shows it (core/output.py), and the driver that follows it, when the
runner prints each marker on both of the container's streams: a runtime copies stdout and stderr into the
log apart, so a stage's last stderr line may reach the log after the result line printed on stdout."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

from airflow_kruise_chain.core import StageResult
from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.output import GenerationOutput
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.replay import generation_output
from tests.unit.test_core_swap import EXTRACT, FakePod

START = "::kruise-chain:: start gen=1 token=t0k stage=extract slot=slot-a at=2024-05-01T10:00:00Z"
RESULT = (
    "::kruise-chain:: result gen=1 token=t0k stage=extract slot=slot-a exit=4 reason=completed "
    "started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z outputs=- outputs_status=absent streams=2"
)
ONCE = RESULT.removesuffix(" streams=2")  # a result line printed on one stream only
# the stage wrote "read 100 numbers" on stdout and "bad record 17" on stderr, then exited 4: the stderr line
# (and the stderr copies of the markers) reached the log after the stdout copies
LATE_STDERR = ["boot", START, "read 100 numbers", "", RESULT, START, "bad record 17", "", RESULT, "parked"]
EARLY_STDERR = [START, "bad record 17", START, "read 100 numbers", "", RESULT, "", RESULT]


def shown(lines: list[str], generation: int = 1, token: str = "t0k") -> tuple[list[str], GenerationOutput]:
    output = GenerationOutput(generation, token)
    out: list[str] = []
    for line in lines:
        out += output.feed(line)[1]
    return out, output


def test_the_output_goes_on_until_the_result_line_from_both_streams() -> None:
    out, output = shown(LATE_STDERR)
    assert out == [START, "read 100 numbers", "bad record 17"]  # each marker once, no runner line ends
    assert output.complete and output.result is not None and output.result.exit_code == 4
    assert output.result_line == RESULT
    assert list(output.tail) == ["read 100 numbers", "bad record 17"]
    partial, output = shown(LATE_STDERR[:5])
    assert partial == [START, "read 100 numbers"]
    assert output.result is not None and not output.complete  # the stderr copy is still to come


def test_output_before_the_stdout_start_marker_is_kept() -> None:
    out, output = shown(EARLY_STDERR)
    assert out == [START, "bad record 17", "read 100 numbers"]
    assert list(output.tail) == ["bad record 17", "read 100 numbers"]


def test_a_result_line_printed_once_completes_at_once() -> None:
    out, output = shown([START, "a", "", ONCE, "b"])
    assert out == [START, "a"] and output.complete


def test_a_reader_that_takes_over_logs_each_line_once() -> None:
    first = GenerationOutput(1, "t0k")
    for line in LATE_STDERR[:6]:
        first.feed(line)
    second = GenerationOutput(1, "t0k", skip=first.counted)
    logged, fresh = [], []
    for line in LATE_STDERR:
        before, after = second.feed(line)
        logged += before
        fresh += after
    assert (logged, fresh) == ([START, "read 100 numbers"], ["bad record 17"])


def test_from_log_and_replay_read_up_to_the_second_copy() -> None:
    result = StageResult.from_log(LATE_STDERR, generation=1, image="busybox:1.36", token="t0k")
    assert result is not None and result.log_tail == ["read 100 numbers", "bad record 17"]
    result = StageResult.from_log(EARLY_STDERR, generation=1, image="busybox:1.36", token="t0k")
    assert result is not None and result.log_tail == ["bad record 17", "read 100 numbers"]
    assert list(generation_output(LATE_STDERR, 1)) == [START, "read 100 numbers", "bad record 17", RESULT]


# The runner now marks each stream once: the start and result lines on stdout, stderr-start and stderr-end on
# stderr (what `kubectl logs` shows, each line once); the lines above are what older runners printed.
BEGIN = "::kruise-chain:: stderr-start gen=1 token=t0k stage=extract"
END = "::kruise-chain:: stderr-end gen=1 token=t0k stage=extract"
LATE = ["boot", START, "read 100 numbers", "", RESULT, BEGIN, "bad record 17", "", END, "parked"]
EARLY = [BEGIN, "bad record 17", START, "read 100 numbers", "", RESULT, "", END]


def test_each_stream_marked_once_the_output_goes_on_until_both_ends() -> None:
    out, output = shown(LATE)
    assert out == [START, "read 100 numbers", "bad record 17"]
    assert output.complete and output.result is not None and output.result.exit_code == 4
    assert output.started is not None and output.started.generation == 1
    partial, output = shown(LATE[:5])
    assert partial == [START, "read 100 numbers"] and output.result is not None and not output.complete
    out, output = shown(EARLY)
    assert out == [BEGIN, "bad record 17", "read 100 numbers"]  # the first begin line is shown
    assert output.complete and output.started is not None
    ended_first, output = shown([START, "x", BEGIN, "", END, "", RESULT])  # stderr's end before the result
    assert ended_first == [START, "x"] and output.complete
    for lines in (LATE, EARLY):
        result = StageResult.from_log(lines, generation=1, image="busybox:1.36", token="t0k")
        assert result is not None and sorted(result.log_tail) == ["bad record 17", "read 100 numbers"]
    assert list(generation_output(LATE, 1)) == [START, "read 100 numbers", "bad record 17", RESULT]
    forged = END.replace("t0k", "f4k")  # another token's stream end completes nothing
    assert not shown([START, "x", "", RESULT, forged])[1].complete


class Api:
    """Just enough of a `ChainApi` for `StageDriver.follow`: the pod as it is, and its log as a stream."""

    def __init__(self, pod: FakePod, log: list[str]) -> None:
        self.pod = pod
        self.log = log

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    def follow_log(self, name: str, namespace: str, container: str, **_: Any) -> Iterator[str]:
        return iter(self.log)

    def read_log(self, *args: Any, **kwargs: Any) -> str:
        return "\n".join(self.log)

    def watch_pod(self, *args: Any, **kwargs: Any) -> Iterator[ChainPod | None]:
        return iter(())


def test_the_driver_reports_the_stderr_line_that_came_after_the_result_line() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)  # running in slot-a
    log = [line.replace("t0k", plan.token) for line in LATE_STDERR]
    logged: list[str] = []
    driver = StageDriver(Api(pod, log), "etl-abc", "data", log=logged.append)
    result = driver.follow(plan, Timeouts(swap=5))
    assert isinstance(result, StageResult)
    assert result.exit_code == 4
    assert result.log_tail == ["read 100 numbers", "bad record 17"]  # what the task's failure shows
    assert logged[1:3] == ["read 100 numbers", "bad record 17"]  # and the task log
    assert sum(line.startswith("::kruise-chain:: start") for line in logged) == 1
