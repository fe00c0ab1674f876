"""A deferred stage's trigger that finds the generation's container cannot start (FAILED_TO_START) deletes the
generation's run spec before its event fails the task, as the worker does (`swap.retire_unstarted`): a go
into a slot prepared ahead is said before the slot's new container started, which, should it start later (an
image pulled at last), would otherwise find the generation in env."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.triggers.output import StageOutputFollower
from tests.unit.test_core_prepare_named import gone_early_then_failed

RUN = "airflow-kruise-chain/slot-a.run"


class _AsyncApi:
    """The trigger's pod calls over a `FakePod`: reads, patches and a watch that sends nothing."""

    def __init__(self, pod: Any) -> None:
        self.pod, self.calls = pod, []

    async def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.calls.append("get")
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    async def patch_pod(self, name: str, namespace: str, body: dict) -> ChainPod:
        self.calls.append("patch")
        self.pod.apply(body)
        return ChainPod.of(copy.deepcopy(self.pod.pod))

    async def watch_pod(self, *args: Any, **kwargs: Any):
        await asyncio.sleep(3600)
        yield None


def test_the_trigger_retires_the_run_spec_of_a_generation_that_cannot_start() -> None:
    pod, plan = gone_early_then_failed()
    api = _AsyncApi(pod)
    lines: list[str] = []

    async def emit(batch: list[str]) -> None:
        lines.extend(batch)

    async def follow() -> dict[str, Any]:
        follower = StageOutputFollower(
            api,  # type: ignore[arg-type]
            pod_name="etl-abc",
            namespace="data",
            stage="load",
            generation=plan.generation,
            skip=0,
            deadline=asyncio.get_running_loop().time() + 30,
            emit=emit,
        )
        return await follower.run()

    event = asyncio.run(follow())
    assert event["status"] == "failed" and "ErrImagePull" in event["message"]
    assert RUN not in pod.pod["metadata"]["annotations"]  # nothing left for a late start to run
    assert "patch" in api.calls and lines == []
