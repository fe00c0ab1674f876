"""Hostile or careless stage definitions (issue 12, item 6): refused at parse naming the field, or delivered
to the stage exactly; never an Airflow error (DuplicateTaskIdFound, UnicodeEncodeError) or a silent change."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest

from airflow_kruise_chain.core import ChainConfigError
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

START = pendulum.datetime(2026, 1, 1, tz="UTC")
OK = {"image": "busybox:1.36", "cmds": ["/bin/sh", "-c", "true"]}
SPECIAL_ENV = {"IFS": ":", "PWD": "/nowhere", "PPID": "7", "OPTIND": "5", "UID": "12345"}
"""variables a POSIX shell sets or uses itself"""


def parse(**stage: Any) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("hostile_parse", schedule=None, start_date=START):
        with KruiseChain("c", namespace="default") as chain:
            chain.stage(**{**OK, **stage})


@pytest.mark.parametrize("name", ["setup", "prewarm", "teardown"])
def test_a_stage_named_like_a_chain_task_is_refused_at_parse(name: str) -> None:
    with pytest.raises(ChainConfigError) as err:
        parse(name=name)
    assert err.value.field == "stages[0].name"
    assert f"chain's own {name} task" in str(err.value)


@pytest.mark.parametrize(
    ("stage", "field"),
    [
        ({"env": {"A": "ok\udce9"}}, "stages[0].env['A']"),
        ({"arguments": ["fine", "\ud800"]}, "stages[0].arguments[1]"),
        ({"cmds": ["/bin/sh", "-c", "echo \udcff"]}, "stages[0].cmds[2]"),
        ({"cmds": [""]}, "stages[0].cmds[0]"),
        ({"cmds": ["", "echo"]}, "stages[0].cmds[0]"),
    ],
)
def test_unsendable_commands_are_refused_at_parse_naming_the_field(stage: dict[str, Any], field: str) -> None:
    with pytest.raises(ChainConfigError) as err:
        parse(name="s", **stage)
    assert err.value.field == field


def test_a_chain_annotation_with_a_lone_surrogate_is_refused_at_parse() -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with pytest.raises(ChainConfigError) as err, DAG("hostile_annotation", schedule=None, start_date=START):
        KruiseChain("c", namespace="default", annotations={"team": "\udc80"})
    assert err.value.field == "annotations['team']"


@pytest.mark.slow
def test_literal_strings_reach_the_stage_exactly_and_jinja_drops_a_trailing_newline(e2e_cluster) -> None:
    from airflow.sdk import DAG, literal

    from airflow_kruise_chain.chain import KruiseChain

    exact = literal('nl="\n"; [ "$A" = "{# a$nl" ] && [ "$1" = "{{ b }}$nl" ] && echo LITERAL-OK\n')
    with DAG("hostile_literal", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            kept = chain.stage(
                "kept",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", exact, "sh"],
                arguments=[literal("{{ b }}\n")],
                env={"A": literal("{# a\n")},
            )
            dropped = chain.stage(
                "dropped",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", literal('[ "$B" = b ] && echo NEWLINE-DROPPED')],
                env={"B": "b\n"},
            )
            kept >> dropped
    run = run_inline(dag)

    assert str(run.state) == "success", task_states(run)
    results = xcoms(run)
    assert results["c.kept"]["log_tail"] == ["LITERAL-OK"]
    assert results["c.dropped"]["log_tail"] == ["NEWLINE-DROPPED"]  # as docs/writing-chains.md documents


@pytest.mark.slow
def test_shell_variables_in_env_are_delivered_exactly(e2e_cluster) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("hostile_env_names", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            chain.stage("env", image="busybox:1.36", cmds=["printenv", *SPECIAL_ENV], env=SPECIAL_ENV)
    run = run_inline(dag)
    result = xcoms(run)["c.env"]
    assert result["exit_code"] == 0, result
    assert result["log_tail"] == list(SPECIAL_ENV.values())  # printenv, no shell: what the stage received
