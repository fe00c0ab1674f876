"""`HotSwapSensor`: wait until a chain stage's swap reaches a state (running or finished)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context

from airflow_kruise_chain.config import default_deferrable, defer_exit_hold
from airflow_kruise_chain.core.errors import ChainConfigError, ChainError
from airflow_kruise_chain.core.status import confirm_from_log, current_status, needs_log
from airflow_kruise_chain.operators.base import ChainBaseOperator
from airflow_kruise_chain.triggers.chain import FAILED, LOG_TAIL, TARGETS, StageTrigger, reached


class HotSwapSensor(ChainBaseOperator, BaseSensorOperator):
    """Wait until `stage` of the chain `chain_name` is `target_state` ("running" or "finished").

    Declared inside the chain's `KruiseChain` block, it follows that chain; elsewhere, a chain inside a task
    group is named by its full path too: `chain_path="group.etl"`.

    Poke mode reads the chain pod once per poke; `deferrable=True` hands the wait to `StageTrigger`, which
    watches the pod in the triggerer (its event held as a deferred stage's is, see `defer_exit_hold`). Fails
    at once when the stage cannot start or the pod is lost. `stage` is templated: checked once rendered (in
    a `KruiseChain` block, at parse time too: it must name one of the chain's stages).
    """

    template_fields: Sequence[str] = (*ChainBaseOperator.template_fields, "stage")

    def __init__(
        self,
        *,
        stage: str,
        target_state: str = "finished",
        deferrable: bool = default_deferrable(),
        **kwargs: Any,
    ) -> None:
        if target_state not in TARGETS:
            raise ChainConfigError("target_state", f"must be one of {sorted(TARGETS)}, not {target_state!r}")
        super().__init__(**kwargs)
        self.stage = stage
        self.target_state = target_state
        self.deferrable = deferrable

    def execute(self, context: Context) -> Any:
        check_stage_name(self.stage)
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(
            trigger=StageTrigger(
                pod_name=self.pod_name(context),
                namespace=self.namespace,
                stage=self.stage,
                target=self.target_state,
                timeout=float(self.timeout),
                connection=self.connection,
                fire_after=time.time() + defer_exit_hold(),  # apache/airflow#72716
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)),
        )
        return None

    def poke(self, context: Context) -> bool:
        check_stage_name(self.stage)
        name = self.pod_name(context)
        pod = self.hook.read_pod(name, self.namespace)
        status = current_status(pod, self.stage)
        if needs_log(status) and status.slot:
            text = self.hook.read_log(name, self.namespace, status.slot, tail_lines=LOG_TAIL)
            status = confirm_from_log(pod, status, text.splitlines())
        if status.state in FAILED:
            raise ChainError(f"stage {self.stage!r} {status.state}: {status.reason} {status.message}".strip())
        self.log.info("stage %s is %s (waiting for %s)", self.stage, status.state, self.target_state)
        return reached(status.state, self.target_state)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        if event.get("status") != self.target_state:
            raise ChainError(event.get("message") or f"stage {self.stage!r}: {event}")
        self.log.info("stage %s reached %s", self.stage, self.target_state)


def check_stage_name(stage: Any) -> None:
    """ChainConfigError naming `stage` unless it is a stage's name (a non-empty string)."""
    if not stage or not isinstance(stage, str):
        raise ChainConfigError("stage", f"is required: the name of a chain stage to wait for, not {stage!r}")
