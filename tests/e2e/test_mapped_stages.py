"""Mapped stages run end to end (`dag.test()`): each map index a stage of the chain's pod (its own record,
result and XCom), classic (`chain.stage.partial(...).expand(...)`) and TaskFlow (`.partial().expand()`)."""

from __future__ import annotations

import pendulum
import pytest

from tests.e2e.inline import FAST_POD, run_inline, stage_records, task_states

pytestmark = pytest.mark.slow
START = pendulum.datetime(2026, 1, 1, tz="UTC")
EACH = 'printf \'{"i": %s}\' "$1" > "$CHAIN_OUTPUT"; echo "$1" > "$CHAIN_SCRATCH/done-$1"'
COUNT = 'n=$(ls "$CHAIN_SCRATCH" | grep -c "^done-"); printf \'{"done": %s}\' "$n" > "$CHAIN_OUTPUT"'


def test_mapped_stages_run_each_index_in_the_chain_pod(e2e_cluster) -> None:
    from airflow.models.xcom import XComModel
    from airflow.sdk import DAG
    from airflow.utils.session import create_session
    from kruise_local import resources as R

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core.manifest import pod_name_for

    with DAG("mapped_stages", schedule=None, start_date=START) as dag:
        with KruiseChain("m", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            each = chain.stage.partial(
                "each", image="busybox:1.36", cmds=["/bin/sh", "-c", EACH, "each"]
            ).expand(arguments=[[str(i)] for i in range(3)])
            count = chain.stage("count", image="alpine:3.20", cmds=["/bin/sh", "-c", COUNT])

            @chain.task(image="python:3.11-slim")
            def square(x: int) -> int:
                return x * x

            @chain.task(image="python:3.11-slim")
            def total(values: list[int]) -> int:
                return sum(values)

            each >> count >> total(square.expand(x=[1, 2, 3]))

    run = run_inline(dag)
    states = task_states(run)
    assert {task: state for task, (state, _, _) in states.items()} == {
        t: "success" for t in ("m.setup", "m.each", "m.count", "m.square", "m.total", "m.teardown")
    }
    with create_session() as session:
        rows = session.scalars(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, key="return_value")
        ).all()
        values = {(row.task_id, row.map_index): XComModel.deserialize_value(row) for row in rows}
    assert [values[("m.each", i)]["outputs"] for i in range(3)] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert [values[("m.each", i)]["stage"] for i in range(3)] == ["each-0", "each-1", "each-2"]
    assert values[("m.count", -1)]["outputs"] == {"done": 3}  # every index wrote in the one scratch volume
    assert [values[("m.square", i)] for i in range(3)] == [1, 4, 9]
    assert values[("m.total", -1)] == 14
    name = pod_name_for("m", "mapped_stages", run.run_id)
    (pod,) = [
        p
        for p in e2e_cluster.call(lambda: list(e2e_cluster.store.items(R.PODS, "default")))
        if p["metadata"]["name"] == name
    ]
    records = stage_records(pod["metadata"]["annotations"])
    assert {f"each-{i}" for i in range(3)} | {f"square-{i}" for i in range(3)} <= set(records)
