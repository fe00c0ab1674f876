"""The 'Chain pod' link of a chain task: computed from the task and its DAG run (no XCom read)."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_kruise_chain.core.manifest import pod_name_for
from airflow_kruise_chain.links import ChainPodLink, pod_dashboard_url
from airflow_kruise_chain.operators.chain import KruiseChainOperator


def test_the_chain_pod_link_follows_from_the_task_and_its_run_and_is_empty_before_rendering() -> None:
    op = KruiseChainOperator(
        task_id="s", chain_name="etl", namespace="data", stage_name="s", image="busybox:1.36", cmds=["true"]
    )
    key = SimpleNamespace(dag_id="d", run_id="manual__1")
    expected = pod_dashboard_url("data", pod_name_for("etl", "d", "manual__1"))
    assert ChainPodLink().get_link(op, ti_key=key) == expected
    # a task that failed before it rendered its fields links nowhere rather than to a template
    op.namespace = "{{ params.namespace }}"
    assert ChainPodLink().get_link(op, ti_key=key) == ""
