"""Running a DAG built inside a test with `dag.test()`.

`dag.test()` only runs DAGs that the metadata database knows (serialized, with a version); a DAG built in a
test function is in no bundle, so `run_inline` writes it to the database first, under the `dags-folder`
bundle. Import Airflow only inside tests: the `airflow_home` fixture must set AIRFLOW_HOME first.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any


def serialize_to_db(dag: Any) -> None:
    """Write `dag` to the metadata database as the DAG processor would (DagModel, serialized DAG, version)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db(
            "dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None, set(), session
        )


def run_inline(dag: Any, elsewhere: str | None = None) -> Any:
    """`dag.test()` for a DAG built in the test; returns the finished DagRun. `elsewhere`: a regex of task ids
    that another worker runs (the test does their work itself): `dag.test()` marks them success unrun."""
    serialize_to_db(dag)
    return dag.test(mark_success_pattern=elsewhere)


def task_states(run: Any) -> dict[str, tuple[str, int, float]]:
    """task_id -> (state, try_number, duration in seconds) of a finished run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        return {ti.task_id: (str(ti.state), ti.try_number, ti.duration or 0.0) for ti in tis}


def task_end_dates(run: Any) -> dict[str, Any]:
    """task_id -> end_date (aware datetime) of a finished run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == run.dag_id, TaskInstance.run_id == run.run_id)
        ).all()
        return {ti.task_id: ti.end_date for ti in tis}


FAST_POD = {"pod_template": {"spec": {"terminationGracePeriodSeconds": 2}}}
"""Chain pod options for tests: a short grace period, so that a stop that ends in SIGKILL (a stage ignoring
SIGTERM; a container's pid 1 with no SIGTERM handler, as the kernel has it) costs 2 s rather than 30 s. Parked
runners exit at once on SIGTERM, so this changes nothing else."""


class Failures:
    """An `on_failure_callback` that records each failed task's exception (task_id -> exception)."""

    def __init__(self) -> None:
        self.errors: dict[str, BaseException] = {}

    def __call__(self, context: Any) -> None:
        self.errors[context["ti"].task_id] = context["exception"]


def stage_records(annotations: Mapping[str, str] | None) -> dict[str, dict[str, Any]]:
    """The stage records in a chain pod's `annotations` (its one ``airflow-kruise-chain/stages`` annotation):
    stage -> record as JSON, newest first; {} before the first swap."""
    return json.loads((annotations or {}).get("airflow-kruise-chain/stages") or "{}")


def pod_events(cluster: Any) -> list[tuple[str, Any, dict[str, Any]]]:
    """Start recording the cluster's object events; returns the (live) list of (kind, resource, object)."""
    history: list[tuple[str, Any, dict[str, Any]]] = []
    cluster.call(lambda: cluster.store.listen(lambda kind, res, obj, old: history.append((kind, res, obj))))
    return history


TEARDOWN_KILL = re.compile(r"Stopping container \S+")
"""the kubelet's Killing message when it stops a container of a pod being deleted (`killPodWithSyncResult` ->
`killContainer` with no message: "Stopping container %s")"""


def restarts_and_back_offs(history: list[tuple[str, Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The BackOff and Killing events about pods in `history`, but for the kills of a pod's teardown: once a
    pod is marked for deletion its kubelet stops each running container with Killing "Stopping container
    <name>", a kill that restarts nothing."""
    from kruise_local import resources as R

    deleting: set[str] = set()
    found = []
    for _, res, obj in history:
        if res is R.PODS and obj["metadata"].get("deletionTimestamp"):
            deleting.add(obj["metadata"]["uid"])
        elif res is R.EVENTS and obj["involvedObject"].get("kind") == "Pod":
            if obj["reason"] == "BackOff" or (
                obj["reason"] == "Killing"
                and not (
                    obj["involvedObject"].get("uid") in deleting and TEARDOWN_KILL.fullmatch(obj["message"])
                )
            ):
                found.append(obj)
    return found


START_IN_CRI_LOG = re.compile(
    r"^\S+ stdout [FP] ::kruise-chain:: start gen=(\d+) token=\S* stage=(\S+) slot=(\S+) at=", re.M
)
"""A runner's start marker in a CRI log file (``<time> <stream> <F|P> <line>``): at the start of its line."""


def start_markers(cluster: Any, pod_uid: str) -> list[tuple[int, str, str]]:
    """(generation, stage, slot) of every stage start in the pod's container logs, by generation."""
    found = []
    for log in (cluster.root / "pods" / pod_uid / "containers").rglob("*.log"):
        found += [(int(g), s, slot) for g, s, slot in re.findall(START_IN_CRI_LOG, log.read_text())]
    return sorted(set(found))


def in_thread(fn: Any) -> dict[str, Any]:
    """Run `fn` in a daemon thread: the dict gets its `thread`, then its `result` or the `error` it raised."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = fn()
        except Exception as e:  # the test inspects it
            outcome["error"] = e

    outcome["thread"] = threading.Thread(target=work, daemon=True)
    outcome["thread"].start()
    return outcome
