"""Operations on a running chain under the real scheduler: the chain page's data for an active run (default
settings), a malformed `chain_state` XCom, and what a user does from the UI / REST API while a stage runs
(mark the DAG run failed, mark the stage task success, clear it), HotSwapSensor in both modes and a
triggerer restart while a stage is deferred.

See stack.py for the stack. Each test uses its own DAG; its stage waits for a gate file in the chain's
scratch volume, which the test writes when it is done operating on the running stage.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest

from airflow_kruise_chain.core.chainstate import RECORDED
from tests.airflow.stack import AirflowStack
from tests.airflow.test_scheduler import container_logs_contain, nothing_left

pytestmark = pytest.mark.slow

GATED = '''
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

WORK = """
echo "work begins"
while [ ! -f "$CHAIN_SCRATCH/gate" ]; do sleep 0.2; done
echo "work passed the gate"
"""

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("c", namespace="default", prewarm=False, deferrable={deferrable!r},
                     pod_template={{"spec": {{"terminationGracePeriodSeconds": 2}}}}) as chain:
        work = chain.stage("work", image="busybox:1.36", cmds=["/bin/sh", "-c", WORK])
        after = chain.stage("after", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo after ran"])
        work >> after
        if {sensors!r}:
            HotSwapSensor(task_id="running_poked", chain_name="c", namespace="default", stage="work",
                          target_state="running", poke_interval=1, timeout=300)
            HotSwapSensor(task_id="finished_deferred", chain_name="c", namespace="default", stage="work",
                          target_state="finished", deferrable=True, timeout=300)
'''


def gated_dag(dag_id: str, *, deferrable: bool = False, sensors: bool = False) -> str:
    return GATED.format(dag_id=dag_id, deferrable=deferrable, sensors=sensors)


class Running:
    """A DAG run whose stage `c.work` runs and waits for its gate."""

    def __init__(self, stack: AirflowStack, dag_id: str, **options: Any) -> None:
        stack.add_dag(f"{dag_id}.py", gated_dag(dag_id, **options))
        self.stack, self.dag_id = stack, dag_id
        self.pods_before = stack.pods_created()
        self.run_id = stack.trigger(dag_id)
        pod = stack.chain_pod(dag_id, self.run_id)
        self.uid = pod["metadata"]["uid"]
        stack.wait(lambda: container_logs_contain(stack, self.uid, "work begins"), 180, "the stage to start")

    def open_gate(self) -> None:
        (self.stack.cluster.root / "pods" / self.uid / "volumes" / "scratch" / "gate").write_text("go\n")

    def states(self) -> dict[str, str | None]:
        return self.stack.states(self.dag_id, self.run_id)

    def log(self, task_id: str, try_number: int = 1) -> str:
        return self.stack.task_log(self.dag_id, self.run_id, task_id, try_number)

    @property
    def page_route(self) -> str:
        """The chain page's data route for this run."""
        return f"/kruise-chain/api/runs/{quote(self.dag_id, safe='')}/{quote(self.run_id, safe='')}"

    def page_data(self) -> dict[str, Any]:
        """The chain page's data as the page's own request gets it: the admin's login cookie."""
        return self.stack.request("GET", self.page_route, cookie=True)

    def ti_url(self, task_id: str) -> str:
        return f"/api/v2/dags/{self.dag_id}/dagRuns/{quote(self.run_id, safe='')}/taskInstances/{task_id}"

    def wait_state(self, task_id: str, states: tuple[str, ...], timeout: float = 180) -> None:
        self.stack.wait(lambda: self.states().get(task_id) in states, timeout, f"{task_id} to be {states}")

    def ended(self) -> str:
        return self.stack.wait_run(self.dag_id, self.run_id)

    def assert_stopped(self) -> None:
        """The stage was stopped (SIGTERM: exit 143) before it passed its gate, as its runner recorded it, and
        its task's log says so: the end line, or on_kill's stop request (Airflow's supervisor SIGKILLs the
        task 5 s after the SIGTERM that ran on_kill, which may be before the end is read)."""
        folder = self.stack.cluster.root / "pods" / self.uid / "containers"
        logs = "".join(log.read_text(errors="replace") for log in folder.rglob("*.log"))
        assert re.search(r" result gen=1 token=\S+ stage=work slot=\S+ exit=143 ", logs), logs[-3000:]
        assert "work passed the gate" not in logs
        log = self.log("c.work")
        said = ("end stage=work generation=1 exit=143 ", "stopping stage 'work' generation 1 ")
        assert any(f"::kruise-chain:: {line}" in log for line in said), log


def test_the_chain_page_of_a_running_run_shows_what_the_stage_tasks_recorded(
    airflow_stack: AirflowStack,
) -> None:
    run = Running(airflow_stack, "chain_page_running")
    data = airflow_stack.wait(
        lambda: (d := run.page_data())["chains"] and d["chains"][0]["stages"][0]["state"] == "running" and d,
        60,
        "the stage's running record",
    )
    assert data["running"] and data["errors"] == []
    (chain,) = data["chains"]
    # default settings: no live pod view, and the page says so instead of 'not found'
    assert chain["pod_state"] == RECORDED and not chain["live"]
    (stage,) = chain["stages"]
    assert (stage["stage"], stage["task_id"], stage["task_state"]) == ("work", "c.work", "running")
    assert (
        stage["task_url"]
        == f"/dags/chain_page_running/runs/{quote(run.run_id, safe='')}/tasks/c.work?try_number=1"
    )
    slots = {s["slot"]: s for s in chain["slots"]}
    assert (slots[stage["slot"]]["stage"], slots[stage["slot"]]["state"]) == ("work", "running")
    assert slots[stage["slot"]]["since"] == stage["started_at"]
    assert "gone" not in {s["state"] for s in chain["slots"]}
    assert [p["task_id"] for p in chain["pending"]] == ["c.after"]

    # the plugin's routes go through Airflow's auth: no login is refused, a user without a role is refused
    # the run's data and sees no run in the list, a viewer reads both
    stack = airflow_stack
    for route in (run.page_route, "/kruise-chain/api/runs", "/kruise-chain/"):
        assert stack.call("GET", route, user=None)[0] == 401, route
    assert stack.call("GET", run.page_route, user="nobody", cookie=True)[0] == 403
    assert stack.call("GET", run.page_route, user="nobody")[0] == 403
    assert stack.request("GET", "/kruise-chain/api/runs", user="nobody") == []
    assert stack.request("GET", run.page_route, user="viewer")["chains"][0]["stages"][0]["state"] == "running"
    listed = stack.request("GET", "/kruise-chain/api/runs", user="viewer", cookie=True)
    assert (run.dag_id, run.run_id) in {(r["dag_id"], r["run_id"]) for r in listed}
    # and so does Airflow's own REST API: the viewer may read the run but not mark it failed
    path = f"/api/v2/dags/{run.dag_id}/dagRuns/{quote(run.run_id, safe='')}"
    assert stack.call("PATCH", path, {"state": "failed"}, user="viewer")[0] == 403
    assert stack.call("GET", path, user=None)[0] == 401

    run.open_gate()
    assert run.ended() == "success", run.states()
    (chain,) = run.page_data()["chains"]
    assert [(s["stage"], s["state"], s["failure"]) for s in chain["stages"]] == [
        ("work", "succeeded", ""),
        ("after", "succeeded", ""),
    ]


MALFORMED = """
import pendulum
from airflow.sdk import DAG, task

with DAG("chain_state_malformed", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    @task
    def string_generation(ti=None):
        ti.xcom_push(key="chain_state", value={"chain": "c", "namespace": "default", "pod": "p", "stage": "s",
                     "slot": "slot-a", "generation": "two", "image": "i", "try_number": 1, "action": "go"})

    @task
    def bad_time(ti=None):
        ti.xcom_push(key="chain_state", value={"chain": "c", "namespace": "default", "pod": "p", "stage": "t",
                     "slot": "slot-b", "generation": 2, "image": "i", "try_number": 1, "action": "go",
                     "swapped_at": "yesterday"})

    string_generation() >> bad_time()
"""


def test_a_malformed_chain_state_gives_one_error_per_task_and_never_a_500(
    airflow_stack: AirflowStack,
) -> None:
    stack, dag_id = airflow_stack, "chain_state_malformed"
    stack.add_dag(f"{dag_id}.py", MALFORMED)
    run_id = stack.trigger(dag_id)
    assert stack.wait_run(dag_id, run_id) == "success", stack.states(dag_id, run_id)
    for _ in range(2):  # the same answer at each refresh
        data = stack.get(f"/kruise-chain/api/runs/{dag_id}/{quote(run_id, safe='')}")
        assert data["chains"] == []
        assert data["errors"] == [  # one per task, in task order
            "task bad_time pushed a malformed chain_state XCom (swapped_at is 'yesterday', not an ISO 8601 "
            "time): it is not shown",
            "task string_generation pushed a malformed chain_state XCom (generation is 'two', not an "
            "integer): it is not shown",
        ]


def test_marking_the_dag_run_failed_stops_the_running_stage_and_the_teardown_still_cleans_up(
    airflow_stack: AirflowStack,
) -> None:
    run = Running(airflow_stack, "chain_mark_run_failed")
    run.wait_state("c.work", ("running",))
    path = f"/api/v2/dags/{run.dag_id}/dagRuns/{quote(run.run_id, safe='')}"
    airflow_stack.request("PATCH", path, {"state": "failed"})
    assert run.ended() == "failed", run.states()
    # Airflow kills the running task (its on_kill stops the stage), skips what had not run, runs teardown
    assert run.states() == {
        "c.setup": "success",
        "c.work": "failed",
        "c.after": "skipped",
        "c.teardown": "failed",
    }
    # stopped by the task's on_kill or by the teardown's deletion of the pod, whichever comes first: the
    # teardown may run as soon as the run is marked failed, the task is killed at its next heartbeat
    run.assert_stopped()
    assert "did not succeed in this DAG run: c.work (failed)" in run.log("c.teardown")
    airflow_stack.wait(lambda: nothing_left(airflow_stack, run.dag_id, run.run_id), 60, "the pod to be gone")
    assert airflow_stack.pods_created() - run.pods_before == 1


def test_marking_a_running_stage_success_stops_it_and_the_next_stage_runs(
    airflow_stack: AirflowStack,
) -> None:
    run = Running(airflow_stack, "chain_mark_task_success")
    run.wait_state("c.work", ("running",))
    airflow_stack.request("PATCH", run.ti_url("c.work"), {"new_state": "success"})
    assert run.ended() == "success", run.states()
    assert run.states() == {
        "c.setup": "success",
        "c.work": "success",
        "c.after": "success",
        "c.teardown": "success",
    }
    # stopped by its task's on_kill at the task's next heartbeat, or, if the next stage and the teardown
    # were quicker, by the teardown's deletion of the pod
    run.assert_stopped()
    assert "after ran" in run.log("c.after")
    airflow_stack.wait(lambda: nothing_left(airflow_stack, run.dag_id, run.run_id), 60, "the pod to be gone")


def test_clearing_a_running_stage_stops_it_and_runs_it_again_in_the_same_pod(
    airflow_stack: AirflowStack,
) -> None:
    run = Running(airflow_stack, "chain_clear_running")
    run.wait_state("c.work", ("running",))
    assert airflow_stack.clear(run.dag_id, run.run_id, ["c.work"]) == ["c.setup", "c.teardown", "c.work"]
    airflow_stack.wait(
        lambda: (
            airflow_stack.task_instances(run.dag_id, run.run_id)["c.work"]["try_number"] == 2
            and run.states()["c.work"] == "running"
            and "work begins" in run.log("c.work", 2)
        ),
        240,
        "the second try to run the stage",
    )
    assert "stopping stage 'work'" in run.log("c.work", 1)
    run.open_gate()
    assert run.ended() == "success", run.states()
    assert "work passed the gate" in run.log("c.work", 2)
    assert airflow_stack.pods_created() - run.pods_before == 1  # setup ran again and reused the pod
    airflow_stack.wait(lambda: nothing_left(airflow_stack, run.dag_id, run.run_id), 60, "the pod to be gone")


def test_sensors_in_both_modes_and_a_triggerer_restart_while_the_stage_is_deferred(
    airflow_stack: AirflowStack,
) -> None:
    stack = airflow_stack
    run = Running(stack, "chain_sensors_triggerer", deferrable=True, sensors=True)
    run.wait_state("c.work", ("deferred",))
    run.wait_state("c.running_poked", ("success",))  # poke mode: the stage runs
    run.wait_state("c.finished_deferred", ("deferred",))
    stack.restart("triggerer")
    run.open_gate()
    assert run.ended() == "success", run.states()
    assert set(run.states().values()) == {"success"}
    log = run.log("c.work")
    assert "work passed the gate" in log and "::kruise-chain:: end stage=work" in log
    assert "stage work reached finished" in run.log("c.finished_deferred")
    stack.wait(lambda: nothing_left(stack, run.dag_id, run.run_id), 60, "the pod to be gone")
