"""A DAG written as Airflow users write one (templated image, KubernetesPodOperator names, TaskFlow and mapped
stages), for tests/unit/test_import_light.py (not a test module)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_kruise_chain.chain import KruiseChain

with DAG(
    "authoring_dag", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), params={"tag": "1.36"}
) as dag:
    with KruiseChain(
        "c", namespace="default", image_pull_secrets="regcred", on_finish_action="delete_pod"
    ) as chain:
        first = chain.stage(
            "first", image="busybox:{{ params.tag }}", cmds=["true"], env_vars={"A": "1"}, get_logs=True
        )
        each = chain.stage.partial("each", image="busybox:1.36", cmds=["echo"]).expand(
            arguments=[["a"], ["b"]]
        )

        @task.kruise_chain(image="python:3.11-slim")
        def total(values: list[dict]) -> int:
            return len(values)

        first >> each
        total(each.output)
