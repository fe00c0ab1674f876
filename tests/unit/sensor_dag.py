"""A DAG with a chain and a HotSwapSensor, for tests/unit/test_import_light.py (not a test module)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

with DAG("sensor_dag", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False) as chain:
        first = chain.stage("first", image="busybox:1.36", cmds=["true"])
        wait = HotSwapSensor(
            task_id="wait_first", chain_name="c", namespace="default", stage="first", deferrable=True
        )
