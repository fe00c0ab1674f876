"""The operator of a chain's stages (one task per stage): its swap, its fast go and the prepare of the next
stages, and its place in the chain's graph; its result and XComs (`operators/stage_result.py`), its deferral
(`operators/stage_defer.py`) and what a try finds before its swap (`operators/stage_try.py`) are parts of it
kept in modules of their own. The setup and teardown (`operators/pod.py`) and prewarm
(`operators/prewarm.py`) operators are importable from here too."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowFailException, TaskDeferred

from airflow_kruise_chain.config import default_deferrable
from airflow_kruise_chain.core.errors import ChainConfigError
from airflow_kruise_chain.core.spec import StageSpec, index_stage_name
from airflow_kruise_chain.links import ChainPodLink
from airflow_kruise_chain.operators.base import (
    ChainBaseOperator,
    check_defer_after,
    check_positive,
)
from airflow_kruise_chain.operators.pod import ChainSetupOperator, ChainTeardownOperator
from airflow_kruise_chain.operators.prewarm import ChainPrewarmOperator
from airflow_kruise_chain.operators.stage_defer import StageDeferral
from airflow_kruise_chain.operators.stage_result import StageResults, exit_codes
from airflow_kruise_chain.operators.stage_try import StageTries
from airflow_kruise_chain.templating import STAND_IN_IMAGE, templated, unwrap_literals

if TYPE_CHECKING:
    # Imported when a task runs, not when its DAG file is parsed (every task process parses it).
    from airflow_kruise_chain.core.driver import StageDriver, Timeouts
    from airflow_kruise_chain.core.swap import SwapPlan

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


class KruiseChainOperator(StageTries, StageDeferral, StageResults, ChainBaseOperator):
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
                stage, context["ti"].try_number, self.timeouts(), pod=pod, on_go=self.fast_go(settle, driver)
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
            return self.follow_or_defer(context, driver, plan, pod_uid, following, then)
        result = self.follow(context, driver, plan, ahead=following, then=then)
        return self.finish(context, result, pod_uid)

    def fast_go(
        self, settle: list[Callable[[bool], None]], driver: StageDriver | None = None
    ) -> Callable[[SwapPlan], Callable[[bool], None] | None]:
        """The swap's `on_go` (`go_via_exec`): a go's exec opened while its patch is made
        (`fastgo.open_go`), its `settle` put in `settle` (the task follows the stage meanwhile); it waits
        for the generation's end (`fastgo.CAPTURE_WAIT`), and `driver` may take its capture instead of the
        log (`FollowLoop.capture_go`)."""

        def on_go(plan: SwapPlan) -> Callable[[bool], None] | None:
            if not self.go_via_exec:
                return None
            from airflow_kruise_chain.core.fastgo import CAPTURE_WAIT, open_go

            go = open_go(self.hook, plan, self.log.info, CAPTURE_WAIT)
            if go is None:
                return None
            settle.append(go.settle)
            if driver is not None:
                driver.capture_go = go
            return go.decide

        return on_go

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


def check_prepare_next(value: Any) -> None:
    check_flag("prepare_next", value)


def check_flag(field: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ChainConfigError(field, f"must be True or False, not {value!r}")
