"""`ChainPod`: one snapshot of the chain pod per read, which every decision reads."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.podview import ChainPod, StageRecord, Terminated, lost_reason
from tests.unit.podfactory import chain_pod, running
from tests.unit.test_core_swap import EXTRACT, FakePod


class CountingApi:
    """A `ChainApi` over a `FakePod` that counts pod reads; earlier generations' logs hold their results."""

    def __init__(self, pod: FakePod, logs: dict[str, str]) -> None:
        self.fake = pod
        self.logs = logs
        self.reads = 0
        self.patches: list[dict[str, Any]] = []

    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        self.reads += 1
        return ChainPod.of(copy.deepcopy(self.fake.pod))

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        self.patches.append(body)
        self.fake.apply(body)
        return ChainPod.of(copy.deepcopy(self.fake.pod))

    def read_log(self, name: str, namespace: str, container: str, **_: Any) -> str:
        return self.logs.get(container, "")

    def watch_pod(self, *_: Any, **__: Any) -> Iterator[ChainPod | None]:
        return iter(())


def result_line(generation: int, token: str, exit_code: int) -> str:
    return (
        f"::kruise-chain:: result gen={generation} token={token} stage=extract slot=slot-a exit={exit_code} "
        "reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z outputs=- "
        "outputs_status=absent"
    )


def test_one_retry_decision_reads_one_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry of a failed stage (read the pod, find the earlier try's generation, read its result, plan,
    patch) decides on one snapshot: one per answer of the API (the read, the patch's answer), each parsing
    its stage record's JSON once."""
    pod = FakePod()
    first = pod.run(EXTRACT)  # try 1's generation ended (exit 1) while its worker was gone
    api = CountingApi(pod, {"slot-a": "out\n" + result_line(1, first.token, 1) + "\n"})
    snapshots, records = [], []
    parse, from_dict = ChainPod.of.__func__, StageRecord.from_dict.__func__  # type: ignore[attr-defined]

    def counted_parse(cls: type[ChainPod], raw: Any) -> ChainPod:
        snapshots.append(raw)
        return parse(cls, raw)

    def counted_record(cls: type[StageRecord], data: Any) -> StageRecord | None:
        records.append(data)
        return from_dict(cls, data)

    monkeypatch.setattr(ChainPod, "of", classmethod(counted_parse))
    monkeypatch.setattr(StageRecord, "from_dict", classmethod(counted_record))
    plan = StageDriver(api, "etl-abc", "data").swap(EXTRACT, 2, Timeouts(swap=5))
    assert (plan.action, plan.generation, plan.from_try) == ("go", 2, 2)
    assert len(api.patches) == 1
    assert api.reads == 1
    assert len(snapshots) == 2  # the read and the patch's answer, each a snapshot where it enters (the API)
    assert len(records) == 2  # the one stage record in each, parsed once


def test_the_snapshot_parses_slots_records_and_last_termination() -> None:
    pod = FakePod()
    plan = pod.run(EXTRACT)
    status = pod.status("slot-a")
    status["lastState"] = {
        "terminated": {
            "containerID": "containerd://old",
            "exitCode": 137,
            "reason": "OOMKilled",
            "message": "bye",
            "finishedAt": "2024-05-01T10:00:02Z",
        }
    }
    view = ChainPod.of(pod.pod)
    assert (view.name, view.generation, view.lost) == ("etl-abc", 1, None)
    assert view.record("extract") == plan.record
    slot = view.slot("slot-a")
    assert (slot.generation, slot.stage, slot.record, slot.image) == (
        1,
        "extract",
        plan.record,
        EXTRACT.image,
    )
    assert slot.last_terminated == Terminated(
        "containerd://old", 137, "OOMKilled", "bye", "2024-05-01T10:00:02Z"
    )
    assert (slot.running, slot.ready, slot.started_at) == (True, True, "2024-05-01T10:00:00Z")
    idle = view.slot("slot-b")
    assert (idle.generation, idle.stage, idle.record, idle.last_terminated) == (0, None, None, None)
    assert view.slot_of(1) == "slot-a" and view.slot_of(0) is None


def test_a_record_of_another_slot_or_generation_is_not_the_slots() -> None:
    record = StageRecord(1, "slot-a", EXTRACT.image, 1, "", "2024-05-01T10:00:00Z", "patch", token="t")
    hosted = {"slot-a": running("containerd://a", generation=1, stage="extract")}
    assert chain_pod(records={"extract": record}, slots=hosted).slot("slot-a").record == record
    moved_on = {"slot-a": running("containerd://a", generation=5, stage="extract")}
    assert chain_pod(records={"extract": record}, slots=moved_on).slot("slot-a").record is None
    elsewhere = {"slot-b": running("containerd://b", generation=1, stage="extract")}
    assert chain_pod(records={"extract": record}, slots=elsewhere).slot("slot-b").record is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"deleting": True}, "the chain pod is being deleted"),
        ({"phase": "Failed", "reason": "Evicted"}, "the chain pod is Failed (Evicted)"),
    ],
)
def test_lost_reasons(change: dict[str, Any], reason: str) -> None:
    pod = chain_pod(**change)
    assert pod.lost == reason == lost_reason(pod)
    assert lost_reason(None) == "the chain pod does not exist"
