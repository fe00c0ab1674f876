"""A deferred stage's output: logged live by `StageTrigger` in bounded memory, each line once across the
worker, the trigger and the resumed task, through a cut log stream and when the stage fails.

The tasks and the trigger are called directly against the local cluster, as in test_sensor_trigger.py: run
outside a triggerer (no task instance), a trigger's event resumes the task, whatever the stage's outcome;
the success a trigger ends itself is tests/provider/test_deferred_end.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from airflow.sdk.exceptions import TaskDeferred

from airflow_kruise_chain.core import ChainError
from airflow_kruise_chain.core.lines import LINE_HEAD, LINE_TAIL
from airflow_kruise_chain.operators.chain import (
    ChainSetupOperator,
    ChainTeardownOperator,
    KruiseChainOperator,
)
from airflow_kruise_chain.triggers.chain import StageTrigger
from tests.provider.faultproxy import Rule, faulty_proxy
from tests.provider.support import FAST_POD, ShellChain
from tests.provider.test_sensor_trigger import run_trigger, wait_until

CHAIN = "c"
NS = "default"
LONG = 32 * 1024 * 1024
FLOOD = 200_000
STAGES = {
    "ticks": "echo tick-1; sleep 2; echo tick-2; echo; echo tick-3",
    "lines": "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.3; done",
    # (after a pause: the runner's start marker copy on stderr must not land inside the long stdout line)
    "hostile": f"sleep 0.5; head -c {LONG} /dev/zero | tr '\\000' x; echo; yes flood | head -n {FLOOD}; "
    "echo done",
    "doomed": "echo doomed-1; echo doomed-2; sleep 60",
    "quick": "echo quick-output",
}


class Chain(ShellChain):
    """A chain pod of this module's stages for one (fake) DAG run."""

    def __init__(self) -> None:
        super().__init__(CHAIN, "deferred_output", STAGES)


@pytest.fixture
def chain(kube_env) -> Iterator[Chain]:
    run = Chain()
    run.set_up()
    yield run
    run.teardown().execute(run.context())


def events(logs: list[dict[str, Any]]) -> list[str]:
    return [entry["event"] for entry in logs]


def test_a_stage_that_ends_within_defer_after_is_not_deferred(chain):
    """Deferring costs a trigger and a second task start: a stage that ends first is reported at once."""
    result = chain.stage("quick", defer_after=10).execute(chain.context())
    assert result["exit_code"] == 0 and result["log_tail"] == ["quick-output"]


def test_the_trigger_of_a_stage_that_ends_at_once_fires_no_earlier_than_the_defer_exit_hold(
    chain, monkeypatch
):
    """apache/airflow#72716: the event waits until the executor's report of the deferral's exit has reached
    the scheduler, `[workers] min_heartbeat_interval` + DEFER_EXIT_MARGIN after the deferral."""
    from airflow_kruise_chain.config import DEFER_EXIT_MARGIN

    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "1")
    op, context = chain.stage("quick", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    deferred_at = time.time()
    trigger = deferred.value.trigger
    assert deferred_at - 1 < trigger.fire_after - 1 - DEFER_EXIT_MARGIN <= deferred_at
    event = run_trigger(trigger)  # the stage has long ended: the event waits for the hold
    assert time.time() >= trigger.fire_after
    assert event["status"] == "finished" and event["tail"] == ["quick-output"]
    result = op.execute_complete(context, event, **deferred.value.kwargs)
    assert result["exit_code"] == 0


def test_the_trigger_makes_its_calls_over_one_api_client_closed_at_its_end(chain, monkeypatch):
    """Each API client costs an SSL context and a TLS handshake (25-50 ms on the local cluster): the park at
    the stage's end (a read, a resize or two) paid that per call between the stage's end and the event. The
    trigger's reads, resizes, watch and log stream share one client, closed once the trigger is done."""
    from airflow.providers.cncf.kubernetes.hooks import kubernetes as cncf

    made: list[Any] = []
    closed: list[Any] = []

    class Counted(cncf._TimeoutAsyncK8sApiClient):  # what cncf.kubernetes' async get_conn makes
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

        async def close(self) -> None:
            closed.append(self)
            await super().close()

    monkeypatch.setattr(cncf, "_TimeoutAsyncK8sApiClient", Counted)
    op, context = chain.stage("lines", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    trigger.fire_after = 0.0  # no hold: not what this test is about
    event = run_trigger(trigger)
    assert event["status"] == "finished" and event["tail"][-1] == "line-6"
    assert len(made) == 1 and closed == made


def test_the_resumed_task_logs_only_what_the_trigger_did_not(chain):
    """An event without the result (e.g. the stage was stopped) makes the resumed task re-attach and read the
    log: it logs only the lines after those the trigger counted, and the result has the whole tail."""
    op, context = chain.stage("ticks", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    with structlog.testing.capture_logs() as logs:
        event = run_trigger(deferred.value.trigger)
    by_trigger = [line for line in events(logs) if line.startswith("tick") or line == ""]
    assert by_trigger == ["tick-1", "tick-2", "", "tick-3"]
    assert event["logged"] == 5  # the start marker and the four lines
    assert event["tail"] == ["tick-1", "tick-2", "", "tick-3"]
    assert event["result"].startswith("::kruise-chain:: result gen=")

    # as if the trigger had logged only the start marker and tick-1, and not read the result
    partial = {**event, "logged": 2, "result": None}
    with structlog.testing.capture_logs() as logs:
        result = op.execute_complete(context, partial, **deferred.value.kwargs)
    resumed = events(logs)
    assert [line for line in resumed if line.startswith("tick") or line == ""] == ["tick-2", "", "tick-3"]
    assert not any(line.startswith("::kruise-chain:: start gen=") for line in resumed)
    assert "::kruise-chain:: swap" not in "\n".join(resumed)  # re-attached: no second run
    assert result["exit_code"] == 0 and result["log_tail"] == ["tick-1", "tick-2", "", "tick-3"]


# the trigger's client, watches and streams closed by the trigger itself, not left to the loop's async
# generator hooks (the proxy then destroyed the requests they kept open: "coroutine ignored GeneratorExit")
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_the_trigger_opens_a_cut_log_stream_again_and_logs_each_line_once(chain, cluster, tmp_path: Path):
    op, context = chain.stage("lines", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    with faulty_proxy(cluster.url) as proxy:
        config = proxy.write_kubeconfig(cluster.kubeconfig(), tmp_path / "kubeconfig-proxy")
        _, kwargs = trigger.serialize()
        kwargs["connection"] = {"kubernetes_conn_id": None, "config_file": str(config)}
        path = f"/namespaces/{NS}/pods/{trigger.pod_name}/log"
        proxy.rules.append(Rule("GET", path, "cut", times=2, query="follow=true"))
        with structlog.testing.capture_logs() as logs:
            event = run_trigger(StageTrigger(**kwargs))
        cuts = [a for a in proxy.applied if a[0] == "cut"]
    assert len(cuts) == 2, (proxy.applied, event)  # the stream was cut twice, after its first line each time
    assert [line for line in events(logs) if line.startswith("line-")] == [f"line-{i}" for i in range(1, 7)]
    assert event["status"] == "finished" and event["logged"] == 7
    result = op.execute_complete(context, event, **deferred.value.kwargs)
    assert result["exit_code"] == 0


def test_a_pod_lost_while_deferred_fails_the_task_with_the_stages_last_lines(chain):
    op, context = chain.stage("doomed", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    teardown = chain.teardown()
    pod = teardown.pod_name(context)
    wait_until(
        lambda: (
            "doomed-2"
            in teardown.hook.read_log(pod, NS, "slot-a") + teardown.hook.read_log(pod, NS, "slot-b")
        ),
        what="the stage's lines",
    )
    threading.Timer(1.0, teardown.execute, args=(context,)).start()
    event = run_trigger(deferred.value.trigger)
    assert event["status"] == "failed" and event["state"] == "pod_lost", event
    assert "last lines:\ndoomed-1\ndoomed-2" in event["message"]  # then the shell's "Terminated", maybe
    with pytest.raises(ChainError, match="pod_lost") as err:
        op.execute_complete(context, event, **deferred.value.kwargs)
    assert "doomed-1\ndoomed-2" in str(err.value)


def test_the_trigger_follows_a_32mb_line_and_a_flood_in_bounded_memory(chain, monkeypatch):
    op, context = chain.stage("hostile", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    seen: dict[str, Any] = {"lines": 0, "longest": 0, "other": []}

    def count(self: StageTrigger, lines: list[str]) -> None:  # what the trigger writes to the task log
        seen["lines"] += len(lines)
        seen["longest"] = max(seen["longest"], *map(len, lines))
        seen["other"] += [line[:80] for line in lines if line != "flood"]

    monkeypatch.setattr(StageTrigger, "_log_lines", count)
    started = time.monotonic()
    tracemalloc.start()
    try:
        event = run_trigger(deferred.value.trigger)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert event["status"] == "finished", event
    # start marker, long line (cut), flood, "done"; the task may have logged the start marker itself before
    # it deferred (a loaded machine): the trigger then skips it
    assert seen["lines"] + deferred.value.trigger.logged == 1 + 1 + FLOOD + 1, seen["other"]
    assert seen["longest"] < LINE_HEAD + LINE_TAIL + 64  # the long line's start and end, with a note
    # not the 32 MB line, nor the flood (7 MB of lines): a log chunk, a cut line and their copies at a time
    assert peak < 8 * 1024 * 1024, peak
    assert time.monotonic() - started < 300


def test_a_trigger_revived_after_a_triggerer_restart_logs_from_the_workers_count(chain):
    """The triggerer dies while its trigger follows the stage; another revives the trigger from its serialized
    kwargs. It starts from what the worker logged, so no line is lost; the lines the dead one had logged
    come again (in the new triggerer's log file); the resumed task logs only what the new one did not."""
    op, context = chain.stage("ticks", defer_after=0), chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    _, kwargs = deferred.value.trigger.serialize()

    async def until_first_tick(trigger: StageTrigger) -> None:
        async def watch() -> None:
            async for _event in trigger.run():
                raise AssertionError("the stage should still run")

        task = asyncio.create_task(watch())
        while not any(entry["event"] == "tick-1" for entry in logs):
            await asyncio.sleep(0.05)
        task.cancel()  # the triggerer dies: its trigger is cancelled
        with contextlib.suppress(asyncio.CancelledError):
            await task

    with structlog.testing.capture_logs() as logs:
        asyncio.run(until_first_tick(StageTrigger(**kwargs)))
    first = [line for line in events(logs) if line.startswith("tick")]
    assert first == ["tick-1"]
    with structlog.testing.capture_logs() as logs:
        event = run_trigger(StageTrigger(**kwargs))
        result = op.execute_complete(context, event, **deferred.value.kwargs)
    second = [line for line in events(logs) if line.startswith("tick")]
    assert second == ["tick-1", "tick-2", "tick-3"]  # nothing lost; tick-1 is logged again
    assert result["exit_code"] == 0


def test_the_async_log_stream_of_a_pod_that_is_gone_just_ends(kube_env):
    """The trigger reads the pod to tell why a stream ended: a pod deleted before the stream is opened again
    (404) ends the stream like a container that stopped, and is then reported as lost, not as an error."""
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook

    async def lines() -> list[list[str]]:
        hook = AsyncKruiseHook(conn_id="kubernetes_default")
        return [batch async for batch in hook.follow_log("no-such-pod", NS, "slot-a")]

    assert asyncio.run(lines()) == []


# -- the stage's end handed over in the event: the trigger parks, the resumed task needs no cluster --------
SIZED = {
    "sized": "echo sized-1; sleep 1; echo sized-2",
    "fails": "echo a; sleep 1; echo b; exit 3",
}
SIZED_RESOURCES = {"requests": {"memory": "96Mi"}, "limits": {"memory": "128Mi"}}


class SizedChain(Chain):
    """A chain pod sized in place (its stages request memory): an ended stage's slot is parked."""

    def stage(self, name: str, **kwargs: Any) -> KruiseChainOperator:
        return KruiseChainOperator(
            task_id=name,
            chain_name="sized",
            namespace=NS,
            stage_name=name,
            image="busybox:1.36",
            cmds=["/bin/sh", "-c", SIZED[name]],
            container_resources=SIZED_RESOURCES,
            swap_timeout=20,
            deferrable=True,
            defer_after=0,
            **kwargs,
        )

    def teardown(self) -> ChainTeardownOperator:
        return ChainTeardownOperator(task_id="teardown", chain_name="sized", namespace=NS)

    def slot_sized(self, slot: str, stage: str | None = None) -> bool:
        """Whether `slot` is sized for `stage` (None: parked)."""
        from airflow_kruise_chain.core.resources import ChainSizing
        from airflow_kruise_chain.core.sizing import same_resources

        teardown = self.teardown()
        pod = teardown.hook.read_pod(teardown.pod_name(self.context()), NS)
        sizing = ChainSizing.from_pod(pod)
        assert sizing is not None, "the chain pod is sized in place"
        target = sizing.parked if stage is None else sizing.for_stage(stage)
        return same_resources(dict(pod.slot(slot).resources or {}), target)

    def slot_parked(self, slot: str) -> bool:
        return self.slot_sized(slot)


@pytest.fixture
def sized_chain(kube_env) -> Iterator[SizedChain]:
    run = SizedChain()
    stages = [
        {"name": n, "image": "busybox:1.36", "cmds": ["/bin/sh", "-c", c], "resources": SIZED_RESOURCES}
        for n, c in SIZED.items()
    ]
    ChainSetupOperator(
        task_id="setup",
        chain={"name": "sized", "namespace": NS, "stages": stages, "sizing": "in-place", **FAST_POD},
        startup_timeout=30,
    ).execute(run.context())
    yield run
    run.teardown().execute(run.context())


def test_the_trigger_parks_the_slot_and_the_resumed_task_makes_no_api_call(
    sized_chain, kube_env, monkeypatch
):
    """The trigger follows the stage to its end in the triggerer: it parks the slot there and hands the
    resumed task all it needs, so the task's second start loads no Kubernetes client and calls no API."""
    from airflow_kruise_chain.connection import KubeConnection
    from airflow_kruise_chain.core.chainstate import XCOM_KEY

    op, context = sized_chain.stage("sized"), sized_chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    slot = deferred.value.kwargs["slot"]
    other = "slot-b" if slot == "slot-a" else "slot-a"
    assert not sized_chain.slot_sized(other, "fails")
    # as in a DAG where `fails` follows (no DAG here: the task predicts nothing), on the same image
    _, kwargs = deferred.value.trigger.serialize()
    assert kwargs["ahead"] is None
    with structlog.testing.capture_logs() as logs:
        event = run_trigger(StageTrigger(**{**kwargs, "ahead": ["fails", "busybox:1.36"]}))
    assert event["status"] == "finished" and event["parked"] is True, event
    assert any(line.startswith(f"::kruise-chain:: resize {slot} to") for line in events(logs))
    assert sized_chain.slot_parked(slot)  # parked by the trigger, before the task resumes
    assert sized_chain.slot_sized(other, "fails")  # and the next stage's slot sized ahead

    def no_client(self: KubeConnection) -> None:
        raise AssertionError("the resumed task made a Kubernetes client")

    requests: list[str] = []
    kube_env.fault = lambda request: requests.append(f"{request.method} {request.path}")
    try:
        with monkeypatch.context() as patched, structlog.testing.capture_logs() as logs:
            patched.setattr(KubeConnection, "hook", no_client)
            result = op.execute_complete(context, event, **deferred.value.kwargs)
    finally:
        kube_env.fault = None
    assert requests == []
    assert result["exit_code"] == 0 and result["log_tail"] == ["sized-1", "sized-2"]
    assert any(
        line.startswith("::kruise-chain:: end stage=sized generation=1 exit=0") for line in events(logs)
    )
    assert context["ti"].xcom[XCOM_KEY]["state"] == "succeeded"


def test_the_resumed_task_parks_the_slot_itself_after_an_older_trigger(sized_chain, monkeypatch):
    """An event without `parked` (a trigger of an earlier version, or one that could not park): the resumed
    task parks the slot itself, as before."""
    import airflow_kruise_chain.triggers.output as output

    async def not_parking(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(output, "apark_generation", not_parking)
    op, context = sized_chain.stage("sized"), sized_chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    slot = deferred.value.kwargs["slot"]
    event = run_trigger(deferred.value.trigger)
    del event["parked"]
    assert not sized_chain.slot_parked(slot)
    result = op.execute_complete(context, event, **deferred.value.kwargs)
    assert result["exit_code"] == 0 and sized_chain.slot_parked(slot)


def test_a_result_in_the_event_that_does_not_check_is_not_believed(sized_chain):
    """The event comes back through Airflow's database: a result line with another token (here claiming exit
    0 for a stage that exited 3) is refused, and the task reads the stage's real result from the pod."""
    op, context = sized_chain.stage("fails"), sized_chain.context()
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    event = run_trigger(deferred.value.trigger)
    assert " exit=3 " in event["result"]
    forged = {
        **event,
        "result": re.sub(r"token=\S+", "token=forged", event["result"]).replace(" exit=3 ", " exit=0 "),
    }
    with structlog.testing.capture_logs() as logs:
        with pytest.raises(ChainError, match="exit code 3"):
            op.execute_complete(context, forged, **deferred.value.kwargs)
    assert any("the trigger's event does not check" in line for line in events(logs))
    assert context["ti"].xcom["return_value"]["exit_code"] == 3
