"""The stage records: one annotation, ``airflow-kruise-chain/stages``, whose value is one line of compact JSON
(stage name -> record, newest first), read by `ChainPod.of`, written whole by the swap's patch and the
retire patch (both guarded by the pod's resourceVersion); the per-stage annotations of pods built before are
read too and moved into it by the next write; the chain's size check counts it for every stage."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from airflow_kruise_chain.core import ChainConfigError, ChainError, ChainSpec, StageSpec, plan_swap
from airflow_kruise_chain.core.driver import ConflictError, StageDriver, Timeouts
from airflow_kruise_chain.core.errors import ResultUnavailableError
from airflow_kruise_chain.core.manifest import MAX_ANNOTATIONS_BYTES, check_annotations_size
from airflow_kruise_chain.core.podidentity import retire_patch
from airflow_kruise_chain.core.podview import ChainPod, StageRecord, records_annotation, records_of
from airflow_kruise_chain.core.wire import STAGES_ANNOTATION, stage_annotation
from tests.unit.podfactory import chain_pod, running
from tests.unit.test_core_swap import (
    EXTRACT,
    LOAD,
    NOW,
    TRANSFORM,
    FakePod,
    annotations,
    recorded,
    result,
)

RECORD = StageRecord(
    1, "slot-a", "acme/extract:1.4", 1, "containerd://1", "2024-05-01T10:00:00Z", "go", "", "t1"
)
VALID = RECORD.to_dict()


def pod_with(annotations: dict[str, str]) -> ChainPod:
    """A chain pod with these annotations (both slots running)."""
    return chain_pod(
        slots={"slot-a": running("containerd://a"), "slot-b": running("containerd://b")},
        annotations=annotations,
    )


def record(generation: int, slot: str = "slot-a", try_number: int = 1) -> StageRecord:
    return StageRecord(
        generation, slot, "acme/x:1", try_number, "", "2024-05-01T10:00:00Z", "go", "", f"t{generation}"
    )


# --- reading ------------------------------------------------------------------------------------------------


def test_the_records_are_one_line_of_compact_json_read_back_newest_first() -> None:
    records = {"c": record(3, "slot-a"), "b": record(2, "slot-b"), "a": record(1, "slot-a")}
    text = records_annotation(records)
    assert "\n" not in text and " " not in text
    assert text.startswith('{"c":{"generation":3,"slot":"slot-a","try":1,"action":"go","image":"acme/x:1",')
    assert list(records_of({STAGES_ANNOTATION: text})) == ["c", "b", "a"]
    assert records_of({STAGES_ANNOTATION: text}) == records
    # written in another order (by hand): still read newest first
    shuffled = records_annotation({"a": records["a"], "c": records["c"], "b": records["b"]})
    assert list(pod_with({STAGES_ANNOTATION: shuffled}).records) == ["c", "b", "a"]


@pytest.mark.parametrize(
    "value",
    [
        "",
        "not json",
        "[]",
        '["extract"]',
        '"extract"',
        "1",
        "null",
        "true",
        '{"extract": 1',  # cut short
        "[" * 100_000,  # nested beyond the parser's recursion limit
        "x" * (1024 * 1024),  # a huge value
        "1" * 5000,  # more digits than Python parses into an int
    ],
    ids=lambda v: v[:12] or "empty",
)
def test_a_malformed_records_value_is_ignored_as_no_record(value: str) -> None:
    pod = pod_with({STAGES_ANNOTATION: value})
    assert pod.records == {} and pod.record("extract") is None
    assert pod.slot("slot-a").container_id == "containerd://a"  # the rest of the pod is read as ever


def test_a_malformed_entry_is_ignored_and_the_others_are_read() -> None:
    entries: dict[str, Any] = {
        "number": 1,
        "list": [VALID],
        "string": json.dumps(VALID),  # a record's JSON as a string, not as an object
        "null": None,
        "empty": {},
        "no-slot": {k: v for k, v in VALID.items() if k != "slot"},
        "bad-generation": {**VALID, "generation": "first"},
        "bad-try": {**VALID, "try": {"n": 1}},
        "infinite": {**VALID, "generation": 1e400},  # json.dumps writes Infinity: int() overflows
        "good": VALID,
    }
    text = json.dumps(entries)
    assert "Infinity" in text
    assert pod_with({STAGES_ANNOTATION: text}).records == {"good": RECORD}


def test_a_huge_records_value_is_read_whole() -> None:
    records = {f"s{k}": record(k, try_number=k) for k in range(1, 2001)}
    text = records_annotation(records)
    assert len(text) > 200 * 1024
    pod = pod_with({STAGES_ANNOTATION: text})
    assert len(pod.records) == 2000 and next(iter(pod.records)) == "s2000"
    assert pod.record("s1") == records["s1"]


# --- writing --------------------------------------------------------------------------------------------


def test_a_swap_writes_every_record_with_its_own_first() -> None:
    pod = FakePod()
    extract, transform = pod.run(EXTRACT), pod.run(TRANSFORM)
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    written = plan.patch["metadata"]["annotations"]
    assert plan.patch["metadata"]["resourceVersion"] == pod.pod["metadata"]["resourceVersion"]
    assert [key for key in written if "stage" in key.split("/")[1].split(".")[0]] == [STAGES_ANNOTATION]
    value = written[STAGES_ANNOTATION]
    assert "\n" not in value
    assert list(json.loads(value)) == ["load", "transform", "extract"]
    pod.apply(plan.patch)
    assert pod.view.records == {"load": plan.record, "transform": transform.record, "extract": extract.record}


def test_retiring_a_record_removes_that_stage_only() -> None:
    pod = FakePod()
    extract, transform, load = pod.run(EXTRACT), pod.run(TRANSFORM), pod.run(LOAD)
    pod.apply(retire_patch(pod.view, "transform"))
    assert list(recorded(pod)) == ["load", "extract"]
    assert pod.view.records == {"load": load.record, "extract": extract.record}
    for stage in ("load", "extract"):
        pod.apply(retire_patch(pod.view, stage))
    assert STAGES_ANNOTATION not in annotations(pod)  # empty: deleted, not left as "{}"
    assert pod.view.records == {}
    assert transform.record.generation == 2  # (the retired generation stays in its slot's own records)


# --- pods built by the layout before: one annotation per stage ----------------------------------------------


def legacy_pod() -> FakePod:
    """A pod in which extract and transform ran under the layout before (``stage.<name>`` annotations)."""
    pod = FakePod()
    pod.run(EXTRACT), pod.run(TRANSFORM)
    for stage, data in recorded(pod).items():
        annotations(pod)[stage_annotation(stage)] = json.dumps(data, separators=(",", ":"))
    del annotations(pod)[STAGES_ANNOTATION]
    return pod


def test_records_of_the_layout_before_are_read_under_the_map() -> None:
    pod = legacy_pod()
    view = pod.view
    assert list(view.records) == ["transform", "extract"]
    assert view.slot("slot-b").record == view.record("transform")  # the slot's record, as before
    # a stage in both: the map wins
    newer = {**json.loads(annotations(pod)[stage_annotation("extract")]), "try": 2}
    annotations(pod)[STAGES_ANNOTATION] = json.dumps({"extract": newer})
    assert pod.view.record("extract").try_number == 2
    assert pod.view.record("transform") == view.record("transform")


def test_a_stage_recorded_by_the_layout_before_never_runs_again() -> None:
    pod = legacy_pod()
    # a retry of extract (its worker gone): its generation's result is adopted, not run again
    assert plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=result(1), now=NOW).action == "adopt"
    # ended with no readable result: refused, not run again
    with pytest.raises(ResultUnavailableError, match="not running the stage again"):
        plan_swap(pod.view, EXTRACT, try_number=2, now=NOW, finished={"slot-a", "slot-b"})
    # its own try reattaches to it
    assert plan_swap(pod.view, TRANSFORM, try_number=1, now=NOW).action == "reattach"


def test_the_next_write_moves_the_records_of_the_layout_before_into_the_map() -> None:
    pod = legacy_pod()
    before = pod.view.records
    plan = plan_swap(pod.view, LOAD, try_number=1, now=NOW)
    written = plan.patch["metadata"]["annotations"]
    assert written[stage_annotation("extract")] is None and written[stage_annotation("transform")] is None
    pod.apply(plan.patch)
    assert not [key for key in annotations(pod) if key.startswith(stage_annotation(""))]
    assert list(recorded(pod)) == ["load", "transform", "extract"]
    assert pod.view.records == {"load": plan.record, **before}
    # a retire does the same
    pod = legacy_pod()
    pod.apply(retire_patch(pod.view, "extract"))
    assert not [key for key in annotations(pod) if key.startswith(stage_annotation(""))]
    assert list(pod.view.records) == ["transform"]


# --- concurrent writers: a 409 re-reads, no record is lost ------------------------------------------------


class RacingApi:
    """A `ChainApi` over a `FakePod` whose next patches lose the race to `rival` (writes that land first);
    extract's result is in slot-a's log."""

    def __init__(self, pod: FakePod, rival: list[dict[str, Any]]) -> None:
        self.fake = pod
        self.rival = rival
        self.calls: list[str] = []
        self.log = (
            f"::kruise-chain:: result gen=1 token={recorded(pod)['extract']['token']} stage=extract "
            "slot=slot-a exit=0 reason=completed started=2024-05-01T10:00:00Z finished=2024-05-01T10:00:01Z "
            "outputs=- outputs_status=absent"
        )

    def read_pod(self, name: str, namespace: str) -> ChainPod:
        self.calls.append("get")
        return ChainPod.of(copy.deepcopy(self.fake.pod))

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        self.calls.append("patch")
        if self.rival:
            self.fake.apply(self.rival.pop(0))  # the other writer's guarded patch lands first
        try:
            self.fake.apply(body)
        except AssertionError:
            raise ConflictError("409") from None
        return ChainPod.of(copy.deepcopy(self.fake.pod))

    def read_log(self, name: str, namespace: str, container: str, **_: Any) -> str:
        return self.log if container == "slot-a" else ""

    def watch_pod(self, *_: Any, **__: Any) -> Any:
        return iter(())


def test_a_swap_that_loses_the_race_to_another_swap_keeps_that_swap_s_record() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    seen = pod.view  # both tasks read the pod
    rival = plan_swap(seen, TRANSFORM, try_number=1, now=NOW)  # another task swaps transform in meanwhile
    api = RacingApi(pod, [rival.patch])
    plan = StageDriver(api, "etl-abc", "data").swap(LOAD, 1, Timeouts(swap=5), pod=seen)
    assert api.calls == ["patch", "get", "patch"]  # the 409, a fresh read, the patch planned from it
    assert list(pod.view.records) == ["load", "transform", "extract"]
    assert pod.view.record("transform") == rival.record and pod.view.record("load") == plan.record


def test_a_retire_that_loses_the_race_to_a_swap_keeps_that_swap_s_record() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    seen = pod.view
    rival = plan_swap(seen, TRANSFORM, try_number=1, now=NOW)
    api = RacingApi(pod, [rival.patch])
    StageDriver(api, "etl-abc", "data").retire(
        "extract", seen, 1
    )  # the stage task's retire (its cleared try)
    assert api.calls == ["patch", "get", "patch"]
    assert list(pod.view.records) == ["transform"] and pod.view.record("transform") == rival.record


def test_a_retire_that_keeps_losing_gives_up_naming_the_stage() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    api = RacingApi(pod, [{"metadata": {"annotations": {"other": str(k)}}} for k in range(10)])
    with pytest.raises(ChainError, match="could not retire generation 1 of stage 'extract'"):
        StageDriver(api, "etl-abc", "data").retire("extract", pod.view, 1)
    assert pod.view.record("extract") is not None  # nothing half-done


# --- the chain's size check -------------------------------------------------------------------------------


def test_the_size_check_counts_every_stage_s_record_in_the_one_annotation() -> None:
    def chain(stages: int) -> ChainSpec:
        spec = ChainSpec("etl", "data", [StageSpec(f"s{k}", "acme/etl:1.0", ["run"]) for k in range(stages)])
        spec.validate()
        return spec

    check_annotations_size(chain(20))
    with pytest.raises(ChainConfigError) as refused:
        check_annotations_size(chain(2000))
    assert refused.value.field == "stages"
    message = str(refused.value)
    assert "the records of its 2000 stages" in message and STAGES_ANNOTATION in message
    assert f"over the API server's {MAX_ANNOTATIONS_BYTES}-byte limit" in message
    assert "split the chain" in message


def test_the_size_check_names_the_stages_whose_command_and_env_do_not_fit() -> None:
    def big(name: str) -> StageSpec:
        return StageSpec(name, "acme/etl:1.0", ["run"], env={"DATA": "x" * (60 * 1024)})

    stages = [StageSpec("small", "acme/etl:1.0", ["run"]), big("big"), big("bigger")]
    spec = ChainSpec("etl", "data", stages, annotations={"note": "n" * (150 * 1024)})
    spec.validate()
    with pytest.raises(ChainConfigError) as refused:
        check_annotations_size(spec)
    assert refused.value.field in ("stages[1].cmds", "stages[2].cmds")
    message = str(refused.value)
    assert "stage 'big'" in message and "stage 'bigger'" in message
    assert "the records of its 3 stages" in message and "shorten the chain's annotations" in message
