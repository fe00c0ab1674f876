"""What a try of a stage task finds in the chain pod before its swap (`KruiseChainOperator.prepare_try`, a
part of `operators/chain.py`): inputs a fresh pod lacks, a generation an earlier try delivered or failed
(retired so the stage runs again), an adopted generation's output replayed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException

from airflow_kruise_chain.operators.pod import ChainSetupOperator
from airflow_kruise_chain.operators.stage_result import DELIVERED_KEY, FAILED_KEY

if TYPE_CHECKING:
    from airflow_kruise_chain.core.driver import StageDriver
    from airflow_kruise_chain.core.podview import ChainPod
    from airflow_kruise_chain.core.swap import SwapPlan


class StageTries:
    """`KruiseChainOperator`'s look at the pod before its swap (a part of that class)."""

    def prepare_try(self, context: Context, driver: StageDriver) -> ChainPod:
        """Check what this try finds in the chain pod before any swap; return the pod as read (the swap
        plans from it).

        Fails at once (no retry) when a predecessor stage never ran in this pod: its outputs are not in the
        scratch volume (a fresh pod). When this stage's latest generation in the pod is one whose success an
        earlier try delivered to Airflow (the task was cleared after it succeeded), that generation's record
        is retired so the stage runs again as a new generation instead of adopting it.
        """
        from airflow_kruise_chain.core.podidentity import generation_identity, missing_inputs

        pod = driver.read_pod()
        missing = missing_inputs(pod, self.chain_predecessors())
        if missing:
            raise AirflowFailException(self.missing_inputs_message(driver, missing))
        store = context.get("task_state_store")
        record = pod.record(self.stage_name)
        if record is not None:
            # delivered by an earlier try: returned (task_state_store), or ended from its trigger (the record)
            identity = generation_identity(pod, record.generation)
            stored = store.get(DELIVERED_KEY) if store is not None else None
            if record.delivered or stored == identity:
                self.log.info(
                    "::kruise-chain:: generation %s of stage %s already succeeded for an earlier try of this "
                    "task, which has been cleared since: running the stage again as a new generation in "
                    "the same pod (scratch as the earlier stages left it)",
                    record.generation,
                    self.stage_name,
                )
                pod = self.retire(driver, pod, record.generation)
            elif store is not None and store.get(FAILED_KEY) == identity:
                # its slot may have run other stages since (a map index, a parallel branch): its result is
                # known from the try that reported it, not from the slot's log
                self.log.info(
                    "::kruise-chain:: generation %s of stage %s failed in an earlier try of this task: "
                    "running the stage again as a new generation",
                    record.generation,
                    self.stage_name,
                )
                pod = self.retire(driver, pod, record.generation)
        return pod

    def retire(self, driver: StageDriver, pod: ChainPod, generation: int) -> ChainPod:
        """Remove the stage's record of `generation` (`StageDriver.retire`: a conditional patch, re-read on
        a conflict)."""
        return driver.retire(self.stage_name, pod, generation)

    def replay(self, driver: StageDriver, plan: SwapPlan) -> None:
        """Print an adopted generation's whole output: no task log showed it after its worker died."""
        from airflow_kruise_chain.core.replay import read_generation_output

        pod = driver.read_pod()
        lines = read_generation_output(self.hook, pod, self.namespace, plan.slot, plan.generation)
        if not lines:
            self.log.info(
                "::kruise-chain:: the output of generation %s is no longer in %s's log (the slot restarted "
                "since); its last lines are in the result's log_tail",
                plan.generation,
                plan.slot,
            )
            return
        self.log.info(
            "::kruise-chain:: output of generation %s of stage %s from its start, as the runner printed it:",
            plan.generation,
            plan.stage,
        )
        for line in lines:
            self.log.info("%s", line)

    def missing_inputs_message(self, driver: StageDriver, missing: list[str]) -> str:
        setup = next(
            (
                task.task_id
                for task in self.get_flat_relatives(upstream=True)
                if isinstance(task, ChainSetupOperator) and task.chain_id == self.chain_id
            ),
            "",
        )
        names = ", ".join(repr(name) for name in missing)
        return (
            f"stage {self.stage_name!r} cannot run: it needs the output of stage(s) {names}, which did not "
            f"run in chain pod {self.namespace}/{driver.pod_name}: this is a fresh pod with an empty scratch "
            "volume (clearing a stage also clears the chain's setup and teardown; teardown had deleted the "
            "pod the earlier stages ran in). Clear from "
            + (f"`{setup}`" if setup else "the chain's setup task")
            + " with downstream to run the chain again from its first stage (or use keep_pod=True to re-run "
            "single stages in the kept pod)"
        )
