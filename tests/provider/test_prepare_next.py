"""Which stage a stage task prepares the idle slot for (`KruiseChainOperator.next_stage`): from the DAG."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.operators.chain import KruiseChainOperator

START = pendulum.datetime(2026, 1, 1, tz="UTC")


def stage(chain: KruiseChain, name: str, image: str = "busybox:1.36", **kwargs):
    return chain.stage(name, image=image, cmds=["true"], **kwargs)


def test_the_next_stage_is_the_first_declared_that_follows():
    with DAG("p1", schedule=None, start_date=START):
        with KruiseChain("c", namespace="d", prewarm=False) as chain:
            a = stage(chain, "a")
            b = stage(chain, "b", "alpine:3.20")
            c = stage(chain, "c", "debian:bookworm-slim")
            d = stage(chain, "d", "python:3.11-slim")
            a >> [c, b]  # b is declared before c
            b >> d
    assert a.next_stage() == ("b", "alpine:3.20")
    assert b.next_stage() == ("d", "python:3.11-slim")
    assert c.next_stage() is None and d.next_stage() is None  # leaves: the teardown is no stage


def test_through_a_branch_and_never_into_another_chain():
    with DAG("p2", schedule=None, start_date=START):
        with KruiseChain("c", namespace="d", prewarm=False) as chain:
            a = stage(chain, "a")

            @task.branch
            def choose() -> str:
                return "c.y"

            x = stage(chain, "x", "alpine:3.20")
            y = stage(chain, "y", "debian:bookworm-slim")
            a >> choose() >> [y, x]
        with KruiseChain("other", namespace="d", prewarm=False) as other:
            z = stage(other, "z", "python:3.11-slim")
        x >> z
    assert a.next_stage() == ("x", "alpine:3.20")  # through the branch task; x is declared first
    assert x.next_stage() is None  # z is another chain's stage (another pod)


def test_a_templated_image_or_prepare_next_off_prepares_nothing():
    with DAG("p3", schedule=None, start_date=START):
        with KruiseChain("c", namespace="d", prewarm=False, prepare_next=False) as chain:
            a = stage(chain, "a")
            b = KruiseChainOperator(  # a stage task of the chain declared directly, its image templated
                task_id="b",
                chain_name="c",
                namespace="d",
                stage_name="b",
                image="acme/b:{{ params.tag }}",
                cmds=["true"],
            )
            c = stage(chain, "c", "alpine:3.20", prepare_next=True)
            a >> b >> c
    assert (a.prepare_next, c.prepare_next) == (False, True)  # per chain, overridden per stage
    assert a.next_stage() is None  # b's image is only known once b renders it
    assert b.next_stage() == ("c", "alpine:3.20")


def test_the_stage_after_next_follows_the_same_rule_from_the_next_stage():
    """What a stage's end prepares its own slot for (`two_ahead`): the next stage's next stage, only with
    prepare_next and go_via_exec on (a go by annotation waits for the pod's sync, which that restart
    holds)."""
    with DAG("p4", schedule=None, start_date=START):
        with KruiseChain("c", namespace="d", prewarm=False) as chain:
            a = stage(chain, "a")
            b = stage(chain, "b", "alpine:3.20")

            @task.branch
            def choose() -> str:
                return "c.d"

            c = stage(chain, "c", "debian:bookworm-slim")
            d = stage(chain, "d", "python:3.11-slim")
            e = KruiseChainOperator(  # its image templated
                task_id="e",
                chain_name="c",
                namespace="d",
                stage_name="e",
                image="acme/e:{{ params.tag }}",
                cmds=["true"],
            )
            f = stage(chain, "f", "acme/f:1", go_via_exec=False)
            g = stage(chain, "g", "acme/g:1", prepare_next=False)
            a >> b >> choose() >> [d, c]  # through the branch: c is declared first
            c >> e >> f >> g
            d >> f
    assert a.stage_after_next() == a.two_ahead() == ("c", "debian:bookworm-slim")
    assert b.next_stage() == ("c", "debian:bookworm-slim")
    assert b.stage_after_next() is None  # c's next stage, e, is templated
    assert c.stage_after_next() is None  # e is templated: only known once e renders it
    assert d.stage_after_next() == d.two_ahead() == ("g", "acme/g:1")
    assert e.stage_after_next() == ("g", "acme/g:1")
    assert (f.next_stage(), f.stage_after_next(), f.two_ahead()) == (("g", "acme/g:1"), None, None)
    a.go_via_exec = False  # as f: its go by annotation would wait out the restart
    assert a.stage_after_next() is not None and a.two_ahead() is None
    a.go_via_exec, a.prepare_next = True, False
    assert a.two_ahead() is None
