"""The stage task's round trips to Airflow's task supervisor, under the real scheduler (`bench/scheduler.py
--trips`): every request a task process sends its supervisor (`CommsDecoder.send`: a connection, an XCom
read or push, `task_state_store`, the rendered fields, its success...), each of which the supervisor answers
with a call to the API server, recorded with its start and end; and the process's own marks: the
supervisor's `StartupDetails` received (just after the fork) and the process's exit (the last `atexit`
handler, after the work a stage's end leaves to it).

The recorder is an `airflow_local_settings.py` (`settings`) that the Airflow processes import at start, so
every task process forked from them inherits it; it writes one JSON line per event into a file per process.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from bench import figures

RECORDER = """
import atexit as _atexit, json as _json, os as _os, threading as _threading, time as _time
from airflow.sdk.execution_time import comms as _comms

_TRIPS = {folder!r}


def _trip(kind, t0, t1, **extra):
    with open(_os.path.join(_TRIPS, f"{{_os.getpid()}}.jsonl"), "a") as out:
        out.write(_json.dumps({{"kind": kind, "t0": t0, "t1": t1,
                                "thread": _threading.current_thread().name, **extra}}) + "\\n")


_send, _get = _comms.CommsDecoder.send, _comms.CommsDecoder._get_response


def _timed_send(self, msg):
    t0 = _time.time()
    try:
        return _send(self, msg)
    finally:
        _trip(type(msg).__name__, t0, _time.time(), key=getattr(msg, "key", None))


def _timed_get(self):
    t0 = _time.time()
    got = _get(self)
    if type(got).__name__ == "StartupDetails":
        _trip("StartupDetails", t0, _time.time(), dag_id=got.ti.dag_id, task_id=got.ti.task_id)
        _atexit.register(lambda: _trip("exit", _time.time(), _time.time()))
    return got


_comms.CommsDecoder.send, _comms.CommsDecoder._get_response = _timed_send, _timed_get
"""


def settings(folder: Path) -> str:
    """The `airflow_local_settings.py` text that records into `folder`."""
    return RECORDER.format(folder=str(folder))


def processes(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """task_id -> the events of its (last) task process, in order; processes that ran no task are left out."""
    tasks: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        start = next((e for e in events if e["kind"] == "StartupDetails"), None)
        if start is not None:
            tasks[f"{start['dag_id']}.{start['task_id']}"] = sorted(events, key=lambda e: e["t0"])
    return tasks


def summary(folder: Path, dag_id: str, tis: dict[str, dict[str, Any]]) -> list[str]:
    """Per stage task of `dag_id` (task ids ending in s<k>): the requests to its supervisor by kind (median
    count and median seconds summed per task), and the median time line of them all from the task's
    `start_date` (the n-th request of a kind as KIND#n), with the median seconds each took."""
    tasks = {
        task_id: events
        for key, events in processes(folder).items()
        for task_id in [key.removeprefix(f"{dag_id}.")]
        if key.startswith(f"{dag_id}.") and task_id in tis and re.search(r"(^|\.)s\d+$", task_id)
    }
    if not tasks:
        return []
    counts: dict[str, list[int]] = {}
    spent: dict[str, list[float]] = {}
    for events in tasks.values():
        trips = [e for e in events if e["kind"] not in ("StartupDetails", "exit")]
        kinds = Counter(label(e) for e in trips)
        for kind in {label(e) for events in tasks.values() for e in events} - {"StartupDetails", "exit"}:
            counts.setdefault(kind, []).append(kinds.get(kind, 0))
            spent.setdefault(kind, []).append(sum(e["t1"] - e["t0"] for e in trips if label(e) == kind))
    lines = [
        f"  supervisor requests per stage task ({len(tasks)} tasks), median count and seconds: "
        + ", ".join(
            f"{kind} {figures.median(counts[kind]):g} ({figures.median(spent[kind]):.3f} s)"
            for kind in sorted(counts, key=lambda k: -figures.median(spent[k]))
        )
    ]
    at: dict[str, list[float]] = {}  # each request by its order among those of its kind, from start_date
    took: dict[str, list[float]] = {}
    for task_id, events in tasks.items():
        start, seen = stamp(tis[task_id]["start_date"]), Counter()
        for event in events:
            seen[label(event)] += 1
            name = label(event) + (f"#{seen[label(event)]}" if seen[label(event)] > 1 else "")
            at.setdefault(name, []).append(event["t0"] - start)
            took.setdefault(name, []).append(event["t1"] - event["t0"])
        at.setdefault("end_date", []).append(stamp(tis[task_id]["end_date"]) - start)
        took.setdefault("end_date", []).append(0.0)
    order = sorted(at, key=lambda name: figures.median(at[name]))
    lines.append(
        "  stage task, median s from start_date (+ s taken): "
        + ", ".join(f"{n} {figures.median(at[n]):.3f}+{figures.median(took[n]):.3f}" for n in order)
    )
    return lines


def label(event: dict[str, Any]) -> str:
    return f"{event['kind']}[{event['key']}]" if event.get("key") else event["kind"]


def stamp(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
