"""The deferral part of `KruiseChainOperator` (`operators/chain.py`): a deferrable stage followed on the
worker for `defer_after`, then handed to `StageTrigger`; the task resumed after the trigger
(`execute_complete`) reports the end the trigger read, or re-attaches and reads it."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_kruise_chain.config import defer_exit_hold
from airflow_kruise_chain.core.errors import ChainError
from airflow_kruise_chain.operators.stage_result import StageResults

if TYPE_CHECKING:
    from airflow_kruise_chain.core.driver import StageDriver
    from airflow_kruise_chain.core.status import StageResult
    from airflow_kruise_chain.core.swap import SwapPlan
    from airflow_kruise_chain.triggers.event import StageEnd


class StageDeferral:
    """`KruiseChainOperator`'s deferral and resume (a part of that class)."""

    def follow_or_defer(
        self,
        context: Context,
        driver: StageDriver,
        plan: SwapPlan,
        pod_uid: str,
        following: tuple[str, str] | None,
        then: tuple[str, str] | None,
    ) -> dict[str, Any]:
        """Follow the swapped stage for `deferral_delay`, then hand it to `StageTrigger` (`following` and
        `then` as `StageResults.follow`'s `ahead` and `then`)."""
        from airflow_kruise_chain.core.driver import Detached
        from airflow_kruise_chain.triggers.chain import StageTrigger

        # a stage that ends within `defer_after` is followed here: deferring it would cost more
        followed = self.follow(
            context,
            driver,
            plan,
            sample_memory=False,
            detach_at=time.monotonic() + self.deferral_delay(),
            ahead=following,
            then=then,
        )
        if isinstance(followed, Detached):
            self.defer(
                trigger=StageTrigger(
                    pod_name=driver.pod_name,
                    namespace=self.namespace,
                    stage=self.stage_name,
                    target="finished",
                    timeout=self.swap_timeout + (self.stage_timeout or 86400),
                    generation=plan.generation,
                    logged=followed.logged,
                    connection=self.connection,
                    fire_after=time.time() + defer_exit_hold(),
                    ahead=following,
                    then=then,
                    slot=plan.slot,
                    end=self.trigger_end(context),
                ),
                method_name="execute_complete",
                kwargs={"slot": plan.slot, "generation": plan.generation, "pod_uid": pod_uid},
            )
        return self.finish(context, followed, pod_uid)

    def deferral_delay(self) -> float:
        """Seconds a deferrable stage is followed on the worker before it is handed to the triggerer:
        `defer_after`, or by default the trigger's hold (`config.defer_exit_hold`: `[workers]
        min_heartbeat_interval` + 3 s, 8 s by default). Deferring costs Airflow's hand-over (the triggerer
        picks the trigger up within its 1 s loops, and reports the stage's end at its next loop), and a
        stage that fails soon after its deferral is held until the hold has passed; a stage that ends
        within the hold is cheaper followed here, and one that runs longer frees its worker."""
        return self.defer_after if self.defer_after is not None else defer_exit_hold()

    def trigger_end(self, context: Context) -> dict[str, Any] | None:
        """What the trigger needs to end this task itself on success (`triggers.end.TaskEnd`: it pushes the
        result as `finish` does); None when only a worker can end it: a task with outlets (their asset
        events are the worker's), or an operator that reports its result its own way (a TaskFlow stage)."""
        from airflow_kruise_chain.triggers.end import TaskEnd

        if self.outlets or type(self).finish is not StageResults.finish:
            return None
        return TaskEnd(self.chain_id, context["ti"].try_number, self.do_xcom_push).to_dict()

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        slot: str = "",
        generation: int = 0,
        pod_uid: str = "",
    ) -> dict[str, Any]:
        """Resume after the trigger, which logged the stage's output as it came and parked its slot: report
        the result it read, with no Kubernetes client and no API call; or (no result in the event, or one
        that does not check) re-attach and read it, logging only the lines the trigger did not."""
        from airflow_kruise_chain.triggers.event import MalformedEvent, logged, stage_end

        self.index_stage(context)
        if not isinstance(event, dict):
            # an end-from-trigger event's payload (its state), which only dag.test() resumes a task with:
            # the trigger has logged the whole output and parked; read the result again, logging no line
            self.log.info("::kruise-chain:: resumed with the trigger's %r: reading the pod", event)
            event = {"status": "finished", "logged": sys.maxsize}
        status = event.get("status")
        if status == "timeout":
            from airflow_kruise_chain.core.errors import StageTimeoutError

            self.driver(context).stop(self.stage_name)
            raise StageTimeoutError(f"stage {self.stage_name!r}: {event.get('message')}; stopped it")
        if status != "finished":
            raise ChainError(f"stage {self.stage_name!r}: {event.get('message') or status}")
        end = None
        if not (slot and generation):  # dag.test() resumes a task with the event alone, not its kwargs
            self.log.info(
                "::kruise-chain:: resumed without the deferral's slot and generation: reading the pod"
            )
        else:
            try:
                end = stage_end(event, stage=self.stage_name, slot=slot, generation=generation)
            except MalformedEvent as why:
                self.log.warning(
                    "::kruise-chain:: the trigger's event does not check (%s): reading the pod",
                    why,
                )
        if end is not None:
            return self.finish(context, self.report_end(context, end), pod_uid)
        driver = self.driver(context)
        plan = driver.swap(self.stage_spec(), context["ti"].try_number, self.timeouts())  # reattach
        # the stage ran while the task was deferred: no memory to sample now
        result = self.follow(
            context,
            driver,
            plan,
            sample_memory=False,
            skip=logged(event),
            ahead=self.ahead(),
            then=self.two_ahead(),
        )
        return self.finish(context, result, pod_uid)

    def report_end(self, context: Context, end: StageEnd) -> StageResult:
        """Log and publish the end the trigger read (the swap's state was published by the try that swapped).
        The trigger parked the slot and sized the next stage's ahead; when it could not (or an older trigger
        did not), that is done here, on a thread while the end is published, settled before the task
        returns."""
        park = None
        if not end.parked:
            record, ahead = end.record, self.ahead() if end.result.succeeded else None
            park = self.driver(context).start_park(
                self.stage_name, record.slot, record.generation, ahead=ahead, then=self.two_ahead()
            )
        try:
            self.log.info("%s", end.result.end_line())
            self.monitor(context, self.pod_name(context), end.record, sample_memory=False).ended(end.result)
        finally:
            if park is not None:
                park.settle()
        return end.result
