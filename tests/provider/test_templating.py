"""Template fields as Airflow means them: kept as given, checked at parse as far as known, rendered values
checked when the task runs; what Jinja cannot parse refused at parse; templated images rendered by the
chain's setup and prewarm where they render as in their stage."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG, literal

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor
from airflow_kruise_chain.templating import STAND_IN_IMAGE, run_level, templated

START = pendulum.datetime(2026, 1, 1, tz="UTC")
TAGGED = "busybox:{{ params.tag }}"


def chain_dag(*stages: dict[str, Any], params: dict[str, Any] | None = None, **chain: Any) -> DAG:
    with DAG("templating", schedule=None, start_date=START, params=params or {"tag": "1.36"}) as dag:
        with KruiseChain("c", namespace="default", **chain) as c:
            for stage in stages:
                c.stage(**stage)
    return dag


def test_a_templated_image_parses_and_its_operator_keeps_it_as_given() -> None:
    dag = chain_dag({"name": "a", "image": TAGGED, "cmds": ["true"]})
    stage = dag.task_dict["c.a"]
    assert stage.image == TAGGED
    stage.render_template_fields({"params": {"tag": "1.37"}})
    assert stage.stage_spec().image == "busybox:1.37"


def test_template_fields_are_kept_as_given() -> None:
    cmds, env = ["sh", "-c", "echo {{ ds }}"], {"A": "{{ params.tag }}"}
    dag = chain_dag({"name": "a", "image": "busybox:1.36", "cmds": cmds, "env": env, "arguments": ("x",)})
    stage = dag.task_dict["c.a"]
    assert stage.cmds is cmds and stage.env == env and stage.arguments == ("x",)


@pytest.mark.parametrize(
    ("stage", "field"),
    [
        ({"cmds": ["sh", "-c", 'echo "${#VAR}"']}, "stages[0].cmds[2]"),
        ({"cmds": ["sh"], "arguments": ["-c", "{# never closed"]}, "stages[0].arguments[1]"),
        ({"cmds": ["sh"], "env": {"A": "{{ unclosed"}}, "stages[0].env['A']"),
        ({"cmds": ["sh"], "image": "busybox:{% if %}"}, "stages[0].image"),
    ],
)
def test_a_string_jinja_cannot_parse_fails_at_parse_naming_the_field_and_literal(stage, field) -> None:
    with pytest.raises(ChainConfigError) as err:
        chain_dag({"name": "a", "image": "busybox:1.36", **stage})
    assert err.value.field == field
    assert "literal(" in err.value.message and "Jinja cannot parse" in err.value.message


def test_literal_passes_a_string_as_written() -> None:
    dag = chain_dag({"name": "a", "image": "busybox:1.36", "cmds": ["sh", "-c", literal('echo "${#VAR}"')]})
    stage = dag.task_dict["c.a"]
    stage.render_template_fields({})
    assert stage.stage_spec().cmds == ("sh", "-c", 'echo "${#VAR}"')


def test_a_templated_image_that_renders_invalid_fails_when_rendered_naming_the_field() -> None:
    dag = chain_dag({"name": "a", "image": TAGGED, "cmds": ["true"]})
    stage = dag.task_dict["c.a"]
    stage.render_template_fields({"params": {"tag": "not a tag"}})
    with pytest.raises(ChainConfigError) as err:
        stage.stage_spec()
    assert err.value.field == "stage.image"


def test_what_is_not_templated_is_still_checked_at_parse() -> None:
    with pytest.raises(ChainConfigError) as err:
        chain_dag({"name": "a", "image": TAGGED, "cmds": ["true"], "env": {"1A": "x"}})
    assert err.value.field == "stages[0].env['1A']"


def test_setup_and_prewarm_render_the_images_templated_on_the_run_alone() -> None:
    dag = chain_dag(
        {"name": "a", "image": TAGGED, "cmds": ["true"]},
        {"name": "b", "image": "alpine:3.20", "cmds": ["true"]},
        {"name": "c", "image": "busybox:{{ ti.xcom_pull(task_ids='pick') }}", "cmds": ["true"]},
        {"name": "d", "image": "busybox:{{ params.tag }}", "cmds": ["true"], "params": {"tag": "own"}},
    )
    setup, prewarm = dag.task_dict["c.setup"], dag.task_dict["c.prewarm"]
    assert setup.stage_images == {"a": TAGGED}
    assert prewarm.images == [TAGGED, "alpine:3.20"]
    setup.render_template_fields({"params": {"tag": "1.37"}})
    prewarm.render_template_fields({"params": {"tag": "1.37"}})
    assert prewarm.rendered_images() == ["busybox:1.37", "alpine:3.20"]
    spec = setup.chain_spec()
    assert [s.image for s in spec.stages] == ["busybox:1.37", "alpine:3.20", STAND_IN_IMAGE, STAND_IN_IMAGE]


def test_the_setup_checks_a_stage_image_it_rendered_naming_the_stage() -> None:
    dag = chain_dag({"name": "a", "image": TAGGED, "cmds": ["true"]})
    setup = dag.task_dict["c.setup"]
    setup.render_template_fields({"params": {"tag": "bad tag"}})
    with pytest.raises(ChainConfigError) as err:
        setup.chain_spec()
    assert err.value.field.startswith("stages[0].image")


def test_run_level_templates() -> None:
    from jinja2 import Environment

    env = Environment()
    assert run_level("x:{{ params.tag }}-{{ ds_nodash }}-{{ var.value.get('t', '1') }}", env)
    assert run_level("x:{{ dag_run.conf.get('tag', '1') }}", env)
    assert not run_level("x:{{ ti.xcom_pull(task_ids='a') }}", env)
    assert not run_level("x:{{ task.task_id }}", env)
    assert not run_level("x:{{ unclosed", env)


def test_templated_sees_every_jinja_start_and_no_literal() -> None:
    assert templated("{{ x }}") and templated("{% raw %}{% endraw %}") and templated("{# c #}")
    assert not templated(literal("{{ x }}")) and not templated("plain") and not templated({"{{ k }}": "v"})


def test_a_sensor_in_the_block_must_name_a_stage_of_the_chain() -> None:
    with pytest.raises(ChainConfigError) as err:
        with DAG("sensor", schedule=None, start_date=START):
            with KruiseChain("c", namespace="default") as c:
                c.stage("a", image="busybox:1.36", cmds=["true"])
                HotSwapSensor(task_id="wait", chain_name="c", namespace="default", stage="b")
    assert err.value.field == "c.wait.stage" and "no stage 'b'" in err.value.message


def test_a_sensor_template_jinja_cannot_parse_fails_at_parse() -> None:
    with pytest.raises(ChainConfigError) as err:
        with DAG("sensor", schedule=None, start_date=START):
            with KruiseChain("c", namespace="default") as c:
                c.stage("a", image="busybox:1.36", cmds=["true"])
                HotSwapSensor(task_id="wait", chain_name="c", namespace="default", stage="{{ a")
    assert err.value.field == "c.wait.stage"
