"""Chains under the real scheduler: DAG runs triggered and cleared through the REST API, checked from its
records.

See conftest.py for the stack (scheduler, dag-processor, triggerer, api-server, LocalExecutor, SQLite, and
`kruise-local` in this process). Tests share one stack and run in file order; each uses its own DAG.
"""

from __future__ import annotations

import pytest

from airflow_kruise_chain.local import resources as R
from tests.airflow.conftest import AirflowStack

pytestmark = pytest.mark.slow

EXAMPLE = "example_kruise_chain"
EXAMPLE_STAGES = ["generate", "transform", "aggregate", "report"]


def test_example_dag_succeeds_with_one_pod(airflow_stack: AirflowStack) -> None:
    before = airflow_stack.pods_created()
    run_id = airflow_stack.trigger(EXAMPLE)
    assert airflow_stack.wait_run(EXAMPLE, run_id) == "success", airflow_stack.states(EXAMPLE, run_id)
    states = airflow_stack.states(EXAMPLE, run_id)
    assert states == {f"etl.{t}": "success" for t in ["setup", "prewarm", *EXAMPLE_STAGES, "teardown"]}
    assert airflow_stack.pods_created() - before == 1
    log = airflow_stack.task_log(EXAMPLE, run_id, "etl.report", 1)
    assert "top region:" in log
    assert airflow_stack.pods() == [] and airflow_stack.objects(R.CONFIGMAPS) == []
