"""TaskFlow stages run end to end (`dag.test()`): a Python function as a stage of the chain's pod, its
source and JSON arguments shipped in (templates and XComArgs resolved), its return value to XCom; an image
without Python fails naming the image."""

from __future__ import annotations

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

pytestmark = pytest.mark.slow
START = pendulum.datetime(2026, 1, 1, tz="UTC")


def test_taskflow_stages_pass_values_through_xcom(e2e_cluster) -> None:
    from airflow.sdk import DAG, task

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("taskflow", schedule=None, start_date=START, params={"n": 4}) as dag:
        with KruiseChain("tf", namespace="default", prewarm=False, **FAST_POD) as chain:

            @chain.task(image="python:3.11-slim")
            def numbers(n: str) -> list[int]:
                return list(range(int(n)))

            @task.kruise_chain(image="python:3.11-slim", multiple_outputs=True)
            def summary(values: list[int], label: str) -> dict[str, object]:
                import statistics  # the function imports what it uses: only its source ships

                return {"total": sum(values), "mean": statistics.mean(values), "label": label}

            @chain.task(image="python:3.11-slim", env={"SCALE": "10"})
            def scaled(total: int) -> int:
                import os

                return total * int(os.environ["SCALE"])

            result = summary(numbers("{{ params.n }}"), label="run of {{ dag.dag_id }}")
            scaled(result["total"])

    run = run_inline(dag)
    states = {task: state for task, (state, _, _) in task_states(run).items()}
    assert states == {
        t: "success" for t in ("tf.setup", "tf.numbers", "tf.summary", "tf.scaled", "tf.teardown")
    }
    values = xcoms(run)
    assert values["tf.numbers"] == [0, 1, 2, 3]
    assert values["tf.summary"] == {"total": 6, "mean": 1.5, "label": "run of taskflow"}
    assert xcoms(run, "total")["tf.summary"] == 6  # multiple_outputs
    assert values["tf.scaled"] == 60
    result = xcoms(run, "stage_result")["tf.scaled"]
    assert (result["stage"], result["exit_code"], result["image"]) == ("scaled", 0, "python:3.11-slim")


def test_an_image_without_python_fails_naming_the_image(e2e_cluster) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    image = "gcr.io/distroless/static-debian12:nonroot"
    with DAG("taskflow_no_python", schedule=None, start_date=START, on_failure_callback=failures) as dag:
        with KruiseChain("tf", namespace="default", prewarm=False, **FAST_POD) as chain:

            @chain.task(image=image, on_failure_callback=failures)
            def hello() -> str:
                return "hello"

            hello()

    run = run_inline(dag)
    assert task_states(run)["tf.hello"][0] == "failed"
    message = str(failures.errors["tf.hello"])
    assert image in message and "has no 'python3'" in message
