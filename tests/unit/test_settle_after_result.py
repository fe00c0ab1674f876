"""The work a stage's end starts (park its slot, size the next stage's ahead, prepare two ahead) settles after
the task has reported its result (issue 40: off the path from the stage's end to the next task's start): in
Airflow's forked task process at its exit, anywhere else on a thread of its own."""

from __future__ import annotations

import atexit
import subprocess
import sys
from collections.abc import Callable

from airflow_kruise_chain.operators import stage_result as result_module


class Park:
    def __init__(self, error: Exception | None = None) -> None:
        self.settled = 0
        self.error = error

    def settle(self) -> None:
        self.settled += 1
        if self.error is not None:
            raise self.error


def test_outside_a_forked_task_process_a_thread_settles_it_and_logs_a_failure() -> None:
    import threading

    gate = threading.Event()

    class Slow(Park):
        def settle(self) -> None:
            gate.wait(10)
            super().settle()

    park, failing, warnings = Slow(), Park(RuntimeError("api down")), []
    result_module.settle_after_result(lambda: park, warnings.append)  # type: ignore[arg-type,return-value]
    assert park.settled == 0  # the task goes on (dag.test(): the next task starts)
    gate.set()
    result_module.settle_after_result(lambda: failing, warnings.append)  # type: ignore[arg-type,return-value]
    settlers = [t for t in threading.enumerate() if t.name == "settle-park"]
    assert all(not t.daemon for t in settlers)  # the interpreter waits for them at its exit
    for thread in settlers:
        thread.join(10)
    assert park.settled == 1 and failing.settled == 1
    assert warnings == ["::kruise-chain:: the work after the stage's end did not finish: api down"]


def test_in_a_forked_task_process_it_settles_at_exit_and_a_failure_is_only_logged(monkeypatch) -> None:
    registered: list[Callable[[], None]] = []
    monkeypatch.setattr(result_module, "_forked_task_process", lambda: True)
    monkeypatch.setattr(atexit, "register", registered.append)
    park, failing, warnings = Park(), Park(RuntimeError("api down")), []
    result_module.settle_after_result(lambda: park, warnings.append)  # type: ignore[arg-type,return-value]
    result_module.settle_after_result(lambda: failing, warnings.append)  # type: ignore[arg-type,return-value]
    assert park.settled == 0 and failing.settled == 0  # the task returns first
    for handler in registered:  # the task process exits
        handler()
    assert park.settled == 1 and failing.settled == 1
    assert warnings == ["::kruise-chain:: the work after the stage's end did not finish: api down"]


def test_a_task_process_is_recognised_by_its_supervisor_comms() -> None:
    """What `_forked_task_process` reads: task_runner.main sets SUPERVISOR_COMMS to a CommsDecoder in the
    process the supervisor forked; dag.test() sets an in-process stand-in; a direct call none."""
    assert not result_module._forked_task_process()
    code = (
        "from airflow.sdk.execution_time import task_runner\n"
        "from airflow.sdk.execution_time.comms import CommsDecoder\n"
        "from airflow_kruise_chain.operators.stage_result import _forked_task_process\n"
        "task_runner.SUPERVISOR_COMMS = CommsDecoder.__new__(CommsDecoder)\n"
        "print(_forked_task_process())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr
