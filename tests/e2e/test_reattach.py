"""The worker dies mid-stage; Airflow's next try follows, adopts or re-runs the stage's generation.

Try 1 runs in a separate process (`dag.test()`), SIGKILLed while its stage waits on a gate file in the
pod's scratch volume. The test then does what the scheduler does for a task whose heartbeat stopped (marks
it up_for_retry) and carries on the same DAG run in this process, so try 2 runs against the same pod. What
ran is read from the cluster: the audit log and the runner's start markers in the containers' log files.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R
from kruise_local.testing import wait_for

from tests.e2e.conftest import ROOT, xcoms
from tests.e2e.inline import FAST_POD, serialize_to_db, start_markers, task_states

pytestmark = pytest.mark.slow

DAG_ID = "chain_reattach"
LOGICAL = pendulum.datetime(2026, 3, 1, tz="UTC")
PREPARE = 'seq 1 100 > "$CHAIN_SCRATCH/numbers.txt"; echo prepared'
# waits for the test's verdict in scratch/gate; "fail" fails this generation and lets the next one pass
WORK = r"""
n=$(wc -l < "$CHAIN_SCRATCH/numbers.txt")
echo "work generation $CHAIN_GENERATION waiting for the gate"
while [ ! -f "$CHAIN_SCRATCH/gate" ]; do sleep 0.1; done
if [ "$(cat "$CHAIN_SCRATCH/gate")" = fail ]; then
  echo pass > "$CHAIN_SCRATCH/gate"; echo "work failing on purpose"; exit 1
fi
echo "work generation $CHAIN_GENERATION done with $n numbers"
printf '{"numbers": %s, "generation": %s}' "$n" "$CHAIN_GENERATION" > "$CHAIN_OUTPUT"
"""
TRY_ONE = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.e2e.inline import serialize_to_db
from tests.e2e.test_reattach import LOGICAL, build_dag
dag = build_dag()
serialize_to_db(dag)
dag.test(logical_date=LOGICAL, run_after=LOGICAL)
"""


def build_dag() -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(DAG_ID, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            prepare = chain.stage("prepare", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            work = chain.stage(
                "work",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", WORK],
                retries=1,
                retry_delay=timedelta(0),
            )
            prepare >> work
    return dag


def chain_pod(cluster: Any) -> dict[str, Any] | None:
    pods = cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))
    return pods[0] if pods else None


def logs_contain(cluster: Any, uid: str, text: str) -> bool:
    """Whether a container log of the pod matches the regular expression `text`."""
    logs = (cluster.root / "pods" / uid / "containers").rglob("*.log")
    return any(re.search(text, log.read_text()) for log in logs)


def worker_died(run_id: str, task_id: str) -> None:
    """What the scheduler does for a running task whose heartbeat stopped and that has retries left."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        ti = session.scalar(
            select(TaskInstance).where(
                TaskInstance.dag_id == DAG_ID, TaskInstance.run_id == run_id, TaskInstance.task_id == task_id
            )
        )
        assert (ti.state, ti.try_number) == (TaskInstanceState.RUNNING, 1)
        ti.state = TaskInstanceState.UP_FOR_RETRY
        ti.end_date = pendulum.now("UTC")


def continue_run(dag: Any) -> Any:
    """Carry on the DAG run like the scheduler (dag.test()'s loop, without its clearing and new run)."""
    from airflow import settings
    from airflow.models.dagrun import DagRun
    from airflow.sdk.definitions.dag import _run_task
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    session = settings.Session()
    run = session.scalar(select(DagRun).where(DagRun.dag_id == DAG_ID))
    run.dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    while run.state == DagRunState.RUNNING:
        session.expire_all()
        schedulable, _ = run.update_state(session=session)
        for ti in schedulable:
            ti.try_number += 1
            ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        for ti in run.get_task_instances(session=session):
            if ti.state == TaskInstanceState.SCHEDULED:
                try:
                    _run_task(ti=ti, task=dag.task_dict[ti.task_id], run_triggerer=True)
                except Exception:  # recorded in the task's state, as dag.test() does
                    pass
    return run


@pytest.mark.parametrize("after_death", ["still-running", "succeeded", "failed"])
def test_next_try_after_a_worker_death_follows_adopts_or_reruns(e2e_cluster, tmp_path, capfd, after_death):
    from airflow import settings

    cluster = e2e_cluster
    dag = build_dag()
    serialize_to_db(dag)
    env = {**os.environ, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": str(settings.engine.url)}
    with (tmp_path / "try1.log").open("w") as out:
        try_one = subprocess.Popen(
            [sys.executable, "-c", TRY_ONE],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        pod = wait_for(lambda: chain_pod(cluster), 120, 0.1, "the chain pod")
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        wait_for(lambda: logs_contain(cluster, uid, "work generation 2 waiting"), 120, 0.1, "work to start")
    finally:
        os.killpg(try_one.pid, signal.SIGKILL)  # the worker dies mid-stage
        try_one.wait()
    run_id = f"manual__{LOGICAL.isoformat()}"
    assert task_states_by_id(run_id)["c.work"] == ("running", 1), (tmp_path / "try1.log").read_text()[-3000:]
    audit_at_death = len(cluster.audit)
    gate = cluster.root / "pods" / uid / "volumes" / "scratch" / "gate"
    log_path = f"GET /api/v1/namespaces/default/pods/{name}/log"
    if after_death == "still-running":
        # open the gate only once try 2 follows the stage's log: it must have found it still running
        seen = cluster.requests[log_path]
        threading.Thread(
            target=lambda: (
                wait_for(lambda: cluster.requests[log_path] > seen, 120, 0.1, "try 2 to follow the log"),
                gate.write_text("pass\n"),
            ),
            daemon=True,
        ).start()
    else:
        gate.write_text("pass\n" if after_death == "succeeded" else "fail\n")
        wait_for(
            lambda: logs_contain(cluster, uid, r"result gen=2 token=\S+ stage=work "), 120, 0.1, "work to end"
        )

    worker_died(run_id, "c.work")
    run = continue_run(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "success", out[-3000:]
    assert task_states(run)["c.work"][:2] == ("success", 2)
    result = xcoms(run)["c.work"]
    starts = [(g, s) for g, s, _ in start_markers(cluster, uid)]
    after = cluster.audit[audit_at_death:]
    # a swap is a pod patch or a new ContainerRecreateRequest (try 1's clean-up of its CRR may land late)
    swaps = [
        (m, p) for m, p, _ in after if m == "PATCH" or (m == "POST" and "containerrecreaterequests" in p)
    ]
    if after_death == "failed":
        assert "generation 2 from try 1 ended with exit code 1 (completed): running stage 'work' again" in out
        assert starts == [(1, "prepare"), (2, "work"), (3, "work")]  # a real retry, in the same pod
        assert result["generation"] == 3 and result["outputs"] == {"numbers": 100, "generation": 3}
        assert swaps == [("PATCH", f"/api/v1/namespaces/default/pods/{name}")]  # one swap, scratch intact
    else:
        if after_death == "still-running":
            assert "following generation 2 of stage 'work' from try 1 in slot-b" in out
        assert "adopting result of generation 2 from try 1, not re-running" in out
        # try 2's log holds the generation's whole output, the part before the worker died included
        assert "work generation 2 waiting for the gate" in out
        assert "work generation 2 done with 100 numbers" in out
        assert starts == [(1, "prepare"), (2, "work")]  # the stage process started exactly once
        assert swaps == []  # try 2 swapped nothing in
        assert result["generation"] == 2 and result["exit_code"] == 0
        assert result["outputs"] == {"numbers": 100, "generation": 2}
        assert result["log_tail"][-1] == "work generation 2 done with 100 numbers"
    pods_created = [p for m, p, c in cluster.audit if m == "POST" and p.endswith("/pods") and c == 201]
    assert len(pods_created) == 1


def task_states_by_id(run_id: str) -> dict[str, tuple[str, int]]:
    from types import SimpleNamespace

    states = task_states(SimpleNamespace(dag_id=DAG_ID, run_id=run_id))
    return {task: (state, tries) for task, (state, tries, _) in states.items()}
