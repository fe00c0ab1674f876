"""Swap planning against a pod driven through its states, and the Kruise objects checked against the CRDs."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from airflow_kruise_chain.core import (
    ChainSpec,
    ImageReference,
    PodLostError,
    SlotBusyError,
    StageResult,
    StageSpec,
    StageState,
    build_chain_pod,
    build_image_pull_job,
    chain_labels,
    image_pull_job_name,
    parse_image_reference,
    plan_swap,
    stage_state,
)
from airflow_kruise_chain.core.errors import ResultUnavailableError
from airflow_kruise_chain.core.podview import ChainPod, StageRecord
from airflow_kruise_chain.core.swap import earlier_generation, retire_run_specs
from airflow_kruise_chain.core.wire import SEAL_ANNOTATION, STAGES_ANNOTATION, sealed_token

CRDS = Path("/work/shared/reference/kruise-crds")
CRR_CRD = CRDS / "v1.9.0" / "apps.kruise.io_containerrecreaterequests.yaml"
IPJ_CRD = CRDS / "apps.kruise.io_imagepulljobs.yaml"
NOW = datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)
BACKOFF_MESSAGE = (  # the kubelet's waiting message from 1.32 (kubernetes/kubernetes#127918)
    'Back-off pulling image "acme/missing:9": ErrImagePull: rpc error: code = NotFound desc = failed to '
    "pull and unpack image "
    '"docker.io/acme/missing:9": failed to resolve reference "docker.io/acme/missing:9": '
    "docker.io/acme/missing:9: not found"
)

EXTRACT = StageSpec("extract", "acme/extract:1.4", cmds=["extract", "--all"], env={"MODE": "full"})
TRANSFORM = StageSpec("transform", "acme/transform:2.0", cmds=["transform"])
LOAD = StageSpec("load", "acme/load:1.1", cmds=["load"], max_outputs_bytes=1024)
REPORT = StageSpec("report", "acme/report:1.0", cmds=["report"])
CHAIN = ChainSpec("etl", "data", [EXTRACT, TRANSFORM, LOAD])


# --- a pod and a minimal kubelet ---------------------------------------------------------------------------


def image_id(image: str) -> str:
    """The imageID a runtime reports for `image`: ``repository@digest``, one digest per tag."""
    ref = parse_image_reference(image)
    plain = str(ImageReference(ref.registry, ref.path, ref.tag, None))
    return f"{ref.repository}@{ref.digest or 'sha256:' + hashlib.sha256(plain.encode()).hexdigest()}"


def digest(image: str) -> str:
    return image_id(image).split("@", 1)[1]


class FakePod:
    """The chain pod as the API would return it, with helpers to play the kubelet's part.

    `image_ids` False plays a runtime that reports no imageID (the swap then cannot know the digest)."""

    def __init__(self, chain: ChainSpec = CHAIN, *, image_ids: bool = True) -> None:
        self.image_ids = image_ids
        self.pod = build_chain_pod(
            chain, pod_name="etl-abc", dag_id="d", run_id="r", first_images=chain.first_images
        )
        self.pod["metadata"]["resourceVersion"] = "1"
        self.pod["status"] = {"phase": "Running", "containerStatuses": []}
        self.ids = 0
        for slot in ("slot-a", "slot-b"):
            self.start(slot, ready=True)

    @property
    def view(self) -> ChainPod:
        """The snapshot a read of the pod gives now."""
        return ChainPod.of(copy.deepcopy(self.pod))

    def status(self, slot: str) -> dict[str, Any]:
        statuses = self.pod["status"]["containerStatuses"]
        for status in statuses:
            if status["name"] == slot:
                return status
        statuses.append({"name": slot, "restartCount": 0})
        return statuses[-1]

    def image(self, slot: str) -> str:
        return next(c["image"] for c in self.pod["spec"]["containers"] if c["name"] == slot)

    def bump(self) -> None:
        self.pod["metadata"]["resourceVersion"] = str(int(self.pod["metadata"]["resourceVersion"]) + 1)

    def start(self, slot: str, *, ready: bool) -> None:
        self.ids += 1
        status = self.status(slot)
        status.update(
            containerID=f"containerd://{self.ids}",
            image=self.image(slot),
            imageID=image_id(self.image(slot)) if self.image_ids else "",
            ready=ready,
            state={"running": {"startedAt": "2024-05-01T10:00:00Z"}},
        )
        self.bump()

    def set_ready(self, slot: str) -> None:
        self.status(slot)["ready"] = True
        self.bump()

    def wait(self, slot: str, reason: str, message: str = "") -> None:
        self.status(slot).update(ready=False, state={"waiting": {"reason": reason, "message": message}})
        self.bump()

    def apply(self, patch: dict[str, Any]) -> None:
        """Strategic-merge the plan's patch, refusing a stale resourceVersion like the API server."""
        metadata = patch["metadata"]
        if (
            metadata.get("resourceVersion", self.pod["metadata"]["resourceVersion"])
            != self.pod["metadata"]["resourceVersion"]
        ):
            raise AssertionError("409 Conflict")
        for key, value in metadata["annotations"].items():  # null deletes (strategic merge)
            if value is None:
                self.pod["metadata"]["annotations"].pop(key, None)
            else:
                self.pod["metadata"]["annotations"][key] = value
        for change in patch.get("spec", {}).get("containers", []):
            container = next(c for c in self.pod["spec"]["containers"] if c["name"] == change["name"])
            container.update(change)
        self.bump()

    def run(self, stage: StageSpec, try_number: int = 1, *, finish: bool = True, now: datetime = NOW):
        """Swap `stage` in as the operator and the kubelet would; return the plan."""
        plan = plan_swap(self.view, stage, try_number=try_number, now=now)
        self.apply(plan.patch)
        if plan.action == "patch":
            self.start(plan.slot, ready=False)  # image change: a new container, not ready until done
        else:
            self.status(plan.slot)["ready"] = False  # go: the same runner runs the stage
            self.bump()
        if finish:
            self.set_ready(plan.slot)
        return plan


def annotations(pod: FakePod) -> dict[str, str]:
    return pod.pod["metadata"]["annotations"]


def recorded(pod: FakePod) -> dict[str, dict[str, Any]]:
    """The pod's stage records as the JSON object of their one annotation (stage -> record, newest first)."""
    return json.loads(annotations(pod)[STAGES_ANNOTATION])


def put_record(pod: FakePod, stage: str, record: dict[str, Any] | StageRecord) -> None:
    """Write `stage`'s record into the pod's records annotation, first (as a swap would: newest)."""
    data = record.to_dict() if isinstance(record, StageRecord) else record
    others = {
        k: v for k, v in json.loads(annotations(pod).get(STAGES_ANNOTATION, "{}")).items() if k != stage
    }
    annotations(pod)[STAGES_ANNOTATION] = json.dumps({stage: data, **others}, separators=(",", ":"))


# --- planning ----------------------------------------------------------------------------------------------


def test_first_swap_runs_in_the_slot_that_holds_its_image_without_a_restart() -> None:
    pod = FakePod()
    plan = plan_swap(pod.view, EXTRACT, try_number=1, now=NOW, token="t0k")
    assert (plan.action, plan.slot, plan.generation, plan.backoff_wait) == ("go", "slot-a", 1, 0.0)
    assert "spec" not in plan.patch  # annotations only: the slot's runner picks the generation up
    assert plan.patch["metadata"]["resourceVersion"] == "3"
    ann = plan.patch["metadata"]["annotations"]
    # the run spec carries the nonce; the token, which the runner derives with the pod's seal, is in no
    # place a stage can read
    token = sealed_token(annotations(pod)[SEAL_ANNOTATION], "t0k")
    assert plan.token == token != "t0k" and token not in ann["airflow-kruise-chain/slot-a.run"]
    assert ann == {
        "airflow-kruise-chain/generation": "1",
        "airflow-kruise-chain/slot-a.generation": "1",
        "airflow-kruise-chain/slot-a.stage": "extract",
        "airflow-kruise-chain/slot-a.run": EXTRACT.run_spec(1, nonce="t0k"),  # no restart: kc_r=0
        "airflow-kruise-chain/stages": ann["airflow-kruise-chain/stages"],  # the stage records, all of them
    }
    assert json.loads(ann["airflow-kruise-chain/stages"]) == {
        "extract": {
            "action": "go",
            "generation": 1,
            "image": "acme/extract:1.4",
            "previous_container_id": "containerd://1",
            "slot": "slot-a",
            "swapped_at": "2024-05-01T10:00:00Z",
            "token": token,
            "try": 1,
        }
    }
    assert " " not in ann["airflow-kruise-chain/stages"]
    assert plan_swap(pod.view, EXTRACT, try_number=1, now=NOW).token != plan.token  # fresh per generation


def test_a_new_image_is_one_guarded_image_patch() -> None:
    pod = FakePod()
    first, second, third = pod.run(EXTRACT), pod.run(TRANSFORM), pod.run(LOAD)
    assert [(p.slot, p.generation, p.action) for p in (first, second, third)] == [
        ("slot-a", 1, "go"),
        ("slot-b", 2, "go"),
        ("slot-a", 3, "patch"),
    ]
    assert third.patch["spec"] == {"containers": [{"name": "slot-a", "image": "acme/load:1.1"}]}
    # the swap retires the run spec of the generation that ended in the other slot, in the same patch
    assert "airflow-kruise-chain/slot-b.run" not in first.patch["metadata"]["annotations"]  # none to retire
    # deleted, not emptied: nothing of it is left in the pod (kubectl describe shows no empty run spec)
    assert second.patch["metadata"]["annotations"]["airflow-kruise-chain/slot-a.run"] is None
    assert third.patch["metadata"]["annotations"]["airflow-kruise-chain/slot-b.run"] is None
    assert "airflow-kruise-chain/slot-b.run" not in annotations(pod)
    assert "\nkc_r=1\n" in third.patch["metadata"]["annotations"]["airflow-kruise-chain/slot-a.run"]
    assert third.patch["metadata"]["resourceVersion"]
    assert annotations(pod)["airflow-kruise-chain/generation"] == "3"
    assert "kc_m=1024\n" in annotations(pod)["airflow-kruise-chain/slot-a.run"]


def test_the_teardown_of_a_kept_pod_retires_every_run_spec_in_one_guarded_patch() -> None:
    pod = FakePod()
    pod.run(EXTRACT), pod.run(TRANSFORM)  # the second swap retired slot-a's
    patch = retire_run_specs(pod.view)
    assert patch == {
        "metadata": {
            "annotations": {"airflow-kruise-chain/slot-b.run": None},
            "resourceVersion": pod.pod["metadata"]["resourceVersion"],
        }
    }
    pod.apply(patch)
    assert not [key for key in annotations(pod) if key.endswith(".run")]
    assert retire_run_specs(pod.view) is None  # nothing left: no request
    # the stage records stay (retries, the UI), and the slots' generations and stages
    assert ChainPod.of(pod.pod).record("transform").slot == "slot-b"
    assert annotations(pod)["airflow-kruise-chain/slot-b.stage"] == "transform"


def test_a_stage_record_shows_its_generation_slot_try_action_and_image_first() -> None:
    pod = FakePod()
    plans = [pod.run(EXTRACT), pod.run(TRANSFORM), pod.run(LOAD)]
    text = annotations(pod)["airflow-kruise-chain/stages"]
    # one line (kubectl describe prints one shortened line for it), its first 138 characters the newest
    # stage's generation, slot, try, action and image
    assert "\n" not in text and " " not in text
    assert text[:138].startswith(
        '{"load":{"generation":3,"slot":"slot-a","try":1,"action":"patch","image":"acme/load:1.1",'
    )
    assert list(json.loads(text)) == ["load", "transform", "extract"]  # newest first
    assert ChainPod.of(pod.pod).records == {p.stage: p.record for p in reversed(plans)}
    assert not [key for key in annotations(pod) if key.startswith("airflow-kruise-chain/stage.")]


def test_the_swap_puts_its_record_first_and_keeps_the_others() -> None:
    pod = FakePod()
    pod.run(EXTRACT), pod.run(TRANSFORM)
    first = recorded(pod)
    retry = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=result(1, 1, "completed"), now=NOW)
    written = json.loads(retry.patch["metadata"]["annotations"][STAGES_ANNOTATION])
    assert list(written) == ["extract", "transform"]  # the stage swapped in again moves to the front
    assert written["transform"] == first["transform"]  # the others as they were
    assert (written["extract"]["generation"], written["extract"]["try"]) == (3, 2)
    pod.apply(retry.patch)
    assert ChainPod.of(pod.pod).record("extract") == retry.record


def same_image_chain(image: str, stages: int = 5) -> ChainSpec:
    return ChainSpec("etl", "data", [StageSpec(f"s{k}", image, cmds=["run"]) for k in range(1, stages + 1)])


def test_a_one_image_chain_never_restarts_a_slot() -> None:
    chain = same_image_chain("acme/etl:1.0", 20)
    pod = FakePod(chain)
    plans = [pod.run(stage) for stage in chain.stages]
    assert {p.action for p in plans} == {"go"}
    assert [p.generation for p in plans] == list(range(1, 21))
    assert [p.slot for p in plans[:4]] == ["slot-a", "slot-b", "slot-a", "slot-b"]
    assert pod.ids == 2  # the two containers the pod started with


def test_alternating_images_each_stay_in_their_slot() -> None:
    a, b = "acme/a:1", "acme/b:1"
    chain = ChainSpec("etl", "data", [StageSpec(f"s{k}", (a, b)[k % 2], cmds=["run"]) for k in range(8)])
    pod = FakePod(chain)
    plans = [pod.run(stage) for stage in chain.stages]
    assert [(p.slot, p.action) for p in plans] == [("slot-a", "go"), ("slot-b", "go")] * 4
    assert pod.ids == 2


def test_the_planner_avoids_a_slot_in_restart_back_off() -> None:
    a, b, c = "acme/a:1", "acme/b:1", "acme/c:1"
    images = [a, b, c, a, c, b, a]
    chain = ChainSpec(
        "etl", "data", [StageSpec(f"s{k}", image, cmds=["run"]) for k, image in enumerate(images)]
    )
    pod = FakePod(chain)
    plans = [pod.run(stage, now=NOW + timedelta(seconds=k)) for k, stage in enumerate(chain.stages)]
    assert [(p.slot, p.action) for p in plans] == [
        ("slot-a", "go"),
        ("slot-b", "go"),
        ("slot-a", "patch"),  # a -> c
        ("slot-b", "patch"),  # b -> a
        ("slot-a", "go"),  # c
        ("slot-b", "patch"),  # a -> b: slot-b restarts on b for the first time
        # a: slot-b restarted on a 3 s ago (the kubelet would hold it 10 s); slot-a never restarted on a
        ("slot-a", "patch"),
    ]
    assert all(p.backoff_wait == 0 for p in plans)


def test_an_unavoidable_back_off_is_named() -> None:
    a, b = "acme/a:1", "acme/b:1"
    pod = FakePod(ChainSpec("etl", "data", [StageSpec("s0", b, cmds=["x"])]))
    history = [("x1", "slot-a", a, 0), ("x2", "slot-b", a, 1), ("y1", "slot-a", b, 2), ("y2", "slot-b", b, 3)]
    for generation, (stage, slot, image, at) in enumerate(history, start=1):
        record = StageRecord(generation, slot, image, 1, "", f"2024-05-01T10:00:0{at}Z", "patch", token="t")
        put_record(pod, stage, record)
    assert {pod.image("slot-a"), pod.image("slot-b")} == {b}  # both restarted on a within seconds
    plan = plan_swap(pod.view, StageSpec("v", a, cmds=["x"]), try_number=1, now=NOW + timedelta(seconds=4))
    assert plan.action == "patch" and plan.backoff_wait == 10
    assert "restart back-off" in plan.backoff_why and plan.slot in plan.backoff_why
    later = plan_swap(pod.view, StageSpec("v", a, cmds=["x"]), try_number=1, now=NOW + timedelta(minutes=11))
    assert later.backoff_wait == 0  # 2 x 300 s after the last restart the kubelet forgets the key


def test_busy_slot_is_refused() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM, finish=False)  # slot-b runs
    pod.run(LOAD, finish=False)  # slot-a (alternate) runs too
    with pytest.raises(SlotBusyError) as info:
        plan_swap(pod.view, REPORT, try_number=1)
    assert (info.value.slot, info.value.generation, info.value.state) == ("slot-b", 2, StageState.RUNNING)
    assert "must wait" in str(info.value)


def test_slot_still_swapping_is_refused() -> None:
    pod = FakePod()
    plan = plan_swap(pod.view, LOAD, try_number=1)
    pod.apply(plan.patch)  # image patched in, but the kubelet has not restarted the container yet
    pod.run(TRANSFORM, finish=False)
    with pytest.raises(SlotBusyError) as info:
        plan_swap(pod.view, REPORT, try_number=1)
    assert info.value.state == StageState.SWAPPING


def test_unstarted_slot_is_refused() -> None:
    pod = FakePod()
    pod.wait("slot-a", "ContainerCreating")
    pod.wait("slot-b", "ContainerCreating")
    with pytest.raises(SlotBusyError):
        plan_swap(pod.view, EXTRACT, try_number=1)
    pod.pod["status"]["containerStatuses"] = []
    with pytest.raises(SlotBusyError):
        plan_swap(pod.view, EXTRACT, try_number=1)


def test_same_try_reattaches_without_a_new_generation() -> None:
    pod = FakePod()
    first = pod.run(EXTRACT, finish=False)
    again = plan_swap(pod.view, EXTRACT, try_number=1)
    assert (again.action, again.slot, again.generation, again.patch) == ("reattach", "slot-a", 1, None)
    assert again.token == first.token
    assert annotations(pod)["airflow-kruise-chain/generation"] == "1"


def result(generation: int, exit_code: int = 0, reason: str = "completed") -> StageResult:
    """The runner's result of `generation` as the driver reads it back from the slot's log."""
    return StageResult(
        stage="extract",
        generation=generation,
        slot="slot-a",
        image=EXTRACT.image,
        exit_code=exit_code,
        reason=reason,
        started_at=NOW,
        finished_at=NOW,
        duration_seconds=0.0,
        outputs={"rows": 3},
        outputs_status="ok",
    )


def test_a_retry_follows_the_earlier_try_still_running() -> None:
    pod = FakePod()
    first = pod.run(EXTRACT, finish=False)  # try 1's worker died; its generation still runs
    assert earlier_generation(pod.view, "extract", 2) is None  # nothing to read: it has no result yet
    plan = plan_swap(pod.view, EXTRACT, try_number=2)
    assert (plan.action, plan.slot, plan.generation, plan.patch) == ("reattach", "slot-a", 1, None)
    assert (plan.from_try, plan.token) == (1, first.token)
    assert annotations(pod)["airflow-kruise-chain/generation"] == "1"


def test_a_followed_result_decides_before_the_slot_shows_ready() -> None:
    pod = FakePod()
    pod.run(EXTRACT, finish=False)  # the runner printed its result; the readiness probe has not run yet
    adopt = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=result(1))
    assert (adopt.action, adopt.generation, adopt.patch) == ("adopt", 1, None)
    rerun = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=result(1, 1))
    assert (rerun.action, rerun.slot, rerun.generation) == ("patch", "slot-b", 2)  # slot-a is busy


def test_a_retry_adopts_an_earlier_generation_that_succeeded() -> None:
    pod = FakePod()
    pod.run(EXTRACT)  # try 1's generation finished while its worker was gone
    record = earlier_generation(pod.view, "extract", 2)
    assert record is not None and (record.generation, record.slot, record.try_number) == (1, "slot-a", 1)
    assert earlier_generation(pod.view, "extract", 1) is None  # the same try reattaches instead
    plan = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=result(1))
    assert (plan.action, plan.generation, plan.from_try, plan.patch) == ("adopt", 1, 1, None)
    assert plan.result == result(1)
    # and once a later stage has taken the other slot, from the result read back from history
    pod.run(TRANSFORM)
    again = plan_swap(pod.view, EXTRACT, try_number=3, earlier_result=result(1))
    assert (again.action, again.generation) == ("adopt", 1)


@pytest.mark.parametrize(
    ("exit_code", "reason"), [(1, "completed"), (137, "interrupted"), (143, "terminated")]
)
def test_a_retry_reruns_an_earlier_generation_that_failed_or_was_stopped(exit_code: int, reason: str) -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    earlier = result(1, exit_code, reason)
    retry = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=earlier, now=NOW)
    # in place: the slot that ran it still holds its image, so no restart
    assert (retry.action, retry.slot, retry.generation, retry.from_try) == ("go", "slot-a", 2, 2)
    pod.apply(retry.patch)
    assert recorded(pod)["extract"]["try"] == 2


def test_an_ended_generation_whose_result_is_unreadable_is_not_rerun() -> None:
    pod = FakePod()
    pod.run(EXTRACT)
    pod.run(TRANSFORM)
    pod.run(LOAD)  # an image patch: slot-a restarted on generation 3
    for unreadable in (None, result(7)):  # no result found in its history, or only another generation's
        with pytest.raises(
            ResultUnavailableError, match=r"generation 3 in slot-a.*not running the stage again"
        ):  # its log had its result line: it ended
            plan_swap(pod.view, LOAD, try_number=2, earlier_result=unreadable, finished={"slot-a"})
        with pytest.raises(ResultUnavailableError, match=r"generation 1 in slot-a"):  # slot-a moved on
            plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=unreadable, finished=set())
    # Ready says only that slot-a's runner serves it: without its result line, generation 3 is followed
    kept = plan_swap(pod.view, LOAD, try_number=2, earlier_result=None, finished=set())
    assert (kept.action, kept.generation, kept.patch) == ("reattach", 3, None)
    assert annotations(pod)["airflow-kruise-chain/generation"] == "3"


def test_an_earlier_generation_that_never_started_is_replaced() -> None:
    pod = FakePod()
    broken = StageSpec("extract", "acme/missing:9", cmds=["x"])
    pod.apply(plan_swap(pod.view, broken, try_number=1).patch)
    pod.wait("slot-a", "ImagePullBackOff", BACKOFF_MESSAGE)
    assert earlier_generation(pod.view, "extract", 2) is not None
    retry = plan_swap(pod.view, broken, try_number=2)  # no result: the runner never ran
    assert (retry.action, retry.generation) == ("go", 2)  # the kubelet keeps pulling; nothing to restart


def test_failed_to_start_slot_is_reused() -> None:
    pod = FakePod()
    broken = StageSpec("broken", "acme/missing:9", cmds=["x"])
    plan = plan_swap(pod.view, broken, try_number=1)
    pod.apply(plan.patch)
    pod.wait("slot-a", "ImagePullBackOff", BACKOFF_MESSAGE)
    assert stage_state(pod.view, "broken") == StageState.FAILED_TO_START
    pod.run(TRANSFORM)  # slot-b
    reuse = plan_swap(pod.view, EXTRACT, try_number=1)  # back to slot-a, which never started its image
    assert (reuse.slot, reuse.action) == ("slot-a", "patch")
    assert reuse.patch["spec"]["containers"][0]["image"] == "acme/extract:1.4"
    assert reuse.record.previous_reason == "ImagePullBackOff"
    pod.apply(reuse.patch)
    # The status still shows the old back-off until the kubelet catches up: not a failure of this stage.
    assert stage_state(pod.view, "extract") == StageState.SWAPPING


def test_waiting_slot_with_the_same_image_gets_annotations_only() -> None:
    pod = FakePod()
    pod.wait("slot-a", "CrashLoopBackOff")  # e.g. restarting after a stop
    pod.wait("slot-b", "CrashLoopBackOff")
    plan = plan_swap(pod.view, EXTRACT, try_number=1)
    assert (plan.action, plan.slot) == ("go", "slot-a")  # the kubelet starts it with the new annotations
    assert "spec" not in plan.patch


def test_the_driver_s_log_reading_decides_for_ambiguous_slots() -> None:
    pod = FakePod()
    pod.run(EXTRACT)  # go-swapped, Ready: maybe from before the swap
    pod.run(TRANSFORM, finish=False)  # its result is in the log, the probe has not run yet
    plan = plan_swap(pod.view, LOAD, try_number=1, finished={"slot-b"})
    assert plan.slot == "slot-b"
    plan = plan_swap(pod.view, LOAD, try_number=1, finished={"slot-a"})
    assert plan.slot == "slot-a"
    with pytest.raises(SlotBusyError, match="has not reported the end"):
        plan_swap(pod.view, LOAD, try_number=1, finished=set())


def test_lost_pod() -> None:
    pod = FakePod()
    pod.pod["status"]["phase"] = "Failed"
    pod.pod["status"]["reason"] = "Evicted"
    with pytest.raises(PodLostError, match="Evicted"):
        plan_swap(pod.view, EXTRACT, try_number=1)
    pod = FakePod()
    pod.pod["metadata"]["deletionTimestamp"] = "2024-05-01T10:00:00Z"
    with pytest.raises(PodLostError):
        plan_swap(pod.view, EXTRACT, try_number=1)


def test_concurrent_plans_conflict_on_resource_version() -> None:
    pod = FakePod()
    snapshot = pod.view  # read before the other swap
    pod.apply(plan_swap(pod.view, EXTRACT, try_number=1).patch)
    with pytest.raises(AssertionError, match="409"):
        pod.apply(plan_swap(snapshot, TRANSFORM, try_number=1).patch)


# --- Kruise objects against the CRD schemas ----------------------------------------------------------------


def _strict(schema: Any) -> Any:
    """openAPIV3Schema as JSON schema: int-or-string expanded, unknown fields rejected (kubectl's Strict)."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in schema:
        out["properties"] = {k: _strict(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    return out


def crd_schemas(path: Path) -> dict[str, dict[str, Any]]:
    if not path.exists():
        pytest.skip(f"{path} is not available")
    crd = yaml.safe_load(path.read_text())
    group = crd["spec"]["group"]
    return {f"{group}/{v['name']}": _strict(v["schema"]["openAPIV3Schema"]) for v in crd["spec"]["versions"]}


def test_strict_schema_rejects_unknown_fields() -> None:
    schema = crd_schemas(IPJ_CRD)["apps.kruise.io/v1alpha1"]
    job = build_image_pull_job("j", "data", "busybox:1.36", node_name="node-1")
    job["spec"]["selector"]["name"] = "node-1"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, schema)


@pytest.mark.parametrize("version", ["apps.kruise.io/v1alpha1", "apps.kruise.io/v1beta1"])
def test_image_pull_job_matches_the_crd(version: str) -> None:
    job = build_image_pull_job(
        image_pull_job_name("etl-abc", "acme/load:1.1"),
        "data",
        "acme/load:1.1",
        node_name="node-1",
        pull_secrets=["regcred"],
        labels=chain_labels("d", "r", "etl"),
        api_version=version,
    )
    jsonschema.validate(job, crd_schemas(IPJ_CRD)[version])
    spec = job["spec"]
    assert spec["selector"] == {"names": ["node-1"]}
    assert spec["image"] == "acme/load:1.1" and spec["imagePullPolicy"] == "IfNotPresent"
    assert spec["pullPolicy"] == {"timeoutSeconds": 600, "backoffLimit": 3}
    assert spec["completionPolicy"]["type"] == "Always"
    assert spec["completionPolicy"]["activeDeadlineSeconds"] >= spec["pullPolicy"]["timeoutSeconds"]
    assert spec["completionPolicy"]["ttlSecondsAfterFinished"] > 0
    assert spec["pullSecrets"] == ["regcred"]


def test_image_pull_job_guards() -> None:
    with pytest.raises(ValueError, match="node_name"):
        build_image_pull_job("j", "data", "busybox:1", node_name="")
    with pytest.raises(ValueError, match=">= timeout_seconds"):
        build_image_pull_job(
            "j", "data", "busybox:1", node_name="n", timeout_seconds=60, active_deadline_seconds=30
        )
    job = build_image_pull_job("j", "data", "busybox:1", node_name="n", timeout_seconds=60, backoff_limit=1)
    assert job["spec"]["completionPolicy"]["activeDeadlineSeconds"] == 120
    assert "pullSecrets" not in job["spec"]


def test_image_pull_job_names() -> None:
    name = image_pull_job_name("etl-abc", "acme/load:1.1")
    assert name == image_pull_job_name("etl-abc", "acme/load:1.1")
    assert name != image_pull_job_name("etl-abc", "acme/load:1.2")
    assert name == image_pull_job_name("etl-abc", "acme/load:1.1", 1)  # a replay of try 1 finds its job
    assert name != image_pull_job_name("etl-abc", "acme/load:1.1", 2)  # a retry makes its own
    assert name.startswith("etl-abc-pull-")
    assert len(image_pull_job_name("x" * 300, "i")) <= 63


def test_a_go_generation_without_a_result_is_followed_not_declared_lost() -> None:
    pod = FakePod()
    pod.run(EXTRACT)  # go: the slot shows Ready, which may predate the generation
    plan = plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=None, finished=set())
    assert (plan.action, plan.generation) == ("reattach", 1)  # follow it: its result line decides
    with pytest.raises(ResultUnavailableError):
        plan_swap(pod.view, EXTRACT, try_number=2, earlier_result=None, finished={"slot-a"})
