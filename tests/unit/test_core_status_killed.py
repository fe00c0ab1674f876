"""Why a stage's container was killed, runner and all, read from the kubelet's last termination of its
slot (`status.killed_by_kubelet`): the kubelet's OOM kill, or a signal from outside the pod (the container's
pid 1, the runner, killed: exit code 128 + signal, reason Error, as runc/containerd report it and kruise-local
now models on every sandbox). The runner records such a generation as exit 137 `interrupted` when it
restarts: that is the runner's record, not the stage's own exit, and the error says what killed it. A
termination from before the stage's swap (the parked runner the swap stopped, SIGKILL after its grace) is not
the stage's."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow_kruise_chain.core.podview import StageRecord
from airflow_kruise_chain.core.status import StageResult, killed_by_kubelet, with_kill_reason
from tests.unit.podfactory import chain_pod, running

GO = StageRecord(
    3, "slot-b", "acme/load:1", 1, "containerd://b1", "2024-05-01T10:00:00.250000+00:00", "go", "", "t"
)
AT = datetime(2024, 5, 1, 10, 0, 5, tzinfo=UTC)
INTERRUPTED = StageResult(
    stage="load", generation=3, slot="slot-b", image="acme/load:1", exit_code=137, reason="interrupted",
    started_at=AT, finished_at=AT, duration_seconds=0.0, outputs={}, outputs_status="absent", log_tail=[],
)  # fmt: skip


def _pod(exit_code: int, reason: str, finished: str) -> object:
    last = {"containerID": "containerd://b1", "exitCode": exit_code, "reason": reason, "finishedAt": finished}
    slot_b = {**running("containerd://b2", last=last), "generation": 3, "stage": "load"}
    return chain_pod(records={"load": GO}, slots={"slot-a": running("containerd://a"), "slot-b": slot_b})


def test_a_runner_killed_by_a_signal_from_outside_is_named_not_taken_for_the_stages_exit() -> None:
    killed = killed_by_kubelet(_pod(137, "Error", "2024-05-01T10:00:07Z"), "slot-b", GO)
    assert killed.startswith("its container (slot-b) was killed by SIGKILL from outside the pod"), killed
    assert "exit code 137, reason Error" in killed
    named = with_kill_reason(INTERRUPTED, killed)
    assert (named.reason, named.detail) == ("interrupted", killed)


def test_an_oom_kill_keeps_its_reason() -> None:
    killed = killed_by_kubelet(_pod(137, "OOMKilled", "2024-05-01T10:00:07Z"), "slot-b", GO)
    assert killed.startswith("OOMKilled (exit code 137)")
    assert with_kill_reason(INTERRUPTED, killed).reason == "OOMKilled"


def test_a_termination_from_before_the_swap_or_not_by_a_signal_is_not_the_stages() -> None:
    assert killed_by_kubelet(_pod(137, "Error", "2024-05-01T09:59:59Z"), "slot-b", GO) == ""
    assert killed_by_kubelet(_pod(1, "Error", "2024-05-01T10:00:07Z"), "slot-b", GO) == ""
    assert killed_by_kubelet(_pod(0, "Completed", "2024-05-01T10:00:07Z"), "slot-b", GO) == ""
