"""The chain monitoring pages, a FastAPI app mounted on Airflow's API server (under `URL_PREFIX`).

Reads what the stage tasks recorded (XCom ``chain_state``, task instances) from the Airflow database, and,
while the DAG run is still running and only if an Airflow operator configured ``[kruise_chain]
ui_kubernetes_conn_id``, the live chain pod and its metrics through that connection. Nothing a DAG wrote
(an XCom) chooses the credentials, kubeconfig or cluster the API server uses: in Airflow's security model DAG
authors run code on workers, never on the API server. Every route needs an authenticated user; the data
routes check access to the DAG. The views themselves are built by
`airflow_kruise_chain.core.chainstate.chain_view`.
"""

from __future__ import annotations

import html
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag, requires_authenticated
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select

from airflow_kruise_chain.config import ui_kubernetes_conn_id
from airflow_kruise_chain.connection import KubeConnection
from airflow_kruise_chain.core.chainstate import (
    XCOM_KEY,
    MalformedTrack,
    StageTrack,
    chain_view,
    reported_slots,
)
from airflow_kruise_chain.core.manifest import of_run
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.plugins.urls import URL_PREFIX

STAGE_OPERATOR = "KruiseChainOperator"
ACTIVE_STATES = ("queued", "running")
LOG_TAIL = 25
"""the last lines of a slot's log read for its generation's result line (the runner's last lines)"""
PAGE = (Path(__file__).parent / "page.html").read_text()

log = logging.getLogger(__name__)
app = FastAPI(title="Kruise chains", docs_url=None, redoc_url=None, openapi_url=None)
can_read_run = Depends(requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE))
authenticated = Depends(requires_authenticated())


def _live_pod(
    track: dict[str, Any], dag_id: str, run_id: str
) -> tuple[ChainPod | None, dict[str, Any] | None, set[str]]:
    """The chain pod, its PodMetrics and its slots whose log holds their generation's result line
    (`reported_slots`) through the operator-configured ``ui_kubernetes_conn_id`` (never a connection an
    XCom names), and only if the pod is this DAG run's; (None, None, empty) otherwise."""
    conn_id = ui_kubernetes_conn_id()
    if not conn_id:
        return None, None, set()
    name, namespace = str(track["pod"]), str(track["namespace"])
    try:
        hook = KubeConnection(conn_id).hook()
        pod = hook.read_pod(name, namespace)
        if pod is None:
            return None, None, set()
        if not of_run(pod.labels, dag_id, run_id):
            log.warning("%s/%s is not a chain pod of %s %s", namespace, name, dag_id, run_id)
            return None, None, set()
        reported = reported_slots(pod, lambda slot: hook.read_log(name, namespace, slot, tail_lines=LOG_TAIL))
        return pod, hook.pod_metrics(name, namespace), reported
    except Exception:
        log.warning("cannot read chain pod %s/%s", namespace, name, exc_info=True)
        return None, None, set()


def _page(api: str, index: str) -> str:
    """The page with its data URL and index URL, each HTML-escaped for its attribute."""
    return PAGE.replace("__API_URL__", html.escape(api, quote=True)).replace(
        "__INDEX_URL__", html.escape(index, quote=True)
    )


def _segment(value: str) -> str:
    """`value` as one URL path segment: every reserved character percent-encoded ('/', '?', '#', ...)."""
    return quote(value, safe="")


def task_url(ui_root: str, dag_id: str, run_id: str, task_id: str, try_number: int | None) -> str:
    """The Airflow UI's page of a task instance (its log is the first tab), for one try."""
    url = f"{ui_root}dags/{_segment(dag_id)}/runs/{_segment(run_id)}/tasks/{_segment(task_id)}"
    return f"{url}?try_number={try_number}" if try_number else url


def run_state(dag_id: str, run_id: str, session: Any, ui_root: str = "/") -> dict[str, Any]:
    """Everything the run page shows: the DAG run, and per chain its pod, slots and stages.

    A ``chain_state`` XCom that is not a stage track (any task can push one) is left out and named in
    `errors`, once per task: the rest of the run is shown."""
    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None:
        raise HTTPException(404, f"no DAG run {run_id!r} of {dag_id!r}")
    tis = {
        ti.task_id: ti
        for ti in session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
        )
    }
    rows = session.scalars(XComModel.get_many(run_id=run_id, dag_ids=dag_id, key=XCOM_KEY)).all()
    tracks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    task_of: dict[tuple[str, str], str] = {}
    errors: dict[str, str] = {}
    for row in rows:
        try:
            track = XComModel.deserialize_value(row)
            StageTrack.from_xcom(track)
        except (MalformedTrack, ValueError, TypeError) as err:
            errors.setdefault(
                row.task_id,
                f"task {row.task_id} pushed a malformed {XCOM_KEY} XCom ({err}): it is not shown",
            )
            continue
        tracks[track["chain"]].append(track)
        task_of[(track["chain"], track["stage"])] = row.task_id
    running = str(dag_run.state) in ACTIVE_STATES
    ended = dag_run.end_date.isoformat() if dag_run.end_date else None
    live_view = bool(ui_kubernetes_conn_id())
    chains = []
    for name, chain_tracks in sorted(tracks.items()):
        pod, metrics, reported = (
            _live_pod(chain_tracks[-1], dag_id, run_id) if running else (None, None, set())
        )
        view = chain_view(
            chain_tracks, pod=pod, metrics=metrics, ended_at=ended, live_view=live_view, reported=reported
        )
        for stage in view["stages"]:
            task_id = task_of[(name, stage["stage"])]
            stage["task_id"] = task_id
            stage["task_state"] = str(tis[task_id].state) if task_id in tis else None
            stage["task_url"] = task_url(ui_root, dag_id, run_id, task_id, stage["try_number"])
        recorded = set(task_of.values())
        view["pending"] = [
            {
                "task_id": ti.task_id,
                "task_state": str(ti.state) if ti.state else "none",
                "task_url": task_url(ui_root, dag_id, run_id, ti.task_id, ti.try_number),
            }
            for ti in tis.values()
            if ti.operator == STAGE_OPERATOR
            and ti.task_id not in recorded
            and ti.task_id.rsplit(".", 1)[0] == name
        ]
        chains.append(view)
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "state": str(dag_run.state),
        "running": running,
        "start_date": dag_run.start_date.isoformat() if dag_run.start_date else None,
        "end_date": ended,
        "errors": [errors[task] for task in sorted(errors)],
        "chains": chains,
    }


def _ui_root(request: Request) -> str:
    """The Airflow UI's root path, the parent of the path this app is mounted on."""
    index = request.url_for("index").path
    return index[: -len(URL_PREFIX.strip("/")) - 1] if index.endswith(URL_PREFIX + "/") else "/"


@app.get("/api/runs/{dag_id}/{run_id:path}", dependencies=[can_read_run])
def run_json(dag_id: str, run_id: str, request: Request, session: SessionDep) -> dict[str, Any]:
    """The run page's data as JSON (polled by the page while the run is active)."""
    return run_state(dag_id, run_id, session, _ui_root(request))


@app.get("/runs/{dag_id}/{run_id:path}", response_class=HTMLResponse, dependencies=[can_read_run])
def run_page(dag_id: str, run_id: str, request: Request, session: SessionDep) -> str:
    """One DAG run's chains: pod, slots, stage timeline, exit codes and memory, refreshed while it runs."""
    run_state(dag_id, run_id, session)  # 404 for an unknown run
    index = request.url_for("index").path
    return _page(f"{index}api/runs/{_segment(dag_id)}/{_segment(run_id)}", index)


@app.get("/api/runs")
def runs_json(user: GetUserDep, session: SessionDep, limit: int = 50) -> list[dict[str, Any]]:
    """The latest DAG runs that ran chain stages, among the DAGs the user may read."""
    allowed = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    has_chain = select(XComModel.key).where(XComModel.dag_run_id == DagRun.id, XComModel.key == XCOM_KEY)
    query = (
        select(DagRun)
        .where(DagRun.dag_id.in_(allowed), has_chain.exists())
        .order_by(DagRun.run_after.desc())
        .limit(min(max(limit, 1), 500))
    )
    return [
        {
            "dag_id": run.dag_id,
            "run_id": run.run_id,
            "state": str(run.state),
            "start_date": run.start_date.isoformat() if run.start_date else None,
        }
        for run in session.scalars(query)
    ]


@app.get("/", response_class=HTMLResponse, dependencies=[authenticated])
def index(request: Request) -> str:
    """The list of runs with chains, each linking to its run page."""
    return _page(request.url_for("runs_json").path, request.url_for("index").path)
