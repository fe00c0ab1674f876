"""Stopping a stage (`PodSession.stop`, and the teardown's `PodSession.settle_stops`) waits for its runner's
result line of that generation, never for the slot's readiness: a slot is Ready while its runner serves it,
running a stage too (slots have no readiness probe), and its pod does not change when the stage ends."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kruise_chain.core.podsession import PodSession
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.swap import SwapPlan
from tests.unit.test_core_swap import EXTRACT, LOAD, TRANSFORM, FakePod

STOP_KEY = "airflow-kruise-chain/slot-a.stop"


class StoppingApi:
    """The chain pod as `pod` holds it, and the log of the slot `plan` runs in. The slot's runner prints the
    generation's result line `delay` seconds after a stop annotation names the generation (None: never); a
    `done` generation's result line is in the log from the start. The pod never changes by itself (no
    readiness flips when the stage ends)."""

    def __init__(self, pod: FakePod, plan: SwapPlan, delay: float | None, *, done: bool = False) -> None:
        self.pod, self.plan, self.delay = pod, plan, delay
        self.stopped_at: float | None = time.monotonic() if done else None
        self.patches: list[dict[str, Any]] = []

    def lines(self) -> list[str]:
        g, token, stage = self.plan.generation, self.plan.token, self.plan.stage
        out = [
            f"::kruise-chain:: start gen={g} token={token} stage={stage} slot={self.plan.slot} "
            "at=2024-05-01T10:00:00Z",
            f"::kruise-chain:: stderr-start gen={g} token={token} stage={stage}",
            "working",
        ]
        ended = self.stopped_at is not None and self.delay is not None
        if ended and time.monotonic() >= (self.stopped_at or 0) + (self.delay or 0):
            out += [
                "",
                f"::kruise-chain:: result gen={g} token={token} stage={stage} slot={self.plan.slot} exit=143 "
                "reason=stopped started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:03Z outputs=- "
                "outputs_status=absent streams=2",
                "",
                f"::kruise-chain:: stderr-end gen={g} token={token} stage={stage}",
            ]
        return out

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        self.patches.append(body)
        self.pod.apply(body)
        if (body["metadata"]["annotations"].get(STOP_KEY) or "").startswith(f"{self.plan.generation} "):
            self.stopped_at = time.monotonic()
        return self.read_pod(name, namespace)

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]:
        if resource_version != self.pod.pod["metadata"]["resourceVersion"]:
            yield self.read_pod(name, namespace)
            return
        time.sleep(timeout_seconds)  # nothing changes

    def read_log(self, name: str, namespace: str, container: str, **options: Any) -> str:
        return "" if options.get("previous") or container != self.plan.slot else "\n".join(self.lines())

    def follow_log(self, name: str, namespace: str, container: str, **_: Any) -> Iterator[str]:
        sent = 0
        until = time.monotonic() + 20
        while time.monotonic() < until:  # an open stream: the container runs
            lines = self.lines() if container == self.plan.slot else []
            yield from lines[sent:]
            sent = len(lines)
            time.sleep(0.02)


def running_pod(kind: str) -> tuple[FakePod, SwapPlan]:
    """A pod whose slot-a runs a stage and is Ready (its runner serves it): swapped in by annotations only
    (`go`: the slot's container predates it) or by an image patch (a new container)."""
    pod = FakePod()
    if kind == "go":
        plan = pod.run(EXTRACT, finish=False)
    else:
        pod.run(EXTRACT)
        pod.run(TRANSFORM)
        plan = pod.run(LOAD, finish=False)
    assert plan.slot == "slot-a" and plan.record.action == kind
    pod.set_ready("slot-a")
    return pod, plan


@pytest.mark.parametrize("kind", ["go", "patch"])
def test_a_stop_asks_the_runner_and_waits_for_its_result_line_not_for_readiness(kind: str) -> None:
    pod, plan = running_pod(kind)
    api = StoppingApi(pod, plan, delay=0.5)
    logged: list[str] = []
    began = time.monotonic()
    result = PodSession(api, "etl-abc", "data", log=logged.append).stop(plan.stage, timeout=10)
    took = time.monotonic() - began
    assert result is not None, logged
    assert (result.generation, result.exit_code, result.reason) == (plan.generation, 143, "stopped")
    assert result.log_tail == ["working"]
    grace = int(pod.view.grace_period)
    assert [p["metadata"]["annotations"] for p in api.patches] == [{STOP_KEY: f"{plan.generation} {grace}"}]
    assert took < 5, took  # as the line came: not at a pod change (none comes) or the bound
    assert any(f"end stage={plan.stage} generation={plan.generation} exit=143" in line for line in logged)


def test_stopping_a_generation_that_already_ended_asks_nothing() -> None:
    pod, plan = running_pod("go")
    api = StoppingApi(pod, plan, delay=0.0, done=True)
    result = PodSession(api, "etl-abc", "data").stop(plan.stage, timeout=10)
    assert result is not None and (result.exit_code, result.reason) == (143, "stopped")
    assert api.patches == []


def test_a_stop_whose_result_never_comes_ends_at_its_bound_and_says_so() -> None:
    pod, plan = running_pod("go")
    api = StoppingApi(pod, plan, delay=None)
    logged: list[str] = []
    began = time.monotonic()
    assert PodSession(api, "etl-abc", "data", log=logged.append).stop(plan.stage, timeout=2) is None
    assert 2 <= time.monotonic() - began < 5
    (said,) = [line for line in logged if "not recorded" in line]
    assert f"generation {plan.generation}" in said and "slot-a" in said and "2s" in said, said


def test_the_teardown_waits_for_the_result_of_a_stop_before_the_pod_goes() -> None:
    """A stop asked (by a stage task that could not wait for its end, e.g. on_kill's few seconds) and not yet
    recorded: `settle_stops` waits for the runner's result line, so that deleting the pod does not end the
    stage as `terminated` instead."""
    pod, plan = running_pod("go")
    api = StoppingApi(pod, plan, delay=1.0)
    session = PodSession(api, "etl-abc", "data")
    api.patch_pod("etl-abc", "data", {"metadata": {"annotations": {STOP_KEY: f"{plan.generation} 2"}}})
    began = time.monotonic()
    [result] = session.settle_stops(timeout=10)
    assert (result.generation, result.exit_code, result.reason) == (plan.generation, 143, "stopped")
    assert 1 <= time.monotonic() - began < 5
    assert "reason=stopped" in api.read_log("etl-abc", "data", "slot-a")


def test_the_teardown_waits_for_no_stage_that_was_not_stopped() -> None:
    pod, plan = running_pod("go")
    api = StoppingApi(pod, plan, delay=None)
    began = time.monotonic()
    assert PodSession(api, "etl-abc", "data").settle_stops(timeout=10) == []
    assert time.monotonic() - began < 1
