"""The result and XCom part of `KruiseChainOperator` (`operators/chain.py`): follow the stage to its end with
its `chain_state` monitor, report the result (`return_value`, the task's failure or skip), remember what a
try delivered or failed (`task_state_store`), and let the work the end starts settle after the result."""

from __future__ import annotations

import atexit
import signal
import threading
from collections.abc import Callable
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context

from airflow_kruise_chain.config import memory_sample_interval, memory_sample_max_interval
from airflow_kruise_chain.core.errors import ChainConfigError, ChainError

if TYPE_CHECKING:
    from airflow_kruise_chain.core.chainstate import StageMonitor
    from airflow_kruise_chain.core.driver import StageDriver
    from airflow_kruise_chain.core.podview import StageRecord
    from airflow_kruise_chain.core.sizing import BackgroundPark
    from airflow_kruise_chain.core.status import StageResult
    from airflow_kruise_chain.core.swap import SwapPlan

DELIVERED_KEY = "delivered_generation"
"""task_state_store key: the pod uid and generation whose success a try of this stage task delivered"""
FAILED_KEY = "failed_generation"
"""task_state_store key: the pod uid and generation whose failure a try of this stage task reported"""


class StageResults:
    """`KruiseChainOperator`'s following of its stage and report of the result (a part of that class)."""

    def monitor(
        self,
        context: Context,
        pod_name: str,
        record: StageRecord,
        *,
        swapped_now: bool = False,
        sample_memory: bool = True,
    ) -> StageMonitor:
        """The monitor of `record`'s generation (the driver's events: pull and memory log markers, and the
        `chain_state` XCom)."""
        from airflow_kruise_chain.core.chainstate import XCOM_KEY as XCOM_CHAIN_STATE
        from airflow_kruise_chain.core.chainstate import StageMonitor, StageTrack

        ti = context["ti"]
        monitor = StageMonitor(
            StageTrack(
                chain=self.chain_id,
                namespace=self.namespace,
                pod=pod_name,
                stage=self.stage_name,
                slot=record.slot,
                generation=record.generation,
                image=record.image,
                try_number=ti.try_number,
                action=record.action,
                # a swap made now is timed by the monitor; an earlier one keeps its record's (whole seconds)
                swapped_at=None if swapped_now else record.swapped_at,
            ),
            publish=lambda state: ti.xcom_push(key=XCOM_CHAIN_STATE, value=state),
            read_metrics=lambda: self.hook.pod_metrics(pod_name, self.namespace),
            log=self.log.info,
            interval=memory_sample_interval() if sample_memory else 0,
            max_interval=memory_sample_max_interval(),
        )
        return monitor

    def follow(
        self,
        context: Context,
        driver: StageDriver,
        plan: SwapPlan,
        *,
        sample_memory: bool = True,
        skip: int = 0,
        detach_at: float | None = None,
        ahead: tuple[str, str] | None = None,
        then: tuple[str, str] | None = None,
    ) -> Any:
        """`driver.follow` with monitoring (see `monitor`); `skip` and `detach_at` as there: returns the
        `StageResult`, or `Detached` with the stage still running. At the stage's end its slot is parked
        and, when it succeeded, the slot of `ahead` (the next stage's (name, image)) sized for it and the
        ended slot prepared for `then` (the stage after next), see `StageDriver.start_park`."""
        monitor = self.monitor(
            context,
            driver.pod_name,
            plan.record,
            swapped_now=plan.action in ("patch", "go"),
            sample_memory=sample_memory,
        )
        parks: list[Callable[[], BackgroundPark]] = []  # each starts its park, once
        forked = _forked_task_process()

        def on_end(result: StageResult) -> None:
            start = cache(
                partial(
                    driver.start_park,
                    plan.stage,
                    plan.slot,
                    plan.generation,
                    ahead=ahead if result.succeeded else None,
                    then=then if result.succeeded else None,
                )
            )
            if not forked:  # as soon as the result is read, while the monitor publishes the end
                start()
            parks.append(start)  # a forked task process starts it at its exit (`settle_after_result`)

        monitor.on_end = on_end
        try:
            with monitor.sampling():
                result = driver.follow(plan, self.timeouts(), skip=skip, detach_at=detach_at, events=monitor)
        except BaseException:
            for start in parks:
                start().settle()
            raise
        for start in parks:
            settle_after_result(start, self.log.warning)
        return result

    def remember_failure(self, context: Context, result: Any, pod_uid: str) -> None:
        """Record in `task_state_store` that this try failed with `result`'s generation: a retry runs the
        stage again, also when its slot has run other stages since (a map index, a parallel branch) and the
        slot's log no longer shows that result."""
        store = context.get("task_state_store")
        if store is not None and pod_uid:
            store.set(FAILED_KEY, {"pod_uid": pod_uid, "generation": result.generation})

    def finish(self, context: Context, result: Any, pod_uid: str = "") -> dict[str, Any]:
        """Report `result`: returned (Airflow pushes it as `return_value`), or, when the stage failed or
        the task does not push its return value, pushed here (a failed task returns nothing)."""
        data = result.to_xcom()
        if not result.succeeded or not self.do_xcom_push or self.result_xcom_key != "return_value":
            context["ti"].xcom_push(key=self.result_xcom_key, value=data)
        self.log.info("%s", result.exit_line())
        if not result.succeeded and result.exit_code in exit_codes(self.skip_on_exit_code):
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(
                f"stage {self.stage_name!r} exited with {result.exit_code}, one of skip_on_exit_code"
            )
        store = context.get("task_state_store")
        if not result.succeeded:
            self.remember_failure(context, result, pod_uid)
            tail = "\n".join(result.log_tail[-10:]) or "(none: the stage printed nothing)"
            detail = f": {result.detail}" if result.detail else ""
            raise ChainError(
                f"stage {self.stage_name!r} failed with exit code {result.exit_code}"
                f"{_exit_detail(result.exit_code, result.reason)}{detail}; last lines:\n{tail}"
            )
        if store is not None and pod_uid:  # delivered: a later try of this task is a clear, not a retry
            store.set(DELIVERED_KEY, {"pod_uid": pod_uid, "generation": result.generation})
        return data


def settle_after_result(start: Callable[[], BackgroundPark], warn: Callable[[str], None]) -> None:
    """Let the park `start` gives (the work a stage's end starts for the next stages: park its slot, size the
    next stage's ahead, prepare two ahead) run after the task has reported its result, off the path from the
    stage's end to the next task's start (issue 40). Airflow's task process is forked by its supervisor,
    reports its result before it exits, and at its exit runs the `atexit` handlers registered since the fork
    (task-sdk `_fork_main`): the park starts and settles there, after the task's records of the stage's end
    (its `chain_state`, the delivered mark) and its success, which its requests would otherwise slow; its
    lines still in the task log, a failure logged (the next swap parks and sizes what was left undone; every
    step is guarded by the pod's resourceVersion, so the next task's swap never plans from a stale pod).
    Anywhere else (`dag.test()`, a direct call: the process goes on, and the next task may start at once) the
    park was started at the stage's end and a thread of its own settles it, which the interpreter waits for
    at its exit."""

    def settle() -> None:
        try:
            start().settle()
        except Exception as err:  # ahead-of-time work: never raised after the result
            warn(f"::kruise-chain:: the work after the stage's end did not finish: {err}")

    if _forked_task_process():
        atexit.register(settle)
    else:
        threading.Thread(target=settle, name="settle-park", daemon=False).start()


def _forked_task_process() -> bool:
    """Whether this is a task process Airflow's supervisor forked (`task_runner.main` talks to it over a
    socket, and its exit runs the atexit handlers registered since the fork)."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.comms import CommsDecoder
    except ImportError:
        return False
    return isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), CommsDecoder) and hasattr(
        atexit, "_clear"
    )


def _exit_detail(exit_code: int, reason: str) -> str:
    """' (reason; killed by SIGNAME)': the runner's reason for a stage's exit, and the signal of 128+N."""
    notes = [reason] if reason not in ("", "completed") else []
    if 128 < exit_code <= 128 + 64:
        try:
            notes.append(f"killed by {signal.Signals(exit_code - 128).name}")
        except ValueError:
            notes.append(f"killed by signal {exit_code - 128}")
    return f" ({'; '.join(notes)})" if notes else ""


def exit_codes(value: Any) -> frozenset[int]:
    """KubernetesPodOperator's `skip_on_exit_code` (an int, a collection of ints or None) as a set; a
    ChainConfigError names it otherwise."""
    codes = () if value is None else (value,) if isinstance(value, int) else value
    if isinstance(codes, (str, bytes)) or not all(
        isinstance(code, int) and not isinstance(code, bool) for code in codes
    ):
        raise ChainConfigError("skip_on_exit_code", f"must be an exit code or a list of them, not {value!r}")
    return frozenset(codes)
