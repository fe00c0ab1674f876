"""A result read from a slot's log (`PodSession.recorded_result`, the follow's fallback when its stream
ended, e.g. the slot's container restarted under it) waits for the other stream's end: a runtime copies a
container's stdout and stderr into the log apart, so the stdout result line can be in before the stage's last
stderr lines.

Seen in CI: a stage refused for a missing Secret key (exit 78) reported "the stage printed nothing", its
"env B: ... is not mounted" line on stderr not yet in the log when the result was read."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_kruise_chain.core import podsession
from airflow_kruise_chain.core.podsession import PodSession
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.swap import SwapPlan
from tests.unit.test_core_swap import EXTRACT, FakePod


def generation_lines(plan: SwapPlan) -> list[str]:
    """What the runner printed for `plan`'s generation, stdout's copies first (as the log may hold them)."""
    g, token, stage, slot = plan.generation, plan.token, plan.stage, plan.slot
    return [
        f"::kruise-chain:: start gen={g} token={token} stage={stage} slot={slot} at=2024-05-01T10:00:00Z",
        f"::kruise-chain:: result gen={g} token={token} stage={stage} slot={slot} exit=78 reason=completed "
        "started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:00Z outputs=- outputs_status=absent "
        "streams=2",
        f"::kruise-chain:: stderr-start gen={g} token={token} stage={stage}",
        "::kruise-chain:: error: env B: /kruise-chain-sources/secret/creds/b is not mounted in this slot",
        f"::kruise-chain:: stderr-end gen={g} token={token} stage={stage}",
    ]


class LaggingLogApi:
    """The slot's current log, whose stderr part comes in only after `reads_before_stderr` reads."""

    def __init__(self, pod: FakePod, plan: SwapPlan, reads_before_stderr: int) -> None:
        self.pod, self.plan, self.lag = pod, plan, reads_before_stderr
        self.reads = 0

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    def read_log(self, name: str, namespace: str, container: str, **options: Any) -> str:
        if options.get("previous") or container != self.plan.slot:
            return ""
        self.reads += 1
        lines = generation_lines(self.plan)
        return "\n".join(lines if self.reads > self.lag else lines[:2])


def read(api: LaggingLogApi, plan: SwapPlan) -> Any:
    session = PodSession(api, "etl-abc", "data")
    pod = api.read_pod("etl-abc", "data")
    return session.recorded_result(pod, plan.slot, plan.generation, plan.record.image, token=plan.token)


def test_a_result_read_before_the_stderr_end_is_read_again_until_it_comes() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)
    api = LaggingLogApi(pod, plan, reads_before_stderr=2)
    result = read(api, plan)
    assert result is not None and result.exit_code == 78
    assert result.log_tail == [
        "::kruise-chain:: error: env B: /kruise-chain-sources/secret/creds/b is not mounted in this slot"
    ]
    assert api.reads == 3


def test_a_stderr_end_that_never_comes_is_waited_for_a_bounded_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podsession, "RESULT_COPY_WAIT", 0.3)
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)
    api = LaggingLogApi(pod, plan, reads_before_stderr=10**6)
    result = read(api, plan)
    assert result is not None and result.exit_code == 78 and result.log_tail == []
    assert 2 <= api.reads <= 10  # read again every 0.1 s until the bound, then the result as it is


def test_a_complete_result_is_read_once() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT, finish=False)
    api = LaggingLogApi(pod, plan, reads_before_stderr=0)
    result = read(api, plan)
    assert result is not None and len(result.log_tail) == 1 and api.reads == 1
