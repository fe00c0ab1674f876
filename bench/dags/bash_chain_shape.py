"""The example DAG's shape with BashOperators: the baseline of bench/parse_time.py.

Same DAG arguments, one task group with a setup task, a prewarm task, four stage tasks in a line and a
teardown task (an Airflow teardown), each a BashOperator with a command of similar size.
"""

from __future__ import annotations

import os

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, TaskGroup

NAMESPACE = os.environ.get("KRUISE_CHAIN_NAMESPACE", "default")

with DAG(
    dag_id="bash_chain_shape",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["kruise-chain", "bench"],
    doc_md=__doc__,
) as dag:
    with TaskGroup("etl"):
        setup = BashOperator(task_id="setup", bash_command=f"echo create pod in {NAMESPACE}")
        prewarm = BashOperator(task_id="prewarm", bash_command="echo prewarm")
        stages = [
            BashOperator(task_id=name, bash_command=f"echo {name}; sleep 0", env={"RECORDS": "1000"})
            for name in ("generate", "transform", "aggregate", "report")
        ]
        teardown = BashOperator(task_id="teardown", bash_command="echo delete pod")
        setup >> prewarm >> stages[0] >> stages[1] >> stages[2] >> stages[3] >> teardown
        teardown.as_teardown(setups=setup)
