"""What a chain's stage task asks of Airflow's Execution API. Under a real scheduler each request is a round
trip from the task process through its supervisor to the API server and its database, on the stage's
critical path; `dag.test()` sends the same requests to an in-process supervisor, where they are counted."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def count_requests(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str, str]]:
    """(request type, task_id, key) -> how many times the tasks sent it (XCom and task state store)."""
    from airflow.sdk.execution_time import supervisor

    sent: Counter[tuple[str, str, str]] = Counter()
    send = supervisor.InProcessSupervisorComms.send

    def counting(self: Any, msg: Any) -> Any:
        sent[type(msg).__name__, getattr(msg, "task_id", ""), getattr(msg, "key", "")] += 1
        return send(self, msg)

    monkeypatch.setattr(supervisor.InProcessSupervisorComms, "send", counting)
    return sent


def test_a_stage_task_pushes_its_result_once_and_reads_no_xcom(e2e_cluster, monkeypatch):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core.manifest import pod_name_for
    from airflow_kruise_chain.links import ChainPodLink, pod_dashboard_url

    with DAG("execution_api", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            first = chain.stage("one", image="busybox:1.36", cmds=["sh", "-c", "echo one"])
            second = chain.stage("two", image="busybox:1.36", cmds=["sh", "-c", "echo two"])
            # a task that would not push its return value still records its result
            third = chain.stage("three", image="busybox:1.36", cmds=["true"], do_xcom_push=False)
            first >> second >> third
    sent = count_requests(monkeypatch)
    run = run_inline(dag)
    assert {t: s for t, (s, _, _) in task_states(run).items()} == {
        "c.setup": "success",
        "c.one": "success",
        "c.two": "success",
        "c.three": "success",
        "c.teardown": "success",
    }
    results, links = xcoms(run), xcoms(run, ChainPodLink().xcom_key)
    pod = pod_name_for("c", "execution_api", run.run_id)
    for task in ("c.one", "c.two", "c.three"):
        assert results[task]["exit_code"] == 0  # the result is in XCom ...
        assert sent["SetXCom", task, "return_value"] == 1  # ... pushed once (by Airflow: execute returns it)
        # nothing is read back: the 'Chain pod' link Airflow stores at the end is computed from the task
        assert not [request for request in sent if request[0] == "GetXCom" and request[1] == task]
        assert links[task] == pod_dashboard_url("default", pod)
    assert sum(n for (kind, _, key), n in sent.items() if kind == "SetTaskStateStore") == 3  # one per stage
