"""A stage's $CHAIN_OUTPUT that XCom cannot carry (issue 12, item 4): NaN/Infinity, a number overflowing to
Infinity, nesting ~1000 levels deep, a lone surrogate. Each is reported as outputs_status `invalid` with the
stage's own exit code; the task never fails at XCom push or with a RecursionError."""

from __future__ import annotations

import pendulum
import pytest

from airflow_kruise_chain.core.status import MAX_OUTPUTS_DEPTH, load_outputs
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")
DEEP = 1000
HOSTILE = {
    "nan": """printf '{"a": NaN}' >"$CHAIN_OUTPUT\"""",
    "infinity": """printf '{"a": [1, -Infinity]}' >"$CHAIN_OUTPUT\"""",
    "overflow": """printf '{"a": 1e400}' >"$CHAIN_OUTPUT\"""",
    "surrogate": """printf '{"a": "\\\\ud800"}' >"$CHAIN_OUTPUT\"""",
    "deep": (
        f'i=0; o=; c=; while [ $i -lt {DEEP} ]; do o="$o["; c="$c]"; i=$((i + 1)); done; '
        """printf '{"a": %s%s}' "$o" "$c" >"$CHAIN_OUTPUT\""""
    ),
}


def test_outputs_xcom_cannot_carry_are_invalid_and_the_exit_code_stands(e2e_cluster) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    with DAG("hostile_outputs", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            previous = None
            for name, script in HOSTILE.items():
                task = chain.stage(name, image="busybox:1.36", cmds=["/bin/sh", "-c", script])
                if previous is not None:
                    previous >> task
                previous = task
            failing = chain.stage(
                "failing",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", HOSTILE["nan"] + "; exit 3"],
                on_failure_callback=failures,
            )
            previous >> failing
    run = run_inline(dag)

    states = task_states(run)
    results = xcoms(run)
    for name in HOSTILE:
        assert states[f"c.{name}"][0] == "success", (name, states)
        assert states[f"c.{name}"][1] == 1  # the first try: nothing failed at XCom push
        assert results[f"c.{name}"]["exit_code"] == 0
        assert results[f"c.{name}"]["outputs_status"] == "invalid", name
        assert results[f"c.{name}"]["outputs"] == {}
    assert states["c.failing"][0] == "failed"
    assert "exit code 3" in str(failures.errors["c.failing"])  # the stage's exit code, not an XCom error
    assert results["c.failing"]["exit_code"] == 3 and results["c.failing"]["outputs_status"] == "invalid"


def test_outputs_within_the_depth_limit_are_kept() -> None:
    nested = "[" * (MAX_OUTPUTS_DEPTH - 1) + "]" * (MAX_OUTPUTS_DEPTH - 1)
    assert load_outputs(f'{{"a": {nested}, "b": 1.5, "c": "\\u00e9"}}'.encode()) is not None
    too_deep = "[" * MAX_OUTPUTS_DEPTH + "]" * MAX_OUTPUTS_DEPTH
    assert load_outputs(f'{{"a": {too_deep}}}'.encode()) is None
    assert load_outputs(b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}") is None  # no RecursionError
