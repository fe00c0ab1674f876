"""TaskFlow stages when the DAG is parsed and when their arguments are shipped: what `@chain.task` and
`@task.kruise_chain` make, and what they refuse (naming the field)."""

from __future__ import annotations

import json
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, task

from airflow_kruise_chain import get_provider_info
from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError, ChainSpec
from airflow_kruise_chain.decorators.kruise_chain import (
    BOOTSTRAP,
    MAX_ARGUMENTS_BYTES,
    TaskFlowStageOperator,
    function_source,
)

START = pendulum.datetime(2026, 1, 1, tz="UTC")
PY = {"image": "python:3.11-slim"}


def test_the_decorator_is_registered_for_task_dot_kruise_chain() -> None:
    (entry,) = get_provider_info()["task-decorators"]
    assert entry == {
        "name": "kruise_chain",
        "class-name": "airflow_kruise_chain.decorators.kruise_chain.kruise_chain_task",
    }
    assert callable(task.kruise_chain)


def test_a_taskflow_stage_is_a_stage_of_its_chain() -> None:
    with DAG("tf", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default") as chain:

            @chain.task(**PY, retries=2)
            def load_data(path: str) -> int:
                return len(path)

            @task.kruise_chain(**PY)
            def report(n: int) -> None:
                print(n)

            report(load_data("/in"))
    op = dag.task_dict["c.load_data"]
    assert isinstance(op, TaskFlowStageOperator) and op.retries == 2
    assert op.stage_name == "load-data"  # a stage's name is a DNS label: the task id keeps its underscore
    assert op.cmds[:4] == ["python3", "-c", BOOTSTRAP, "load_data"]
    assert op.cmds[4].startswith("def load_data(path: str) -> int:")
    spec = ChainSpec.from_dict(dag.task_dict["c.setup"].chain)
    assert [s.name for s in spec.stages] == ["load-data", "report"]
    assert dag.task_dict["c.prewarm"].images == ["python:3.11-slim"]
    assert {"c.prewarm", "c.load_data"} <= dag.task_dict["c.report"].upstream_task_ids


def test_a_function_called_twice_gives_two_stages() -> None:
    with DAG("tf", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default") as chain:

            @chain.task(**PY)
            def step(x: int) -> int:
                return x + 1

            step(step(1))
    spec = ChainSpec.from_dict(dag.task_dict["c.setup"].chain)
    assert [s.name for s in spec.stages] == ["step", "step-1"]
    assert set(dag.task_dict) >= {"c.step", "c.step__1"}


def test_the_source_ships_without_its_decorators() -> None:
    def multi(
        a: int,
    ) -> int:
        return a

    assert function_source(multi).startswith("def multi(\n")
    with pytest.raises(ChainConfigError):
        function_source(lambda: 1)


@pytest.mark.parametrize(
    ("build", "field", "says"),
    [
        (lambda: task.kruise_chain(**PY)(lambda_free)("x"), "lambda_free", "inside `with KruiseChain"),
        (lambda: chain_of(cmds=["x"]), "cmds", "command is its function"),
        (lambda: chain_of(context=True), "uses_ds", "context key"),
        (lambda: chain_of(args=("${#VAR}",)), "stages[0].op_args[0]", "literal("),
    ],
)
def test_what_a_taskflow_stage_refuses_at_parse(build, field, says) -> None:
    with pytest.raises(ChainConfigError) as err, DAG("tf", schedule=None, start_date=START):
        build()
    assert err.value.field == field and says in err.value.message


def lambda_free(x: str) -> str:
    return x


def chain_of(*, cmds: list[str] | None = None, context: bool = False, args: tuple[str, ...] = ("a",)) -> None:
    with KruiseChain("c", namespace="default") as chain:
        extra: dict[str, Any] = {"cmds": cmds} if cmds else {}
        if context:

            @chain.task(**PY)
            def uses_ds(ds: str | None = None) -> str | None:
                return ds

            uses_ds()
        else:
            chain.task(**PY, **extra)(lambda_free)(*args)


def operator(**kwargs: Any) -> TaskFlowStageOperator:
    with DAG("tf", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default") as chain:
            chain.task(**PY)(lambda_free)(**kwargs)
    return dag.task_dict["c.lambda_free"]


def test_the_arguments_ship_as_json_once_rendered() -> None:
    op = operator(x="{{ params.v }}")
    op.render_template_fields({"params": {"v": "rendered"}})
    assert json.loads(op.payload()) == {"args": [], "kwargs": {"x": "rendered"}}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (object(), "is not JSON"),
        (float("nan"), "is not JSON"),
        ("y" * (MAX_ARGUMENTS_BYTES + 1), "$CHAIN_SCRATCH"),
    ],
)
def test_arguments_that_cannot_ship_fail_naming_the_argument(value, says) -> None:
    op = operator(x="placeholder")
    op.op_kwargs = {"x": value}  # what rendering (an XCom) gave
    with pytest.raises(ChainConfigError) as err:
        op.payload()
    assert says in err.value.message and err.value.field in ("x", "op_args")


def test_an_argument_the_secrets_masker_knows_is_refused() -> None:
    from airflow.sdk.log import mask_secret

    mask_secret("s3cr3t-value-for-taskflow")
    op = operator(x="placeholder")
    op.op_kwargs = {"x": {"password": "s3cr3t-value-for-taskflow"}}
    with pytest.raises(ChainConfigError) as err:
        op.payload()
    assert err.value.field == "x" and "secrets masker" in err.value.message
    assert "s3cr3t" not in str(err.value)
