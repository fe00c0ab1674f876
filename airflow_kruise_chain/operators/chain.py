"""The operator of a chain's stages (one task per stage). The setup and teardown (`operators/pod.py`) and
prewarm (`operators/prewarm.py`) operators are importable from here too."""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_kruise_chain.config import (
    default_deferrable,
    defer_exit_hold,
    memory_sample_interval,
    memory_sample_max_interval,
)
from airflow_kruise_chain.core.errors import ChainConfigError, ChainError
from airflow_kruise_chain.core.spec import StageSpec, index_stage_name
from airflow_kruise_chain.links import ChainPodLink
from airflow_kruise_chain.operators.base import (
    ChainBaseOperator,
    check_defer_after,
    check_positive,
)
from airflow_kruise_chain.operators.pod import ChainSetupOperator, ChainTeardownOperator
from airflow_kruise_chain.operators.prewarm import ChainPrewarmOperator
from airflow_kruise_chain.templating import STAND_IN_IMAGE, templated, unwrap_literals

if TYPE_CHECKING:
    # Imported when a task runs, not when its DAG file is parsed (every task process parses it).
    from airflow_kruise_chain.core.chainstate import StageMonitor
    from airflow_kruise_chain.core.driver import StageDriver, Timeouts
    from airflow_kruise_chain.core.podview import ChainPod, StageRecord
    from airflow_kruise_chain.core.sizing import BackgroundPark
    from airflow_kruise_chain.core.status import StageResult
    from airflow_kruise_chain.core.swap import SwapPlan
    from airflow_kruise_chain.triggers.event import StageEnd

__all__ = [
    "ChainPrewarmOperator",
    "ChainSetupOperator",
    "ChainTeardownOperator",
    "KruiseChainOperator",
    "check_flag",
    "check_prepare_next",
]

ON_KILL_WAIT = 4.0
"""Seconds `on_kill` waits for the stopped stage's end: Airflow's task supervisor SIGKILLs the task process
5 s after its SIGTERM (task-sdk `supervisor.py` `WatchedSubprocess.kill`, `escalation_delay=5.0`, called
when the server says the task should not run any more, e.g. marked failed or success): on_kill says what
it saw before that, and the stop request stays with the pod whatever the task process does next."""
DELIVERED_KEY = "delivered_generation"
"""task_state_store key: the pod uid and generation whose success a try of this stage task delivered"""
FAILED_KEY = "failed_generation"
"""task_state_store key: the pod uid and generation whose failure a try of this stage task reported"""


class KruiseChainOperator(ChainBaseOperator):
    """Run one stage of a chain: swap it into the chain pod's idle slot and follow it to its result.

    The swap is one pod patch: the stage's annotations, with the slot's new image unless the slot already
    holds it (then the slot's runner starts the stage with no container restart). The stage's own output
    streams into the task log; its result (exit code, duration, image, slot, generation, declared outputs)
    is pushed to XCom; a non-zero exit fails the task with the exit code and the last log lines.
    A later try (a retry, or the try after a worker died) first looks at the stage's latest generation: still
    running -> it follows it; ended with exit 0 -> it adopts that result (same XCom) and runs nothing; failed,
    interrupted or never started -> it runs the stage again, in place, as a new generation. `on_kill` stops
    the running stage. Timeouts: `swap_timeout`, `pull_timeout` (image pull while swapping in),
    `stage_timeout` (the stage's run; it is stopped when it runs out). `deferrable`: a stage still running
    `defer_after` seconds after the swap (default: the trigger's hold, `deferral_delay`) is handed to
    `StageTrigger`, which logs its output live and, when the stage succeeds, ends the task itself from the
    triggerer (no second task start: `triggers/end.py`); otherwise the task resumes on a worker
    (`execute_complete`).

    `prepare_next` (default True): once its stage runs, the task gives the idle slot the image of the stage
    predicted to run next (`next_stage`), so that stage's swap is annotations only. Only an image patch: the
    prepared slot holds no generation, so a wrong prediction runs nothing; that stage's swap is then a
    normal one. Under in-place sizing, a stage that succeeded also sizes that stage's slot once its own is
    parked (`SlotSizer.size_ahead`), so that swap only says go. With `go_via_exec` too, a stage that
    succeeded also prepares its own slot for the stage after next (`stage_after_next`) when the next stage
    is to say go into the other slot (`core.swap.prepare_two_ahead`): the kubelet restarts it while the
    next task starts and runs, so the stage after next finds it ready. Not with a go by annotation only,
    which waits for the kubelet's sync of the pod, and that restart would hold the sync.

    `go_via_exec` (default True): a swap that is annotations only (a go) also hands its run spec to the
    slot's runner through `pods/exec` (`core/fastgo.py`), so the stage starts without waiting for the
    kubelet to rewrite the slot's downwardAPI volume. Needs `get` and `create` on `pods/exec`; refused or
    failed, the go goes by the annotation alone (the task log says so).
    """

    template_fields: Sequence[str] = (*ChainBaseOperator.template_fields, "image", "cmds", "arguments", "env")
    template_fields_renderers = {"env": "json", "cmds": "py", "arguments": "py"}
    ui_color = "#c9e4ff"
    operator_extra_links = (ChainPodLink(),)
    result_xcom_key = "return_value"
    """the XCom key of the stage's result (a TaskFlow stage's return value is its ``return_value``)"""

    def __init__(
        self,
        *,
        stage_name: str,
        image: str,
        cmds: Sequence[str],
        arguments: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        container_resources: dict[str, dict[str, str]] | None = None,
        image_pull_policy: str | None = None,
        swap_timeout: float = 600,
        stage_timeout: float | None = None,
        pull_timeout: float | None = None,
        env_sources: dict[str, dict[str, str]] | None = None,
        env_from: Sequence[dict[str, str]] = (),
        allow_secret_env: bool = False,
        deferrable: bool = default_deferrable(),
        defer_after: float | None = None,
        prepare_next: bool = True,
        go_via_exec: bool = True,
        skip_on_exit_code: int | Collection[int] | None = None,
        max_map_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_prepare_next(prepare_next)
        check_flag("go_via_exec", go_via_exec)
        check_defer_after(defer_after)
        check_positive("swap_timeout", swap_timeout)
        for field, limit in (("stage_timeout", stage_timeout), ("pull_timeout", pull_timeout)):
            if limit is not None:
                check_positive(field, limit)
        super().__init__(**kwargs)
        self.stage_name = stage_name
        self.prepare_next = prepare_next
        self.go_via_exec = go_via_exec
        self.image = image
        self.cmds = cmds
        self.arguments = arguments or []
        self.env = env or {}
        self.env_sources = env_sources or {}
        self.env_from = env_from
        self.allow_secret_env = allow_secret_env
        self.container_resources = container_resources or {}
        self.image_pull_policy = image_pull_policy
        self.swap_timeout = swap_timeout
        self.stage_timeout = stage_timeout
        self.pull_timeout = pull_timeout
        self._running: tuple[StageDriver, str] | None = None
        self.deferrable = deferrable
        self.defer_after = defer_after
        exit_codes(skip_on_exit_code)
        self.skip_on_exit_code = skip_on_exit_code
        self.max_map_length = max_map_length
        self.map_index = -1
        """the task instance's map index once it runs (a map index of a mapped stage: >= 0)"""
        # what is not templated fails at parse; the template fields are checked once rendered (`stage_spec`)
        StageSpec(
            name=stage_name,
            image=STAND_IN_IMAGE,
            cmds=("true",),
            resources=self.container_resources,
            image_pull_policy=image_pull_policy,
            env_sources=self.env_sources,
            env_from=env_from,
        ).validate("stage")

    def index_stage(self, context: Context) -> None:
        """A map index of a mapped stage runs as its own stage of the pod, `index_stage_name` (its record,
        generations and result its own); refused past `max_map_length` (what the pod's annotations were
        sized for)."""
        index = getattr(context["ti"], "map_index", -1)
        if index is None or index < 0 or self.map_index >= 0:
            return
        if self.max_map_length is not None and index >= self.max_map_length:
            raise AirflowFailException(
                f"map index {index} of stage {self.stage_name!r} is past its max_map_length "
                f"{self.max_map_length}: the chain pod records every map index, and was checked at parse for "
                f"{self.max_map_length} of them; raise max_map_length on the mapped stage (or map fewer)"
            )
        self.map_index = index
        self.stage_name = index_stage_name(self.stage_name, index)

    def stage_spec(self) -> StageSpec:
        """The stage as rendered, validated (ChainConfigError naming the field: ``stage.image``, ...). Before
        rendering (`KruiseChain` checks a stage at parse time), each `literal()` is unwrapped as rendering
        would."""
        spec = StageSpec(
            name=self.stage_name,
            image=unwrap_literals(self.image),
            cmds=unwrap_literals(self.cmds),
            arguments=unwrap_literals(self.arguments),
            env=unwrap_literals(self.env),
            resources=self.container_resources,
            image_pull_policy=self.image_pull_policy,
            env_sources=self.env_sources,
            env_from=self.env_from,
        )
        spec.validate("stage")
        return spec

    def check_env_holds_no_secret(self) -> None:
        """Refuse a rendered `env` value that Airflow's secrets masker knows (a connection's password, a
        secret Variable...): env travels in a pod annotation anyone who may `get` the pod can read, where
        Airflow's masking cannot reach. Its name, never its value, is in the message."""
        if self.allow_secret_env:
            return
        from airflow.sdk.log import redact

        for name, value in self.env.items():
            if isinstance(value, str) and redact(value) != value:
                raise ChainConfigError(
                    f"env[{name!r}]",
                    "holds a value Airflow's secrets masker knows (e.g. a connection's password), and env "
                    "travels in a pod annotation readable by anyone who may get the pod: read it from a "
                    "Kubernetes Secret instead (chain.stage(..., secrets=[Secret('env', NAME, SECRET, KEY)]) "
                    "or env={NAME: {'secretKeyRef': {'name': SECRET, 'key': KEY}}}; docs/credentials.md), "
                    "or set allow_secret_env=True on the stage to send it anyway",
                )

    def driver(self, context: Context) -> StageDriver:
        from airflow_kruise_chain.core.driver import StageDriver

        return StageDriver(self.hook, self.pod_name(context), self.namespace, log=self.log.info)

    def timeouts(self) -> Timeouts:
        from airflow_kruise_chain.core.driver import Timeouts

        return Timeouts(swap=self.swap_timeout, execution=self.stage_timeout, pull=self.pull_timeout)

    def execute(self, context: Context) -> dict[str, Any]:
        self.index_stage(context)
        self.check_env_holds_no_secret()
        stage = self.stage_spec()
        driver = self.driver(context)
        settle: list[Callable[[bool], None]] = []  # the fast go's wait (told whether the task failed)
        failed = False
        try:
            return self.run_stage(context, stage, driver, settle)
        except BaseException as e:
            failed = not isinstance(e, TaskDeferred)
            raise
        finally:  # the fast go's exec, delivered while the task follows the stage, outlives no task
            for wait in settle:
                wait(failed)

    def run_stage(
        self, context: Context, stage: StageSpec, driver: StageDriver, settle: list[Callable[[bool], None]]
    ) -> dict[str, Any]:
        """Swap the stage in, then follow it here or hand it to the triggerer (`deferrable`); the fast go's
        wait goes into `settle`."""
        try:
            pod = self.prepare_try(context, driver)
            pod_uid = pod.uid
            self._running = (driver, stage.name)
            plan = driver.swap(
                stage, context["ti"].try_number, self.timeouts(), pod=pod, on_go=self.fast_go(settle)
            )
            if plan.action == "adopt":
                self.replay(driver, plan)
            following = self.next_stage() if self.prepare_next and plan.action in ("go", "patch") else None
            then = self.two_ahead() if following is not None else None
            if following is not None:
                if self.deferrable or plan.action == "go":
                    driver.prepare(plan, *following)  # a go restarts nothing the prepare could slow down
                else:  # after the kubelet has started this stage's new container
                    driver.on_started = lambda: driver.prepare(plan, *following)
        finally:
            # the 'Chain pod' link once the swap is made, while the kubelet starts the stage (its XCom does
            # not hold up the swap); a task that fails before records it too
            self.pod_url(context)
        if self.deferrable and plan.action != "adopt":
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
                        stage=stage.name,
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
        result = self.follow(context, driver, plan, ahead=following, then=then)
        return self.finish(context, result, pod_uid)

    def fast_go(
        self, settle: list[Callable[[bool], None]]
    ) -> Callable[[SwapPlan], Callable[[bool], None] | None]:
        """The swap's `on_go` (`go_via_exec`): a go's exec opened while its patch is made
        (`fastgo.open_go`), its `settle` put in `settle` (the task follows the stage meanwhile)."""

        def on_go(plan: SwapPlan) -> Callable[[bool], None] | None:
            if not self.go_via_exec:
                return None
            from airflow_kruise_chain.core.fastgo import open_go

            go = open_go(self.hook, plan, self.log.info)
            if go is None:
                return None
            settle.append(go.settle)
            return go.decide

        return on_go

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

        if self.outlets or type(self).finish is not KruiseChainOperator.finish:
            return None
        return TaskEnd(self.chain_id, context["ti"].try_number, self.do_xcom_push).to_dict()

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

    def ahead(self) -> tuple[str, str] | None:
        """The next stage (`next_stage`), whose slot this stage's end sizes; None: prepare_next off."""
        return self.next_stage() if self.prepare_next else None

    def two_ahead(self) -> tuple[str, str] | None:
        """The stage after next (`stage_after_next`), for which this stage's successful end prepares its own
        slot (`core.driver.prepare_two_ahead`); None: prepare_next or go_via_exec off (a go by annotation
        waits for the kubelet's sync of the pod, which that slot's restart would hold)."""
        return self.stage_after_next() if self.prepare_next and self.go_via_exec else None

    def next_stage(self) -> tuple[str, str] | None:
        """(name, image) of the stage predicted to run after this one: of the chain's stages that follow
        this task (directly, or through tasks that are not stages, e.g. a branch), the first declared; None
        when there is none or its image is templated (only known once that task renders it), or when this
        is a map index (the next to run is most likely another index, in the slot it is about to free)."""
        if self.map_index >= 0:
            return None
        return stage_and_image(self.following_stage())

    def stage_after_next(self) -> tuple[str, str] | None:
        """(name, image) of the stage predicted to run after the next one (`next_stage`'s rule applied to
        that stage); None when either is unknown (none, its image templated, a mapped stage)."""
        following = self.following_stage()
        if stage_and_image(following) is None or not isinstance(following, KruiseChainOperator):
            return None
        return following.next_stage()

    def following_stage(self) -> Any:
        """The stage task predicted to run after this one (see `next_stage`; a mapped stage's
        `MappedOperator`), None when there is none."""
        if not self.has_dag():
            return None
        seen: set[str] = set()
        found: set[str] = set()
        todo = list(self.downstream_list)
        while todo:
            task = todo.pop()
            if task.task_id in seen:
                continue
            seen.add(task.task_id)
            if is_stage_task(task):
                if stage_option(task, "chain_id") == self.chain_id:
                    found.add(task.task_id)
                continue
            if not isinstance(task, ChainTeardownOperator):
                todo.extend(task.downstream_list)
        return next((t for t in self.dag.tasks if t.task_id in found), None)

    def chain_predecessors(self) -> list[str]:
        """The stages of this chain that this stage directly depends on (none outside a DAG): a mapped
        stage by its first map index's name."""
        if not self.has_dag():
            return []
        return sorted(
            stage_option(task, "stage_name")
            if isinstance(task, KruiseChainOperator)
            else index_stage_name(stage_option(task, "stage_name"), 0)
            for task in self.upstream_list
            if is_stage_task(task) and stage_option(task, "chain_id") == self.chain_id
        )

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

    def on_kill(self) -> None:
        """Airflow kills the task (marked failed or success or cleared, execution_timeout): stop the running
        stage, waiting for its end at most `ON_KILL_WAIT` seconds. Runs in Airflow's SIGTERM handler, inside
        whatever the task was doing: it logs a failure to follow the stop (the stop request is made first)
        rather than raise it there."""
        if self._running is not None:
            driver, stage = self._running
            try:
                driver.stop(stage, timeout=ON_KILL_WAIT)
            except Exception as err:  # e.g. the teardown deleted the pod meanwhile: never raise in a handler
                self.log.warning("::kruise-chain:: could not follow the stop of stage %r: %s", stage, err)

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
        parks: list[BackgroundPark] = []
        # park as soon as the result is read, while the monitor publishes the end; parked before returning
        monitor.on_end = lambda result: parks.append(
            driver.start_park(
                plan.stage,
                plan.slot,
                plan.generation,
                ahead=ahead if result.succeeded else None,
                then=then if result.succeeded else None,
            )
        )
        try:
            with monitor.sampling():
                result = driver.follow(plan, self.timeouts(), skip=skip, detach_at=detach_at, events=monitor)
        except BaseException:
            for park in parks:
                park.settle()
            raise
        for park in parks:
            settle_after_result(park, self.log.warning)
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


def settle_after_result(park: BackgroundPark, warn: Callable[[str], None]) -> None:
    """Let `park` (the work a stage's end starts for the next stages: park its slot, size the next stage's
    ahead, prepare two ahead) finish after the task has reported its result, off the path from the stage's
    end to the next task's start (issue 40). Airflow's task process is forked by its supervisor, reports its
    result before it exits, and at its exit runs the `atexit` handlers registered since the fork (task-sdk
    `_fork_main`): the park settles there, its lines still in the task log, a failure logged (the next swap
    parks and sizes what was left undone; every step is guarded by the pod's resourceVersion, so the next
    task's swap never plans from a stale pod). Anywhere else (`dag.test()`, a direct call: the process goes
    on) a thread of its own settles it, which the interpreter waits for at its exit."""

    def settle() -> None:
        try:
            park.settle()
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


def is_stage_task(task: Any) -> bool:
    """Whether `task` is a chain stage: a `KruiseChainOperator`, or the `MappedOperator` of a mapped one
    (classic or TaskFlow)."""
    if isinstance(task, KruiseChainOperator):
        return True
    cls = getattr(task, "operator_class", None)
    return isinstance(cls, type) and issubclass(cls, KruiseChainOperator)


def stage_option(task: Any, name: str) -> Any:
    """A stage task's `name` (`chain_id`, `stage_name`, `image`...): the operator's, or the mapped one's
    partial argument (None when it is expanded)."""
    if isinstance(task, KruiseChainOperator):
        return getattr(task, name)
    kwargs = task.partial_kwargs
    if name == "chain_id":
        return kwargs.get("chain_path") or kwargs.get("chain_name")
    return kwargs.get(name)


def stage_and_image(task: Any) -> tuple[str, str] | None:
    """(stage name, image) of a stage task, None when there is none or its image is not known before it
    runs (templated, or expanded per map index)."""
    if task is None:
        return None
    image = stage_option(task, "image")
    if not isinstance(image, str) or templated(image):
        return None
    return stage_option(task, "stage_name"), image


def exit_codes(value: Any) -> frozenset[int]:
    """KubernetesPodOperator's `skip_on_exit_code` (an int, a collection of ints or None) as a set; a
    ChainConfigError names it otherwise."""
    codes = () if value is None else (value,) if isinstance(value, int) else value
    if isinstance(codes, (str, bytes)) or not all(
        isinstance(code, int) and not isinstance(code, bool) for code in codes
    ):
        raise ChainConfigError("skip_on_exit_code", f"must be an exit code or a list of them, not {value!r}")
    return frozenset(codes)


def check_prepare_next(value: Any) -> None:
    check_flag("prepare_next", value)


def check_flag(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ChainConfigError(field, f"must be True or False, not {value!r}")
