"""A generation's output as the task log shows it (core/output.py), and the driver that follows it, when the
runner prints each marker on both of the container's streams: a runtime copies stdout and stderr into the
log apart, so a stage's last stderr line may reach the log after the result line printed on stdout."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

from airflow_kruise_chain.core import StageResult, follow
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


class RotatedApi(Api):
    """The slot's log after a rotation took the generation's result line out: its stream shows the
    generation's start and output, then nothing more while the runner stays parked; a replay request makes
    the runner print the result again (into the log: a stream that is open, or opened after, reads it)."""

    def __init__(self, pod: FakePod, log: list[str], result: str) -> None:
        super().__init__(pod, log)
        self.result = result
        self.patches: list[dict[str, Any]] = []
        self.closed = threading.Event()

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        self.patches.append(body)
        self.pod.apply(body)
        self.log = [*self.log, "", self.result, "", self.result.replace(" result ", " stderr-end ")]
        return self.read_pod(name, namespace)

    def follow_log(self, name: str, namespace: str, container: str, **_: Any) -> Iterator[str]:
        def stream() -> Iterator[str]:  # a running container's stream: what is appended comes, until closed
            sent = 0
            while not self.closed.wait(0.02):
                while sent < len(self.log):
                    sent += 1
                    yield self.log[sent - 1]

        return stream()


def test_the_driver_asks_the_runner_for_a_result_rotated_out_of_the_log(monkeypatch) -> None:
    monkeypatch.setattr(follow, "SILENT_REPLAY_AFTER", 0.2)
    pod = FakePod()
    plan = pod.run(EXTRACT)  # it ran and its runner parked while no one followed
    result = RESULT.replace("t0k", plan.token).replace("gen=1", f"gen={plan.generation}")
    start = START.replace("t0k", plan.token).replace("gen=1", f"gen={plan.generation}")
    api = RotatedApi(pod, ["later lines only", start, "read 100 numbers"], result)
    logged: list[str] = []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    try:
        got = driver.follow(plan, Timeouts(swap=5))
    finally:
        api.closed.set()
    assert isinstance(got, StageResult) and got.exit_code == 4
    (patch,) = api.patches
    ((key, value),) = patch["metadata"]["annotations"].items()
    assert key == f"airflow-kruise-chain/{plan.slot}.replay" and value.split()[0] == str(plan.generation)
    assert any(f"asked {plan.slot}'s runner to print its result again" in line for line in logged)
