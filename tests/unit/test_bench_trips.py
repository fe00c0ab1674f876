"""bench/trips.py: the recorder of a task process's requests to its supervisor, and its summary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench import REPO, trips

TASK = """
import sys, time
from types import SimpleNamespace
from airflow.sdk.execution_time import comms

class StartupDetails:
    ti = SimpleNamespace(dag_id="d", task_id="c.s1")

class SetXCom:
    key = "chain_state"

class SucceedTask:
    pass

comms.CommsDecoder.send = lambda self, msg: time.sleep(0.01)
comms.CommsDecoder._get_response = lambda self: StartupDetails()
exec(open(sys.argv[1]).read())
decoder = comms.CommsDecoder.__new__(comms.CommsDecoder)
decoder._get_response()
for msg in (SetXCom(), SetXCom(), SucceedTask()):
    decoder.send(msg)
"""


def test_it_records_each_request_and_the_exit_and_sums_them_per_kind(tmp_path: Path) -> None:
    folder = tmp_path / "trips"
    folder.mkdir()
    settings = tmp_path / "airflow_local_settings.py"
    settings.write_text(trips.settings(folder))
    subprocess.run(
        [sys.executable, "-c", TASK, str(settings)], cwd=REPO, check=True, timeout=120, capture_output=True
    )
    events = trips.processes(folder)["d.c.s1"]
    assert [trips.label(e) for e in events] == [
        "StartupDetails",
        "SetXCom[chain_state]",
        "SetXCom[chain_state]",
        "SucceedTask",
        "exit",
    ]
    assert all(e["t1"] - e["t0"] >= 0.01 for e in events[1:4])
    start = events[0]["t0"]
    ti = {"start_date": _iso(start - 0.25), "end_date": _iso(start + 1)}
    lines = trips.summary(folder, "d", {"c.s1": ti, "c.setup": ti})
    assert lines[0].startswith("  supervisor requests per stage task (1 tasks), median count and seconds: ")
    assert "SetXCom[chain_state] 2 (" in lines[0] and "SucceedTask 1 (" in lines[0]
    assert lines[1].startswith("  stage task, median s from start_date (+ s taken): StartupDetails 0.250+")
    assert lines[1].endswith("end_date 1.250+0.000")
    # each step's time from start_date, in the order the process made them: at least the 0.01 s each request
    # before it slept, and no upper bound (a loaded machine delays the process between its requests)
    at = {k: float(v) for k, v in re.findall(r"(\S+) (\d+\.\d+)\+\d+\.\d+", lines[1].split(": ", 1)[1])}
    steps = ["StartupDetails", "SetXCom[chain_state]", "SetXCom[chain_state]#2", "SucceedTask", "exit"]
    assert list(at) == [*steps, "end_date"]
    assert list(at.values()) == sorted(at.values()) and at["exit"] >= 0.25 + 3 * 0.01 - 0.001


def _iso(seconds: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()
