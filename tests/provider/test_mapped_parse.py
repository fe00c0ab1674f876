"""Mapped stages when the DAG is parsed: `chain.stage.partial(...).expand(...)` / `.expand_kwargs(...)` and a
TaskFlow stage's `.expand`, what the chain makes of them, and what it refuses naming the field."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError, ChainSpec
from airflow_kruise_chain.core.resources import ChainSizing
from airflow_kruise_chain.mapped import DEFAULT_MAX_MAP_LENGTH
from airflow_kruise_chain.operators.chain import KruiseChainOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")
EACH = {"image": "busybox:1.36", "cmds": ["sh", "-c"]}


def build(body: Any) -> DAG:
    with DAG("mapped", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default") as chain:
            body(chain)
    return dag


def spec(dag: DAG) -> ChainSpec:
    return ChainSpec.from_dict(dag.task_dict["c.setup"].chain)


def test_a_mapped_stage_is_one_stage_of_the_chain_per_map_index() -> None:
    def body(chain: KruiseChain) -> None:
        first = chain.stage("first", image="alpine:3.20", cmds=["true"])
        each = chain.stage.partial("each", **EACH).expand(arguments=[["echo 1"], ["echo 2"]])
        last = chain.stage("last", image="alpine:3.20", cmds=["true"])
        first >> each >> last

    dag = build(body)
    each = dag.task_dict["c.each"]
    assert each.max_active_tis_per_dagrun == 2  # the pod's slots
    assert each.partial_kwargs["max_map_length"] == DEFAULT_MAX_MAP_LENGTH
    chain = spec(dag)
    assert [(s.name, s.map_length) for s in chain.stages] == [
        ("first", 0),
        ("each", DEFAULT_MAX_MAP_LENGTH),
        ("last", 0),
    ]
    assert chain.stages[1].stage_names()[:2] == ["each-0", "each-1"]
    assert dag.task_dict["c.prewarm"].images == ["alpine:3.20", "busybox:1.36"]
    assert dag.task_dict["c.first"].next_stage() == ("each", "busybox:1.36")  # its slot prepared for it
    assert dag.task_dict["c.last"].chain_predecessors() == ["each-0"]


def test_expanded_images_are_prewarmed_and_checked() -> None:
    dag = build(
        lambda chain: chain.stage.partial("each", cmds=["true"]).expand(image=["alpine:3.20", "busybox:1.36"])
    )
    assert dag.task_dict["c.prewarm"].images == ["alpine:3.20", "busybox:1.36"]
    assert dag.task_dict["c.setup"].chain["stages"][0]["image"].startswith("templated.invalid/")
    with pytest.raises(ChainConfigError) as err:
        build(
            lambda chain: chain.stage.partial("each", cmds=["true"]).expand(
                image=["alpine:3.20", "Bad Image"]
            )
        )
    assert err.value.field == "stages[0].image"


def test_expand_kwargs_of_literal_dicts() -> None:
    dag = build(
        lambda chain: chain.stage.partial("each", image="busybox:1.36").expand_kwargs(
            [{"cmds": ["echo", "a"], "env": {"K": "1"}}, {"cmds": ["echo", "b"], "env": {"K": "2"}}]
        )
    )
    assert spec(dag).stages[0].map_length == DEFAULT_MAX_MAP_LENGTH


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (
            lambda c: c.stage.partial("each", **EACH).expand(resources=[{}]),
            "stages[0].resources",
            "cannot be expanded",
        ),
        (lambda c: c.stage.partial("each", **EACH).expand(cmds=[["x"]]), "stages[0].cmds", "both in partial"),
        (
            lambda c: c.stage.partial("each", **EACH, max_active_tis_per_dagrun=3).expand(arguments=[["a"]]),
            "stages[0].max_active_tis_per_dagrun",
            "at most 2 stages at once",
        ),
        (
            lambda c: c.stage.partial("each", cmds=["true"]).expand(arguments=[["a"]]),
            "stages[0].image",
            "is required",
        ),
        (
            lambda c: c.stage.partial("x" * 38, **EACH).expand(arguments=[["a"]]),
            "stages[0].max_map_length",
            "at most 40",
        ),
        (
            lambda c: c.stage.partial("each", **EACH).expand(arguments=[["${#X}"]]),
            "stages[0].arguments[0]",
            "literal(",
        ),
        (
            lambda c: (
                c.stage.partial("each", **EACH, max_map_length=5).expand(arguments=[["a"]]),
                c.stage("each-3", image="busybox:1.36", cmds=["true"]),
            ),
            "stages[1].name",
            "duplicate stage name 'each-3'",
        ),
        (
            lambda c: c.stage.partial("each", **EACH, max_map_length=1000).expand(arguments=[["a"]]),
            "stages",
            "split the chain",
        ),
    ],
)
def test_what_a_mapped_stage_refuses_at_parse(body, field, says) -> None:
    with pytest.raises(ChainConfigError) as err:
        build(body)
    assert err.value.field == field and says in err.value.message


def test_a_taskflow_stage_expands() -> None:
    def body(chain: KruiseChain) -> None:
        @chain.task(image="python:3.11-slim", max_map_length=10)
        def square(x: int, power: int) -> int:
            return x**power

        square.partial(power=2).expand(x=[1, 2, 3])

    dag = build(body)
    square = dag.task_dict["c.square"]
    assert (square.max_active_tis_per_dagrun, square.partial_kwargs["max_map_length"]) == (2, 10)
    (stage,) = spec(dag).stages
    assert (stage.name, stage.map_length, stage.cmds[3]) == ("square", 10, "square")


def test_a_map_index_runs_as_its_own_stage_and_not_past_max_map_length() -> None:
    op = KruiseChainOperator(
        task_id="each", chain_name="c", namespace="default", stage_name="each", max_map_length=5, **EACH
    )
    op.index_stage({"ti": SimpleNamespace(map_index=4)})
    assert (op.stage_name, op.map_index, op.next_stage()) == ("each-4", 4, None)
    op.index_stage({"ti": SimpleNamespace(map_index=4)})  # a second call (execute_complete) keeps it
    assert op.stage_name == "each-4"
    late = KruiseChainOperator(
        task_id="e", chain_name="c", namespace="default", stage_name="each", max_map_length=5, **EACH
    )
    with pytest.raises(AirflowFailException, match="past its max_map_length 5"):
        late.index_stage({"ti": SimpleNamespace(map_index=5)})


def test_a_map_index_is_sized_as_its_mapped_stage() -> None:
    big, parked = {"requests": {"memory": "1Gi"}}, {"requests": {"memory": "16Mi"}}
    sizing = ChainSizing(qos="Burstable", parked=parked, stages={"each": big})
    assert sizing.for_stage("each-7") == big and sizing.for_stage("other") == parked


def test_a_sensor_waits_for_one_map_index() -> None:
    from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

    def body(stage: str) -> Any:
        def declare(chain: KruiseChain) -> None:
            chain.stage.partial("each", **EACH).expand(arguments=[["a"], ["b"]])
            HotSwapSensor(task_id="wait", chain_name="c", namespace="default", stage=stage)

        return declare

    build(body("each-1"))
    with pytest.raises(ChainConfigError, match="is mapped: each map index i is a stage of its own"):
        build(body("each"))
