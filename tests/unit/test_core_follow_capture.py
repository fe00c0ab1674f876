"""A go into a slot prepared ahead whose exec gives the generation's output and result (`fastgo.Capture`)
before the slot's log is readable (the kubelet serves a new container's log only once its status shows it):
the task logs each of the stage's lines exactly once, from the capture if the stage ended first, else from
the log as before (the capture dropped); a capture that is not whole, or not this generation's with its
token, is never taken."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

from airflow_kruise_chain.core import plan_swap
from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.fastgo import Capture
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.status import StageResult
from airflow_kruise_chain.core.swap import SwapPlan
from airflow_kruise_chain.core.wire import begin_token
from tests.unit.test_core_prepare import Api, prepared_pod
from tests.unit.test_core_prepare_named import LOAD, NOW
from tests.unit.test_core_swap import FakePod

STAGE_LINES = ["row 1", "row 2", "", "warning: late"]


class Go:
    """A fast go whose exec ends when `end` is called, with `capture` (None: none given)."""

    def __init__(self) -> None:
        self.ended = False
        self.capture: Capture | None = None
        self._callbacks: list[Callable[[], None]] = []

    def on_end(self, callback: Callable[[], None]) -> None:
        if self.ended:
            callback()
        else:
            self._callbacks.append(callback)

    def end(self, capture: Capture | None) -> None:
        self.capture, self.ended = capture, True
        for callback in self._callbacks:
            callback()


class KubeletApi(Api):
    """The pod's watch shows the new container once `shown` is set; its log then holds the generation."""

    def __init__(self, pod: FakePod, plan: SwapPlan) -> None:
        super().__init__(pod)
        self.plan = plan
        self.shown = threading.Event()
        self.logs = 0

    def watch_pod(self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None):
        self.calls.append("watch")
        if self.shown.wait(timeout_seconds):
            if self.pod.status("slot-a").get("state", {}).get("running") is None or "new" not in str(
                self.pod.status("slot-a").get("containerID")
            ):
                self.pod.start("slot-a", ready=False)
                self.pod.status("slot-a")["containerID"] = "containerd://new"
                self.pod.bump()
            yield ChainPod.of(copy.deepcopy(self.pod.pod))

    def follow_log(self, name: str, namespace: str, container: str, *, since_seconds: int | None = None):
        self.calls.append("follow_log")
        self.logs += 1
        yield from log_lines(self.plan)


def start_line(plan: SwapPlan) -> str:
    return (
        f"::kruise-chain:: start gen={plan.generation} token={begin_token(plan.token)} stage=load "
        "slot=slot-a at=2024-05-01T10:00:02.5Z"
    )


def result_line(plan: SwapPlan, token: str | None = None) -> str:
    return (
        f"::kruise-chain:: result gen={plan.generation} token={token or plan.token} stage=load slot=slot-a "
        "exit=0 reason=completed started=2024-05-01T10:00:02.5Z finished=2024-05-01T10:00:02.7Z outputs=- "
        "outputs_status=absent streams=2"
    )


def log_lines(plan: SwapPlan) -> list[str]:
    """The slot's log of the generation: the stage's lines, its streams' markers."""
    return [
        start_line(plan),
        f"::kruise-chain:: stderr-start gen={plan.generation} token={begin_token(plan.token)} stage=load",
        *STAGE_LINES[:3],
        STAGE_LINES[3],
        "",
        result_line(plan),
        f"::kruise-chain:: stderr-end gen={plan.generation} token={plan.token} stage=load",
    ]


def capture(plan: SwapPlan, **changes: str) -> Capture:
    fields = {
        "start": start_line(plan),
        "stdout": ("\n".join(STAGE_LINES[:3]) + "\n").encode(),
        "stderr": STAGE_LINES[3].encode(),
        "result": result_line(plan),
    }
    fields.update(changes)  # type: ignore[arg-type]
    return Capture(**fields)  # type: ignore[arg-type]


def gone(pod: FakePod) -> tuple[FakePod, SwapPlan]:
    pod.set_ready("slot-b")
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    pod.apply(plan.patch)
    return pod, plan


def follow(go: Go, then: Callable[[KubeletApi], None]) -> tuple[StageResult, list[str], KubeletApi]:
    """Follow load's go into the prepared slot-a, `go` its fast go; `then` runs once the follow waits."""
    pod, plan = gone(prepared_pod()[0])
    api = KubeletApi(pod, plan)
    logged: list[str] = []
    driver = StageDriver(api, "etl-abc", "data", log=logged.append)
    driver.capture_go = go
    threading.Timer(0.2, then, (api,)).start()
    result = driver.follow(plan, Timeouts(swap=10))
    assert isinstance(result, StageResult)
    api.shown.set()  # the watch left running ends
    return result, logged, api


def stage_lines(logged: list[str]) -> list[str]:
    return [line for line in logged if not line.startswith("::kruise-chain::")]


def test_a_stage_that_ends_before_its_log_is_readable_is_taken_from_the_capture() -> None:
    go = Go()
    began = time.monotonic()
    result, logged, api = follow(go, lambda api: go.end(capture(api.plan)))
    assert (result.exit_code, result.reason) == (0, "completed")
    assert stage_lines(logged) == STAGE_LINES  # each once, in order (stdout's, then stderr's)
    assert api.logs == 0  # no log stream opened
    assert time.monotonic() - began < 5


def test_a_log_readable_first_is_followed_and_the_capture_dropped() -> None:
    go = Go()

    def shown_then_captured(api: KubeletApi) -> None:
        api.shown.set()
        time.sleep(0.3)
        go.end(capture(api.plan))

    _, logged, api = follow(go, shown_then_captured)
    assert stage_lines(logged) == STAGE_LINES and api.logs == 1


def test_no_capture_leaves_the_log() -> None:
    go = Go()

    def none_then_shown(api: KubeletApi) -> None:
        go.end(None)  # past its bound, its tee killed, an old runner, the exec cut or given up
        time.sleep(0.2)
        api.shown.set()

    _, logged, api = follow(go, none_then_shown)
    assert stage_lines(logged) == STAGE_LINES and api.logs == 1


def test_a_capture_without_the_generations_token_is_not_taken() -> None:
    for forged in (
        {"result": "::kruise-chain:: result gen=2 token=forged stage=load slot=slot-a exit=0"},
        {"start": "::kruise-chain:: start gen=9 token=x stage=load slot=slot-a at=2024-05-01T10:00:02Z"},
    ):
        go = Go()

        def forged_then_shown(api: KubeletApi, forged: dict = forged, go: Go = go) -> None:
            changes = {k: v.replace("gen=2", f"gen={api.plan.generation}") for k, v in forged.items()}
            go.end(capture(api.plan, **changes))
            time.sleep(0.2)
            api.shown.set()

        _, logged, api = follow(go, forged_then_shown)
        assert stage_lines(logged) == STAGE_LINES and api.logs == 1


def test_the_capture_is_this_follows_only() -> None:
    pod, plan = gone(prepared_pod()[0])
    api = KubeletApi(pod, plan)
    driver = StageDriver(api, "etl-abc", "data")
    driver.capture_go = SimpleNamespace(ended=True, capture=None, on_end=lambda callback: callback())
    api.shown.set()
    driver.follow(plan, Timeouts(swap=10))
    assert driver.capture_go is None  # a later follow never takes this generation's capture
