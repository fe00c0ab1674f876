"""The chain page's view of a run from its stage tasks' records: an active run without the live pod view,
failure reasons, and `chain_state` XComs that are not stage tracks."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kruise_chain.core.chainstate import RECORDED, MalformedTrack, StageTrack, chain_view
from tests.unit.test_chainstate import track


def running(stage: str, slot: str, generation: int, second: int) -> dict[str, Any]:
    data = track(stage, slot, generation, second)
    data.update(state="running", finished_at=None, exit_code=None)
    return data


def test_an_active_run_without_the_live_view_shows_the_running_stage_its_slot_and_since_when() -> None:
    view = chain_view([track("first", "slot-a", 1, 1), running("second", "slot-b", 2, 3)])
    assert view["pod_state"] == RECORDED and not view["live"]
    slots = {s["slot"]: s for s in view["slots"]}
    assert (slots["slot-b"]["stage"], slots["slot-b"]["state"]) == ("second", "running")
    assert slots["slot-b"]["since"] == "2026-01-01T00:00:03.400000+00:00"  # the stage's start
    assert (slots["slot-a"]["stage"], slots["slot-a"]["state"]) == ("first", "parked")
    assert slots["slot-a"]["since"] == "2026-01-01T00:00:01.900000+00:00"  # the stage's end
    assert "gone" not in {s["state"] for s in view["slots"]}


def test_a_swapping_stage_is_swapping_since_its_swap_and_a_pod_looked_for_in_vain_is_not_found() -> None:
    swapping = running("first", "slot-a", 1, 1)
    swapping.update(state="swapping", started_at=None)
    (slot_a, slot_b) = chain_view([swapping])["slots"]
    assert (slot_a["state"], slot_a["since"]) == ("swapping", "2026-01-01T00:00:01.100000+00:00")
    assert (slot_b["state"], slot_b["stage"]) == ("idle", None)
    assert chain_view([swapping], live_view=True)["pod_state"] == "not found"


def test_each_failed_stage_says_why() -> None:
    oom = track("big", "slot-a", 1, 1, reason="OOMKilled")
    oom.update(state="failed", exit_code=137)
    lost = running("lost", "slot-b", 2, 2)
    lost.update(state="failed", error="chain pod ns/etl-1 was deleted while stage 'lost' ran")
    failures = {
        s["stage"]: s["failure"] for s in chain_view([oom, lost, track("ok", "slot-a", 3, 3)])["stages"]
    }
    assert failures == {
        "big": "exit code 137: OOMKilled",
        "lost": "chain pod ns/etl-1 was deleted while stage 'lost' ran",
        "ok": "",
    }


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"generation": "2"}, "generation is '2', not an integer"),
        ({"generation": True}, "generation is True, not an integer"),
        ({"swapped_at": "yesterday"}, "swapped_at is 'yesterday', not an ISO 8601 time"),
        ({"started_at": 5}, "started_at is 5, not a string"),
        ({"waiting": [{"at": "x"}]}, "waiting holds an entry without a reason"),
        ({"stage": None}, "stage is None, not a string"),
        (
            {"memory_window": ["2026-01-01T00:00:01Z", "soon"]},
            "memory_window is .*, not a list of ISO 8601 times",
        ),
        ({"memory_samples": None}, "memory_samples is None, not an integer"),
    ],
)
def test_a_malformed_track_names_its_field(change: dict[str, Any], named: str) -> None:
    data = {**track("first", "slot-a", 1, 1), **change}
    with pytest.raises(MalformedTrack, match=named.replace("(", r"\(")):
        StageTrack.from_xcom(data)


def test_every_field_a_stage_task_publishes_is_accepted() -> None:
    data = track("first", "slot-a", 1, 1, memory_window=["2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z"])
    assert StageTrack.from_xcom(data).to_xcom() | {"updated_at": None} == data | {"updated_at": None}


def test_a_track_that_is_no_object_or_lacks_a_field_is_malformed() -> None:
    with pytest.raises(MalformedTrack, match="not a JSON object but str"):
        StageTrack.from_xcom("chain")
    data = track("first", "slot-a", 1, 1)
    del data["pod"]
    with pytest.raises(MalformedTrack, match="pod is missing"):
        StageTrack.from_xcom(data)


def test_a_ready_slot_is_parked_only_once_its_runner_recorded_the_generation_s_end() -> None:
    """A slot is Ready while its runner serves it, running a stage too (no readiness probe): the live view
    shows it parked only when the runner's result line for its generation was read, by the page (`reported`:
    in the slot's log) or by the stage's task (its track has the exit code); else running."""
    from airflow_kruise_chain.core.podview import StageRecord
    from tests.unit.podfactory import chain_pod
    from tests.unit.podfactory import running as container_running

    record = StageRecord(2, "slot-b", "img/y:1", 1, "containerd://3", "2026-01-01T00:00:02Z", "go")
    pod = chain_pod(
        records={"y": record},
        slots={
            "slot-a": container_running(
                "containerd://2", ready=True, generation=1, stage="x", image="img/x:1"
            ),
            "slot-b": container_running(
                "containerd://3", ready=True, generation=2, stage="y", image="img/y:1"
            ),
        },
    )
    swapping = running("y", "slot-b", 2, 2)
    swapping.update(state="swapping", started_at=None)  # its task has not read the start yet

    def states(tracks: list[dict[str, Any]], **options: Any) -> list[str]:
        return [s["state"] for s in chain_view(tracks, pod=pod, **options)["slots"]]

    assert states([track("x", "slot-a", 1, 1), swapping]) == ["parked", "running"]
    assert states([track("x", "slot-a", 1, 1), swapping], reported={"slot-b"}) == ["parked", "parked"]
    assert states([track("x", "slot-a", 1, 1), track("y", "slot-b", 2, 2)]) == ["parked", "parked"]
    assert states([running("x", "slot-a", 1, 1), swapping]) == ["running", "running"]


def test_the_page_reads_the_log_only_of_a_slot_whose_pod_status_cannot_tell() -> None:
    from airflow_kruise_chain.core.chainstate import reported_slots
    from airflow_kruise_chain.core.podview import StageRecord
    from tests.unit.podfactory import chain_pod
    from tests.unit.podfactory import running as container_running

    record = StageRecord(
        2, "slot-b", "img/y:1", 1, "containerd://3", "2026-01-01T00:00:02Z", "go", token="t2"
    )
    pod = chain_pod(
        records={"y": record},
        slots={
            "slot-a": container_running("containerd://2", ready=True, image="img/x:1"),  # idle: no generation
            "slot-b": container_running(
                "containerd://3", ready=True, generation=2, stage="y", image="img/y:1"
            ),
        },
    )
    result = (
        "::kruise-chain:: result gen=2 token={} stage=y slot=slot-b exit=0 reason=completed "
        "started=2026-01-01T00:00:02Z finished=2026-01-01T00:00:03Z outputs=- outputs_status=absent"
    )
    for token, expected in [("t2", {"slot-b"}), ("forged", set())]:
        read: list[str] = []

        def log(slot: str, read: list[str] = read, token: str = token) -> str:
            read.append(slot)
            return result.format(token)

        assert reported_slots(pod, log) == expected
        assert read == ["slot-b"]
