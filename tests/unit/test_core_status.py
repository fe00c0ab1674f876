"""Runner markers, stage results, stage states and Kruise job outcomes."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from airflow_kruise_chain.core import (
    ResultMarker,
    StageResult,
    StageState,
    StartMarker,
    image_pull_job_outcome,
    parse_marker,
    slot_status,
    stage_state,
    stage_status,
)
from airflow_kruise_chain.core.podview import ChainPod, StageRecord
from tests.unit.podfactory import chain_pod, running

T0 = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
T1 = datetime(2024, 5, 1, 10, 1, 30, tzinfo=UTC)
OUTPUTS = {"rows": 42, "path": "/scratch/out 'x'.csv", "ünï": [1, None]}
B64 = base64.b64encode(json.dumps(OUTPUTS).encode()).decode()
RESULT = (
    "::kruise-chain:: result gen=7 stage=load slot=slot-b exit=0 reason=completed "
    f"started=2024-05-01T10:00:00Z finished=2024-05-01T10:01:30Z outputs={B64} outputs_status=ok"
)


# --- markers and results -----------------------------------------------------------------------------------


def test_parse_start_marker() -> None:
    marker = parse_marker("::kruise-chain:: start gen=7 stage=load slot=slot-b at=2024-05-01T10:00:00Z")
    assert marker == StartMarker(7, "load", "slot-b", T0)


def test_parse_result_marker() -> None:
    assert parse_marker(RESULT) == ResultMarker(7, "load", "slot-b", 0, "completed", T0, T1, OUTPUTS, "ok")


@pytest.mark.parametrize("prefix", ["2024-05-01T10:01:30.123456789Z ", "partial output without newline", " "])
def test_a_marker_counts_only_at_the_start_of_a_line(prefix: str) -> None:
    assert parse_marker(RESULT + "\n").exit_code == 0
    assert parse_marker(prefix + RESULT + "\n") is None  # the runner starts its result on a line of its own


@pytest.mark.parametrize(
    ("outputs", "status", "expected", "expected_status"),
    [
        ("-", "absent", None, "absent"),
        ("-", "too-big", None, "too-big"),
        ("-", "truncated", None, "truncated"),
        ("not*base64", "ok", None, "invalid"),
        (base64.b64encode(b"{broken").decode(), "ok", None, "invalid"),
        (base64.b64encode(b"[1, 2]").decode(), "ok", None, "invalid"),
        (base64.b64encode(b'{"a": 1}\n').decode(), "ok", {"a": 1}, "ok"),
    ],
)
def test_outputs_decoding(outputs, status, expected, expected_status) -> None:
    line = RESULT.replace(f"outputs={B64} outputs_status=ok", f"outputs={outputs} outputs_status={status}")
    marker = parse_marker(line)
    assert (marker.outputs, marker.outputs_status) == (expected, expected_status)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "hello world",
        "::kruise-chain:: error: cannot create /scratch/.chain/gen-1",
        "::kruise-chain:: start gen=x stage=a slot=slot-a at=2024-05-01T10:00:00Z",
        "::kruise-chain:: start gen=1 stage=a slot=slot-a",
        "::kruise-chain:: start gen=1 stage=a slot=slot-a at=yesterday",
        RESULT.replace("exit=0", "exit=zero"),
    ],
)
def test_non_markers(line: str) -> None:
    assert parse_marker(line) is None


def test_result_from_log_with_tail() -> None:
    log = [
        "::kruise-chain:: start gen=7 stage=load slot=slot-b at=2024-05-01T10:00:00Z\n",
        *[f"line {i}\n" for i in range(30)],
        RESULT + "\n",
        RESULT + "\n",  # a re-announce after a restart
    ]
    result = StageResult.from_log(log, generation=7, image="acme/load:1.1", tail=5)
    assert result is not None
    assert (result.stage, result.generation, result.slot, result.exit_code, result.reason) == (
        "load",
        7,
        "slot-b",
        0,
        "completed",
    )
    assert result.duration_seconds == 90.0
    assert result.log_tail == [f"line {i}" for i in range(25, 30)]
    assert result.outputs == OUTPUTS and result.succeeded
    assert StageResult.from_log(log, generation=8, image="x") is None
    assert StageResult.from_log(log[:-2], generation=7, image="x") is None
    assert StageResult.from_log(log, generation=7, image="x", tail=0).log_tail == []


def test_result_from_a_termination_message() -> None:
    marker = parse_marker(RESULT.split(" outputs=")[0] + " outputs=- outputs_status=truncated")
    result = StageResult.from_marker(marker, image="acme/load:1.1")
    assert result.outputs == {} and result.outputs_status == "truncated"


def test_to_xcom_is_json_safe() -> None:
    result = StageResult.from_marker(parse_marker(RESULT), image="acme/load:1.1", log_tail=["done"])
    xcom = result.to_xcom()
    assert json.loads(json.dumps(xcom)) == xcom
    assert xcom["started_at"] == "2024-05-01T10:00:00+00:00"
    assert xcom["outputs"] == OUTPUTS and xcom["log_tail"] == ["done"] and xcom["image"] == "acme/load:1.1"


# --- stage states ------------------------------------------------------------------------------------------


def pod_with(
    record: StageRecord | None,
    status: dict | None,
    *,
    slot_generation: int = 3,
    phase: str = "Running",
    deleting: bool = False,
) -> ChainPod:
    """A chain pod whose slot-b hosts generation `slot_generation` of stage load, with the container status
    `status` (None: none yet) and `record` as load's swap record."""
    return chain_pod(
        records={"load": record} if record is not None else {},
        slots={"slot-b": {"status": status, "generation": slot_generation, "stage": "load"}},
        generation=slot_generation,
        phase=phase,
        deleting=deleting,
    )


RECORD = StageRecord(3, "slot-b", "acme/load:1.1", 1, "containerd://old", "2024-05-01T10:00:00Z", "patch")
RUNNING = {"state": {"running": {}}}


@pytest.mark.parametrize(
    ("status", "expected", "reason"),
    [
        (None, StageState.SWAPPING, "ContainerStatusPending"),
        ({**RUNNING, "containerID": "containerd://old", "ready": True}, StageState.SWAPPING, "Swapping"),
        (
            {"state": {"terminated": {"exitCode": 0}}, "containerID": "containerd://old"},
            StageState.SWAPPING,
            "Swapping",
        ),
        (
            {"state": {"waiting": {"reason": "ContainerCreating"}}, "containerID": "containerd://old"},
            StageState.SWAPPING,
            "ContainerCreating",
        ),
        ({**RUNNING, "containerID": "containerd://new", "ready": False}, StageState.RUNNING, ""),
        ({**RUNNING, "containerID": "containerd://new", "ready": True}, StageState.FINISHED, ""),
        (
            {
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                "containerID": "containerd://new",
            },
            StageState.RUNNING,
            "OOMKilled",
        ),
        (
            {
                "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
                "containerID": "containerd://old",
            },
            StageState.FAILED_TO_START,
            "ErrImagePull",
        ),
        (  # the kubelet's next reason for the same failed pull (image back-off)
            {
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": 'Back-off pulling image "acme/load:9": ErrImagePull: not found',
                    }
                },
                "containerID": "containerd://old",
            },
            StageState.FAILED_TO_START,
            "ImagePullBackOff",
        ),
        (
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "containerID": "containerd://new"},
            StageState.FAILED_TO_START,
            "CrashLoopBackOff",
        ),
        (
            {"state": {"waiting": {"reason": "CreateContainerConfigError"}}},
            StageState.FAILED_TO_START,
            "CreateContainerConfigError",
        ),
    ],
)
def test_stage_states(status, expected, reason) -> None:
    result = stage_status(pod_with(RECORD, status), "load")
    assert (result.state, result.reason) == (expected, reason)
    assert (result.slot, result.generation, result.stage) == ("slot-b", 3, "load")
    assert stage_state(pod_with(RECORD, status), "load") is expected


def test_failure_message_is_kept() -> None:
    status = {"state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}
    assert stage_status(pod_with(RECORD, status), "load").message == "manifest unknown"


def test_failure_already_there_before_the_swap_is_not_blamed_on_it() -> None:
    record = StageRecord(
        3, "slot-b", "acme/load:1.1", 1, "containerd://old", "t", "patch", "ImagePullBackOff"
    )
    stale = {"state": {"waiting": {"reason": "ImagePullBackOff"}}, "containerID": "containerd://old"}
    assert stage_state(pod_with(record, stale), "load") is StageState.SWAPPING
    fresh = {"state": {"waiting": {"reason": "ErrImagePull"}}, "containerID": "containerd://old"}
    assert stage_state(pod_with(record, fresh), "load") is StageState.FAILED_TO_START


def test_not_started_superseded_and_lost() -> None:
    assert stage_state(pod_with(None, RUNNING), "load") is StageState.NOT_STARTED
    superseded = stage_status(pod_with(RECORD, RUNNING, slot_generation=5), "load")
    assert (superseded.state, superseded.generation) == (StageState.SUPERSEDED, 3)
    assert stage_status(None, "load").state is StageState.POD_LOST
    for phase in ("Failed", "Succeeded"):
        assert stage_state(pod_with(RECORD, RUNNING, phase=phase), "load") is StageState.POD_LOST
    deleting = pod_with(RECORD, RUNNING, deleting=True)
    assert "being deleted" in stage_status(deleting, "load").message


def test_slot_status() -> None:
    idle = chain_pod(slots={"slot-a": running("", ready=True)})
    assert slot_status(idle, "slot-a").state is StageState.FINISHED
    assert slot_status(idle, "slot-a").generation == 0
    assert slot_status(idle, "slot-b").state is StageState.SWAPPING
    busy = pod_with(RECORD, {**RUNNING, "containerID": "containerd://new", "ready": False})
    assert (slot_status(busy, "slot-b").state, slot_status(busy, "slot-b").stage) == (
        StageState.RUNNING,
        "load",
    )
    assert slot_status(None, "slot-a").state is StageState.POD_LOST


# --- Kruise job outcomes -----------------------------------------------------------------------------------


def job(**status) -> dict:
    return {"spec": {"image": "acme/load:1.1"}, "status": status}


def test_image_pull_job_outcome() -> None:
    assert image_pull_job_outcome({"spec": {}}) == "running"
    assert image_pull_job_outcome(job(desired=1, active=1)) == "running"
    done = image_pull_job_outcome(job(desired=1, succeeded=1, completionTime="2024-05-01T10:00:00Z"))
    assert done == "succeeded" and "acme/load:1.1" in done.message
    failed = image_pull_job_outcome(
        job(desired=2, succeeded=1, failed=1, failedNodes=["n2"], completionTime="2024-05-01T10:00:00Z")
    )
    assert failed == "failed" and "n2" in failed.message
    nothing = image_pull_job_outcome(job(desired=0, completionTime="2024-05-01T10:00:00Z"))
    assert nothing == "failed" and "matched no node" in nothing.message
    deadline = image_pull_job_outcome(
        job(
            desired=1,
            succeeded=0,
            completionTime="2024-05-01T10:00:00Z",
            message="job exceeded activeDeadline",
        )
    )
    assert deadline == "failed" and "activeDeadline" in deadline.message
