"""Deferrable mode in DAG runs: `KruiseChainOperator(deferrable=True)` and `HotSwapSensor(deferrable=True)`.

Airflow 3.3's `dag.test()` runs a deferred task's trigger inline (`[DAG TEST] running trigger in line`), then
resumes the task with the trigger's event, so these runs go through the triggerer path end to end.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, pod_events, run_inline, stage_records, task_end_dates, task_states

pytestmark = pytest.mark.slow


def gate(task_id: str) -> str:
    """Shell that waits (at most 30 s) until the task `task_id` has deferred (its trigger runs: open_gates): a
    stage that ended before its task's first look at it would be reported at once, with no trigger
    (docs/running.md), as the 13 ms consume stage once was."""
    wait = f'[ -e "$CHAIN_SCRATCH/deferred-{task_id}" ] || [ $i -ge 600 ]'
    return f"i=0; until {wait}; do sleep 0.05; i=$((i + 1)); done\n"


PRODUCE = (
    gate("c.produce")
    + r"""echo "produce: writing 3 lines"
for i in 1 2 3; do
  echo "line-$i" >> "$CHAIN_SCRATCH/produced.txt"; echo "produce: wrote line-$i"; sleep 0.3
done
printf '{"lines": 3}' > "$CHAIN_OUTPUT"
"""
)
CONSUME = (
    gate("c.consume")
    + r"""echo "consume: read $(wc -l < "$CHAIN_SCRATCH/produced.txt") lines"
printf '{"lines": %s}' "$(wc -l < "$CHAIN_SCRATCH/produced.txt")" > "$CHAIN_OUTPUT"
"""
)
SIZE = {"requests": {"memory": "96Mi"}, "limits": {"memory": "128Mi"}}


def output(capfd, caplog) -> tuple[str, str]:
    """(task logs, everything): tasks log through structlog to stdout; dag.test()'s own `[DAG TEST]` lines go
    to stdout or, when Airflow was imported before pytest set up log capture, to the `logging` records."""
    out = capfd.readouterr().out
    return out, out + "\n" + caplog.text


def open_gates(monkeypatch, cluster_root: str, opened: list[str]) -> None:
    """Each StageTrigger (dag.test() runs it in this process) opens its stage's gate (`gate`) as it starts: a
    file in the chain pod's scratch volume (kruise-local keeps it at <pod dir>/volumes/scratch). `opened`
    gets the stages whose gate was opened."""
    from airflow_kruise_chain.triggers.chain import StageTrigger

    run = StageTrigger.run

    def gated(self: StageTrigger):
        scratches = list(Path(cluster_root).rglob("volumes/scratch"))
        for scratch in scratches:
            (scratch / f"deferred-c.{self.stage}").touch()
        if scratches:
            opened.append(self.stage)
        return run(self)

    monkeypatch.setattr(StageTrigger, "run", gated)


def after(text: str, first: str, then: str) -> bool:
    """Whether `then` is logged after `first`."""
    return first in text and then in text[text.index(first) :]


def test_deferrable_stages_and_sensor_run_through_the_trigger(e2e_cluster, capfd, caplog, monkeypatch):
    import pendulum
    from airflow.sdk import DAG, task

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

    with DAG("chain_deferrable", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        # `defer_after=0` for the chain: both stages inherit it and defer right after their swap
        with KruiseChain(
            "c", namespace="default", prewarm=False, deferrable=True, defer_after=0, **FAST_POD
        ) as chain:
            # sized in place (the stages request memory): each stage's slot is parked at its end
            produce = chain.stage(
                "produce", image="busybox:1.36", cmds=["/bin/sh", "-c", PRODUCE], resources=SIZE
            )
            wait = HotSwapSensor(
                task_id="wait",
                chain_name="c",
                namespace="default",
                stage="produce",
                deferrable=True,
                poke_interval=1,
                timeout=60,
            )

            @task
            def check(result: dict) -> int:
                assert result["exit_code"] == 0, result
                return result["outputs"]["lines"]

            checked = check(produce.output)
            consume = chain.stage(
                "consume", image="alpine:3.20", cmds=["/bin/sh", "-c", CONSUME], resources=SIZE
            )
            produce >> wait >> checked >> consume
    opened: list[str] = []
    open_gates(monkeypatch, e2e_cluster.config.root, opened)
    run = run_inline(dag)
    out, everything = output(capfd, caplog)

    assert str(run.state) == "success", out[-3000:]
    assert {"produce", "consume"} <= set(opened)  # each stage ran once its task had deferred
    assert {state for state, _, _ in task_states(run).values()} == {"success"}
    results = xcoms(run)
    assert results["c.check"] == 3
    assert results["c.consume"]["outputs"] == {
        "lines": 3
    }  # consume read produce's file from the scratch volume

    # the stage tasks deferred (the trigger ran inline) and resumed with the result the trigger read (no
    # second swap); the trigger logged the stage's output as it came, and nothing logged it twice
    assert everything.count("[DAG TEST] running trigger in line") >= 2
    assert out.count("::kruise-chain:: swap stage=produce") == 1
    lines = ("produce: writing 3 lines", "produce: wrote line-1", "produce: wrote line-3", "consume: read 3")
    for line in lines:
        assert out.count(line) == 1, line
    assert after(out, "::kruise-chain:: swap stage=produce", "produce: wrote line-3")
    assert after(out, "produce: wrote line-3", "::kruise-chain:: end stage=produce")
    assert results["c.produce"]["log_tail"][-1] == "produce: wrote line-3"
    # the trigger parked each stage's slot at its end, once, before the task resumed (dag.test() resumes it
    # with the event alone, without the deferral's kwargs: that task reads the pod, finding the slot parked)
    for stage in ("produce", "consume"):
        assert out.count(f"(parked: stage {stage!r} ended)") == 1, stage
        assert after(out, f"(parked: stage {stage!r} ended)", f"::kruise-chain:: end stage={stage}")
    # and, produce having succeeded, sized the slot prepared for consume (the task's prediction) ahead
    assert out.count("(ahead, for the next stage 'consume'") == 1
    assert after(out, "(parked: stage 'produce' ended)", "(ahead, for the next stage 'consume'")


def test_deferrable_sensor_waits_for_a_stage_run_elsewhere(e2e_cluster, capfd, caplog):
    """The sensor runs while the stage is still going (its task run by another worker): it defers until it
    ends. `dag.test()` runs one task at a time, so the test is that worker: it swaps `slow` in as its task
    would, and `dag.test()` marks the task success unrun."""
    import pendulum
    from airflow.sdk import DAG, task

    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.core import StageSpec
    from airflow_kruise_chain.core.driver import StageDriver
    from airflow_kruise_chain.hooks.kruise import KruiseHook
    from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

    cluster = e2e_cluster
    slow = StageSpec("slow", "busybox:1.36", ["/bin/sh", "-c", "echo slow starts; sleep 4; echo slow ends"])
    with DAG("chain_sensor_waits", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            noop = chain.stage("noop", image="busybox:1.36", cmds=["true"])
            wait = HotSwapSensor(
                task_id="wait",
                chain_name="c",
                namespace="default",
                stage="slow",
                deferrable=True,
                poke_interval=1,
                timeout=60,
            )

            @task
            def after() -> str:
                return "after ran"

            slow_task = chain.stage(slow.name, image=slow.image, cmds=slow.cmds)
            noop >> [slow_task, wait]
            wait >> after()

    history = pod_events(cluster)
    other: dict = {}

    def other_worker() -> None:
        """Swaps `slow` in once `noop` has been swapped in (so just before the sensor runs), like a task of
        another worker would."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = [
                o
                for k, r, o in list(history)
                if r is R.PODS
                and k == "MODIFIED"
                and "noop" in stage_records(o["metadata"].get("annotations"))
            ]
            if pods:
                driver = StageDriver(KruiseHook(conn_id=None), pods[0]["metadata"]["name"], "default")
                other["result"] = driver.run(slow, try_number=1)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=other_worker, daemon=True)
    thread.start()
    run = run_inline(dag, elsewhere=r"c\.slow")
    thread.join(timeout=30)
    out, everything = output(capfd, caplog)

    assert str(run.state) == "success", out[-3000:]
    assert other["result"].exit_code == 0
    # the sensor found `slow` still going, deferred (its trigger ran inline) and succeeded once it ended
    assert re.search(r"stage slow is (swapping|running) \(waiting for finished\)", out)
    assert "[DAG TEST] running trigger in line" in everything
    assert "stage slow reached finished" in out
    assert xcoms(run)["c.after"] == "after ran"
    assert (
        task_end_dates(run)["c.wait"] >= other["result"].finished_at
    )  # it succeeded only once the stage ended
