"""`HotSwapSensor` (poke and deferrable modes), `StageTrigger` and `KruiseChainOperator(deferrable=True)`.

The tasks are called directly against the local cluster: `execute` / `poke`, the `TaskDeferred` they raise,
the trigger run with asyncio as the triggerer would, then `execute_complete` with the trigger's event.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from airflow.sdk.exceptions import TaskDeferred
from kruise_local import resources as R

from airflow_kruise_chain.core import ChainError
from airflow_kruise_chain.core.errors import PodStartError
from airflow_kruise_chain.operators.chain import (
    ChainPrewarmOperator,
    ChainSetupOperator,
    ChainTeardownOperator,
    KruiseChainOperator,
)
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor
from airflow_kruise_chain.triggers.chain import StageTrigger
from tests.provider.support import FAST_POD, make_context

CHAIN = "c"
NS = "default"
SLOW = "echo slow-begins; sleep 2; echo slow-output-line; echo slow-ends"
STAGES = {
    "slow": {"image": "busybox:1.36", "cmds": ["/bin/sh", "-c", SLOW]},
    "quick": {"image": "alpine:3.20", "cmds": ["/bin/sh", "-c", "echo quick-output"]},
    "missing": {"image": "ghcr.io/nope/missing:1", "cmds": ["/bin/sh", "-c", "echo never"]},
    "fails": {"image": "busybox:1.36", "cmds": ["/bin/sh", "-c", "echo a; echo b; exit 3"]},
}


@dataclass
class ChainRun:
    """A chain pod set up for one (fake) DAG run; `context()` gives task contexts for it."""

    dag_id: str
    run_id: str
    threads: list[threading.Thread] = field(default_factory=list)

    def context(self, try_number: int = 1) -> dict[str, Any]:
        return make_context(self.dag_id, self.run_id, try_number)

    def stage(self, name: str, **kwargs: Any) -> KruiseChainOperator:
        return KruiseChainOperator(
            task_id=name,
            chain_name=CHAIN,
            namespace=NS,
            stage_name=name,
            swap_timeout=20,
            **STAGES[name],
            **kwargs,
        )

    def sensor(self, stage: str, **kwargs: Any) -> HotSwapSensor:
        kwargs.setdefault("poke_interval", 0.2)
        kwargs.setdefault("timeout", 30)
        return HotSwapSensor(task_id=f"wait-{stage}", chain_name=CHAIN, namespace=NS, stage=stage, **kwargs)

    def run_in_background(self, name: str) -> dict[str, Any]:
        """Run stage `name` in a thread (another worker); the returned dict gets its result or error."""
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["result"] = self.stage(name).execute(self.context())
            except Exception as e:  # the test inspects it
                outcome["error"] = e

        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        self.threads.append(thread)
        return outcome


@pytest.fixture
def chain_run(kube_env) -> Iterator[ChainRun]:
    run = ChainRun(dag_id="provider_tests", run_id=f"manual__{uuid.uuid4().hex[:8]}")
    setup = ChainSetupOperator(
        task_id="setup",
        chain={
            "name": CHAIN,
            "namespace": NS,
            "stages": [{"name": n, **s} for n, s in STAGES.items() if n != "missing"],
            **FAST_POD,
        },
        startup_timeout=30,
    )
    setup.execute(run.context())
    yield run
    for thread in run.threads:
        thread.join(timeout=30)
    ChainTeardownOperator(task_id="teardown", chain_name=CHAIN, namespace=NS).execute(run.context())


def run_trigger(trigger: StageTrigger) -> dict[str, Any]:
    """Run the trigger as the triggerer does, until its first event (after a serialize round trip)."""
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_kruise_chain.triggers.chain.StageTrigger"
    revived = StageTrigger(**kwargs)

    async def first() -> Any:
        return await anext(revived.run())

    return asyncio.run(first()).payload


def wait_until(predicate: Any, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_poke_mode_waits_until_the_stage_finishes(chain_run):
    sensor = chain_run.sensor("slow")
    assert sensor.poke(chain_run.context()) is False  # not started yet
    outcome = chain_run.run_in_background("slow")
    seen = []
    deadline = time.monotonic() + 20
    while not sensor.poke(chain_run.context()):
        seen.append(time.monotonic())
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert len(seen) >= 3, "the sensor should have poked while the 2 s stage was running"
    chain_run.threads[-1].join(timeout=20)
    assert outcome["result"]["exit_code"] == 0


def test_poke_mode_running_target_is_reached_before_the_stage_finishes(chain_run):
    outcome = chain_run.run_in_background("slow")
    sensor = chain_run.sensor("slow", target_state="running")
    wait_until(lambda: sensor.poke(chain_run.context()), what="stage running")
    assert "result" not in outcome  # still running
    assert chain_run.sensor("slow").poke(chain_run.context()) is False


def test_poke_mode_fails_at_once_when_the_stage_cannot_start(chain_run):
    outcome = chain_run.run_in_background("missing")
    # the stage's own bound is its swap_timeout (20 s): wait past it, so a slow machine cannot cut it short
    chain_run.threads[-1].join(timeout=90)
    assert not chain_run.threads[-1].is_alive(), "the stage task is still running"
    error = str(outcome.get("error", outcome))
    assert re.search("ErrImagePull|ImagePullBackOff", error), error  # which one: timing
    assert "swap timeout" not in error, error  # it failed on the pull error, not by waiting
    with pytest.raises(ChainError, match=r"failed_to_start.*(ErrImagePull|ImagePullBackOff)"):
        chain_run.sensor("missing").poke(chain_run.context())


def test_deferrable_sensor_defers_to_the_trigger_and_completes(chain_run):
    outcome = chain_run.run_in_background("slow")
    sensor = chain_run.sensor("slow", deferrable=True)
    wait_until(
        lambda: (
            "slow"
            in str(getattr(sensor.hook.read_pod(sensor.pod_name(chain_run.context()), NS), "annotations", ""))
        ),
        what="the swap",
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(chain_run.context())
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, StageTrigger)
    assert (trigger.stage, trigger.target, trigger.pod_name) == (
        "slow",
        "finished",
        sensor.pod_name(chain_run.context()),
    )
    assert "result" not in outcome
    event = run_trigger(trigger)
    assert event["status"] == "finished"
    assert "result" in outcome or chain_run.threads[-1].join(10) is None
    sensor.execute_complete(chain_run.context(), event)  # returns: the sensor succeeds


def test_deferrable_sensor_on_a_finished_stage_completes_without_waiting(chain_run):
    chain_run.stage("quick").execute(chain_run.context())
    # "finished" is read from the pod (the slot turns Ready once its result is recorded, probed every second):
    # the sensor either sees it at once or defers to a trigger that fires within about a second
    sensor = chain_run.sensor("quick", deferrable=True)
    started = time.monotonic()
    try:
        assert sensor.execute(chain_run.context()) is None
    except TaskDeferred as deferred:
        assert run_trigger(deferred.trigger)["status"] == "finished"
    assert time.monotonic() - started < 5


def test_deferrable_sensor_fails_on_a_failure_event(chain_run):
    sensor = chain_run.sensor("slow", deferrable=True)
    with pytest.raises(ChainError, match="could not start"):
        sensor.execute_complete(
            chain_run.context(), {"status": "failed", "message": "stage 'slow' could not start"}
        )


def test_deferrable_operator_swaps_defers_and_logs_the_stage_output_once(chain_run):
    """The worker logs what the stage prints within `defer_after`, the trigger what comes while it is deferred
    (it lands in the task's log), the resumed task only the end: each line once, in order."""
    op = chain_run.stage("slow", deferrable=True, defer_after=1)
    context = chain_run.context()
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        assert deferred.value.method_name == "execute_complete"
        kwargs = deferred.value.kwargs
        assert kwargs["slot"] in ("slot-a", "slot-b") and kwargs["generation"] == 1
        worker = len(logs)
        event = run_trigger(deferred.value.trigger)
        trigger = len(logs)
        assert event["status"] == "finished" and event["generation"] == 1
        result = op.execute_complete(context, event, **kwargs)
    assert result["exit_code"] == 0 and result["generation"] == 1
    # the result is returned for Airflow to push (do_xcom_push): the operator pushes no copy of its own
    assert "return_value" not in context["ti"].pushes
    lines = [entry["event"] for entry in logs]
    output = [line for line in lines if line.startswith("slow-")]
    assert output == ["slow-begins", "slow-output-line", "slow-ends"]
    assert "slow-output-line" in lines[worker:trigger]  # printed after 2 s: logged by the trigger
    assert result["log_tail"] == ["slow-begins", "slow-output-line", "slow-ends"]
    # the resumed task reported the trigger's result: no second swap, no second run, no log re-read
    assert sum("::kruise-chain:: swap" in line for line in lines) == 1
    assert sum(line.startswith("::kruise-chain:: start gen=1") for line in lines) == 1
    assert any(line.startswith("::kruise-chain:: end stage=slow") for line in lines[trigger:])


def test_deferrable_operator_fails_with_the_exit_code_after_resuming(chain_run):
    op = chain_run.stage("fails", deferrable=True, defer_after=0)
    context = chain_run.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "finished"  # the stage ran to its end; its exit code is read on resuming
    with pytest.raises(ChainError, match="exit code 3") as err:
        op.execute_complete(context, event, **deferred.value.kwargs)
    assert str(err.value).splitlines()[-2:] == ["a", "b"]
    assert context["ti"].xcom["return_value"]["exit_code"] == 3  # a failed task returns nothing: pushed


def test_a_stage_pushes_its_result_itself_only_when_airflow_would_not(chain_run):
    """A succeeding stage returns its result, which Airflow pushes as `return_value` (do_xcom_push): one push
    per task, not two. With do_xcom_push=False (Airflow pushes nothing) the operator still pushes it."""
    context = chain_run.context()
    result = chain_run.stage("quick").execute(context)
    assert result["exit_code"] == 0
    assert "return_value" not in context["ti"].pushes
    context = chain_run.context()
    result = chain_run.stage("quick", do_xcom_push=False).execute(context)
    assert context["ti"].pushes.count("return_value") == 1 and context["ti"].xcom["return_value"] == result


def test_a_stage_task_parks_its_slot_while_it_publishes_the_stage_end_and_returns_first(
    chain_run, monkeypatch
):
    """The park's requests (a read and a guarded resize) do not wait for the task's `chain_state` XCom at the
    stage's end, nor it for them: they overlap; and the task returns (its result reported) without waiting for
    the park, which then finishes on its own (issue 40: off the path to the next task's start)."""
    from airflow_kruise_chain.core.chainstate import XCOM_KEY
    from airflow_kruise_chain.core.sizing import SlotSizer

    published, returned, parked = threading.Event(), threading.Event(), threading.Event()
    overlapped: list[bool] = []
    real = SlotSizer.park_generation

    def park(self: SlotSizer, *args: Any, **kwargs: Any) -> None:
        overlapped.append(published.wait(timeout=10))  # the end's publish goes on meanwhile
        returned.wait(timeout=10)  # held until the task has returned
        real(self, *args, **kwargs)
        parked.set()

    monkeypatch.setattr(SlotSizer, "park_generation", park)
    context = chain_run.context()
    push = context["ti"].xcom_push

    def recording(key: str, value: Any) -> None:
        if key == XCOM_KEY and value["state"] in ("succeeded", "failed"):
            published.set()
        push(key, value)

    context["ti"].xcom_push = recording
    assert chain_run.stage("quick").execute(context)["exit_code"] == 0
    assert not parked.is_set()  # returned while the park was held
    returned.set()
    assert parked.wait(timeout=20) and overlapped == [True]
    for thread in [t for t in threading.enumerate() if t.name == "settle-park"]:
        thread.join(timeout=20)


def test_the_chain_pod_link_is_recorded_once_the_swap_is_made(chain_run, kube_env):
    """The 'Chain pod' link's XCom does not hold up the task's first request: it is pushed after the swap
    request, while the kubelet starts the stage; a task that fails before its swap records it too."""
    from airflow_kruise_chain.core.errors import PodLostError
    from airflow_kruise_chain.links import ChainPodLink

    link = ChainPodLink().xcom_key
    requests: list[str] = []
    kube_env.fault = lambda request: requests.append(f"{request.method} {request.path}")
    context = chain_run.context()
    push = context["ti"].xcom_push
    pushed_after: dict[str, int] = {}

    def recording(key: str, value: Any) -> None:
        pushed_after.setdefault(key, len(requests))
        push(key, value)

    context["ti"].xcom_push = recording
    try:
        chain_run.stage("quick").execute(context)
    finally:
        kube_env.fault = None
    before_link = requests[: pushed_after[link]]
    assert any(r.startswith("PATCH /api/v1/") and not r.endswith("/resize") for r in before_link), requests
    # no chain pod: the task fails at its first read, with the link recorded
    lost = KruiseChainOperator(
        task_id="lost", chain_name="nopod", namespace=NS, stage_name="quick", **STAGES["quick"]
    )
    context = chain_run.context()
    with pytest.raises(PodLostError):
        lost.execute(context)
    assert link in context["ti"].pushes


def test_deferrable_operator_fails_with_the_reason_when_the_stage_cannot_start(chain_run):
    op = chain_run.stage("missing", deferrable=True, defer_after=0)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(chain_run.context())
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "failed"
    assert "ErrImagePull" in event["message"] or "ImagePullBackOff" in event["message"]
    with pytest.raises(ChainError) as err:
        op.execute_complete(chain_run.context(), event, **deferred.value.kwargs)
    assert "missing" in str(err.value)


def test_trigger_times_out(chain_run):
    chain_run.run_in_background("slow")
    context = chain_run.context()
    pod = ChainTeardownOperator(task_id="t", chain_name=CHAIN, namespace=NS).pod_name(context)
    event = run_trigger(
        StageTrigger(pod_name=pod, namespace=NS, stage="slow", target="finished", timeout=0.5)
    )
    assert event["status"] == "timeout"
    assert "did not reach finished within" in event["message"]


def test_trigger_reports_a_missing_pod_at_once(kube_env):
    started = time.monotonic()
    event = run_trigger(StageTrigger(pod_name="no-such-chain-pod", namespace=NS, stage="slow", timeout=30))
    assert event["status"] == "failed"
    assert event["state"] == "pod_lost" and "does not exist" in event["message"]
    assert time.monotonic() - started < 5


def test_trigger_reports_a_pod_deleted_while_it_waits(chain_run):
    chain_run.run_in_background("slow")
    context = chain_run.context()
    teardown = ChainTeardownOperator(task_id="t", chain_name=CHAIN, namespace=NS)
    pod = teardown.pod_name(context)
    wait_until(lambda: "slow-begins" in teardown.hook.read_log(pod, NS, "slot-a"), what="the stage to start")
    threading.Timer(0.5, teardown.execute, args=(context,)).start()
    started = time.monotonic()
    event = run_trigger(StageTrigger(pod_name=pod, namespace=NS, stage="slow", target="finished", timeout=30))
    assert event["status"] == "failed" and event["state"] == "pod_lost", event
    assert time.monotonic() - started < 10


def test_setup_fails_quickly_naming_a_missing_first_image(kube_env):
    run = ChainRun(dag_id="provider_tests", run_id=f"manual__{uuid.uuid4().hex[:8]}")
    setup = ChainSetupOperator(
        task_id="setup",
        startup_timeout=30,
        chain={
            "name": CHAIN,
            "namespace": NS,
            "stages": [{"name": "missing", **STAGES["missing"]}, {"name": "quick", **STAGES["quick"]}],
            **FAST_POD,
        },
    )
    assert setup.hook  # its first use imports the Kubernetes hooks (7 s on a loaded machine): not the wait
    started = time.monotonic()
    try:
        with pytest.raises(PodStartError) as err:
            setup.execute(run.context())
        assert time.monotonic() - started < 10  # the start timeout is 30 s
    finally:
        ChainTeardownOperator(task_id="teardown", chain_name=CHAIN, namespace=NS).execute(run.context())
    message = str(err.value)
    # ErrImagePull, or ImagePullBackOff when the first read comes after the kubelet's next sync (its back-off)
    pattern = r"slot-a cannot pull its image \(ghcr\.io/nope/missing:1\): (ErrImagePull|ImagePullBackOff)"
    assert re.search(pattern, message), message
    assert "slot-b" not in message  # the other slot is fine


def test_prewarm_fails_naming_a_missing_image(chain_run):
    prewarm = ChainPrewarmOperator(
        task_id="prewarm",
        chain_name=CHAIN,
        namespace=NS,
        backoff_limit=0,
        pull_timeout=20,
        images=[STAGES["quick"]["image"], STAGES["missing"]["image"]],
    )
    started = time.monotonic()
    with pytest.raises(Exception, match=r"prewarm failed: pulling ghcr.io/nope/missing:1 failed") as err:
        prewarm.execute(chain_run.context())
    assert time.monotonic() - started < 20
    assert "kruise-local" in str(err.value)  # the node it failed on


def test_prewarm_replay_adopts_its_jobs_and_a_retry_creates_new_ones(chain_run, kube_env):
    """A replay of a prewarm try (its worker died after creating the jobs) finds that try's jobs by name; the
    next try creates its own, so it never inherits an earlier try's outcome."""
    image = STAGES["quick"]["image"]
    prewarm = ChainPrewarmOperator(task_id="prewarm", chain_name=CHAIN, namespace=NS, images=[image])
    audited = len(kube_env.audit)
    first = prewarm.execute(chain_run.context(try_number=1))
    replay = prewarm.execute(chain_run.context(try_number=1))
    retry = prewarm.execute(chain_run.context(try_number=2))

    assert replay == first and retry != first
    creates = [(p.rsplit("/", 1)[-1], c) for m, p, c in kube_env.audit[audited:] if m == "POST"]
    assert creates == [("imagepulljobs", 201), ("imagepulljobs", 409), ("imagepulljobs", 201)]
    for name in (first[image], retry[image]):
        job = kube_env.call(lambda name=name: kube_env.store.peek(R.IMAGE_PULL_JOBS, NS, name))
        assert job is not None and job["status"].get("succeeded") == 1, name
