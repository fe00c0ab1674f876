"""bench/scheduler.py's warm-up of the triggerer: one deferred task whose trigger makes one request of the
Task SDK (an XCom read), so that the triggerer builds its in-process Execution API before the measured DAG
runs. A triggerer builds it once, on the first request any trigger makes (a deferred chain stage that ends
from its trigger pushes its XComs so, and reads its own first: `airflow_kruise_chain.triggers.end`); it
takes seconds, a start-up cost of the triggerer like the scheduler's and the executor's first run, which the
warm-up DAG run already takes out of the measured ones."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pendulum
from airflow.sdk import DAG, BaseOperator
from airflow.triggers.base import BaseTrigger, TriggerEvent

DAG_ID = "bench_sched_warmup_triggerer"


class XComReadTrigger(BaseTrigger):
    """Reads its task's `return_value` XCom once through the Task SDK, then fires."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("bench.warmup.XComReadTrigger", {})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow.sdk.execution_time.xcom import XCom

        ti = self.task_instance
        await XCom.aget_one(
            key="return_value", dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index
        )
        yield TriggerEvent({"read": True})


class DeferOnce(BaseOperator):
    """Defers to `XComReadTrigger` and ends when it fires."""

    def execute(self, context: Any) -> None:
        self.defer(trigger=XComReadTrigger(), method_name="done")

    def done(self, context: Any, event: Any = None) -> None:
        return None


def build_triggerer_warmup_dag() -> DAG:
    with DAG(DAG_ID, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
        DeferOnce(task_id="defer_once")
    return dag


WARMUP_DAG = (
    '"""airflow DAG: the triggerer warm-up of bench/scheduler.py."""\n'
    "from bench.warmup import build_triggerer_warmup_dag\n\n"
    "dag = build_triggerer_warmup_dag()\n"
)
"""the DAG file of the warm-up (the DAG processor imports bench from the repository, on PYTHONPATH)"""
