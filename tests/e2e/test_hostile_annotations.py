"""A chain whose pod annotations could outgrow the API server's 256 KiB limit (issue 12, item 5): refused when
the DAG is parsed, naming the stage, instead of failing when that stage is patched in. At the largest size the
check allows, the chain runs on the local cluster (which enforces `ValidateAnnotationsSize`)."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest

from airflow_kruise_chain.core import ChainConfigError
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

START = pendulum.datetime(2026, 1, 1, tz="UTC")
BIG = 60_000
"""env bytes of each big stage: within the per-stage limit (64 KiB quoted), not in 256 KiB with the rest"""


def build(pad: int, dag_id: str = "hostile_annotations") -> Any:
    from airflow.sdk import DAG, literal

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain(
            "c", namespace="default", prewarm=False, annotations={"team/notes": "n" * pad}, **FAST_POD
        ) as chain:
            previous = None
            for name in ("small", "big-one", "big-two", "last"):
                size = BIG if name.startswith("big") else 10
                task = chain.stage(
                    name,
                    image="busybox:1.36",
                    cmds=["/bin/sh", "-c", literal(f'test "${{#PAYLOAD}}" -eq {size}')],  # `{#`: Jinja
                    env={"PAYLOAD": "y" * size},
                )
                if previous is not None:
                    previous >> task
                previous = task
    return dag


def largest_pad() -> int:
    """The longest chain annotation the parse-time check accepts with the two big stages."""
    low, high = 0, 256 * 1024
    while low < high:
        mid = (low + high + 1) // 2
        try:
            build(mid)
        except ChainConfigError:
            high = mid - 1
        else:
            low = mid
    return low


def test_a_chain_that_would_outgrow_the_annotation_limit_is_refused_at_parse() -> None:
    with pytest.raises(ChainConfigError) as err:
        build(150_000)
    assert err.value.field in ("stages[1].cmds", "stages[2].cmds")
    message = str(err.value)
    assert "'big-one'" in message and "'big-two'" in message and "262144" in message


@pytest.mark.slow
def test_at_the_largest_size_the_check_allows_every_stage_is_patched_in(e2e_cluster) -> None:
    pad = largest_pad()
    assert 256 * 1024 - 2 * BIG - 16 * 1024 < pad < 256 * 1024 - 2 * BIG  # the check is not far off
    run = run_inline(build(pad, "hostile_annotations_max"))
    states = task_states(run)
    assert str(run.state) == "success", states  # no stage failed at its swap (422 from the API server)
    assert [xcoms(run)[f"c.{n}"]["exit_code"] for n in ("small", "big-one", "big-two", "last")] == [0] * 4
