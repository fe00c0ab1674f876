"""`KruiseChain`: the DAG-author API. One persistent pod, one task per stage, setup/prewarm/teardown."""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import Any

from airflow.sdk import TaskGroup, TriggerRule

from airflow_kruise_chain import kpo
from airflow_kruise_chain.config import default_deferrable
from airflow_kruise_chain.connection import KubeConnection
from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec, sources
from airflow_kruise_chain.core.manifest import check_annotations_size, deep_merge
from airflow_kruise_chain.core.spec import check_name
from airflow_kruise_chain.decorators.kruise_chain import ACTIVE_CHAINS, chain_task, stage_name_of
from airflow_kruise_chain.mapped import MappedStage, literal_images
from airflow_kruise_chain.operators.base import ChainBaseOperator, check_defer_after, check_positive
from airflow_kruise_chain.operators.chain import (
    ChainPrewarmOperator,
    KruiseChainOperator,
    check_flag,
    check_prepare_next,
)
from airflow_kruise_chain.operators.pod import ChainSetupOperator, ChainTeardownOperator
from airflow_kruise_chain.templating import (
    STAND_IN_IMAGE,
    STAND_IN_WORD,
    check_renderable,
    largest_payloads,
    resolved_later,
    run_level,
    stand_in,
    templated,
    unwrap_literals,
    validatable,
    validatable_stage,
)

CHAIN_TASKS = ("setup", "prewarm", "teardown")
"""Task ids of a chain's own tasks: no stage may take them."""

_POD_OPTIONS = (
    "scratch_size_limit",
    "node_selector",
    "tolerations",
    "affinity",
    "service_account_name",
    "image_pull_secrets",
    "security_context",
    "pod_template",
    "labels",
    "annotations",
    "sizing",
    "parked_resources",
    "runner_image",
    "pod_security",
    "automount_service_account_token",
    "volumes",
)


class StageDeclaration:
    """`KruiseChain.stage`: ``chain.stage(name, ...)`` declares a stage, ``chain.stage.partial(name, ...)``
    a mapped one (`.expand(...)` / `.expand_kwargs(...)`, see `mapped.py`)."""

    def __init__(self, declare: Callable[..., KruiseChainOperator]) -> None:
        self.declare = declare
        update_wrapper(self, declare)

    def __get__(self, chain: KruiseChain | None, owner: type | None = None) -> Any:
        return self.declare if chain is None else BoundStage(chain, self.declare)


class BoundStage:
    """A chain's `stage` (see `StageDeclaration`)."""

    def __init__(self, chain: KruiseChain, declare: Callable[..., KruiseChainOperator]) -> None:
        self.chain = chain
        self.declare = declare
        update_wrapper(self, declare)

    def __call__(self, name: str | None = None, /, **kwargs: Any) -> KruiseChainOperator:
        return self.declare(self.chain, name, **kwargs)

    def partial(self, name: str | None = None, /, **kwargs: Any) -> MappedStage:
        """A mapped stage: what every map index shares (`chain.stage`'s options, `max_map_length`); its
        `expand(...)` / `expand_kwargs(...)` give the rest."""
        task_id, stage_name = self.chain.naming(name, kwargs)
        return MappedStage(self.chain, task_id, stage_name, kwargs)


class KruiseChain:
    """A chain of stages sharing one persistent pod, used as a context manager inside a DAG::

        with KruiseChain("etl", namespace="data", prewarm=True) as chain:
            extract = chain.stage("extract", image="acme/extract:1.4", cmds=["extract.sh"])
            load = chain.stage("load", image="acme/load:1.1", cmds=["load.sh"])
            extract >> load

    Creates a task group named after the chain with a `setup` task (creates the pod; an Airflow setup task),
    a `prewarm` task (ImagePullJobs for every stage image on the pod's node) unless `prewarm=False`, one
    `KruiseChainOperator` per stage, and a `teardown` task (an Airflow teardown: deletes the pod even when a
    stage or the setup failed, unless `keep_pod=True`). Any other task declared inside the block (a
    `HotSwapSensor`, a task using the stages' results) also runs after `setup` and before `teardown`.
    `prepare_next` (default True): while a stage runs, its task gives the idle slot the image of the stage
    predicted to run next, and (with `go_via_exec`) a stage that succeeded gives its own slot the image of
    the stage after next (see `KruiseChainOperator`). `go_via_exec` (default True): a stage whose image is
    already in its slot is also handed to the slot's runner through `pods/exec`, so it starts without waiting
    for the kubelet's volume refresh (`KruiseChainOperator`). `deferrable`, `defer_after`, `prepare_next`
    and `go_via_exec` are the stages' defaults; `chain.stage(...)` may override each. Definitions are
    validated when the DAG is parsed.
    """

    def __init__(
        self,
        name: str,
        namespace: str | None = None,
        *,
        prewarm: bool = True,
        on_prewarm_unavailable: str = "fail",
        keep_pod: bool | str = False,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        deferrable: bool = default_deferrable(),
        defer_after: float | None = None,
        swap_timeout: float = 600,
        startup_timeout: float = 300,
        pull_timeout: int = 600,
        prepare_next: bool = True,
        go_via_exec: bool = True,
        **pod_options: Any,
    ) -> None:
        self.kpo_given = {k: v for k, v in pod_options.items() if k in kpo.ARGUMENTS}
        pod_options = kpo.chain_arguments(pod_options, namespace)  # KubernetesPodOperator's names, models
        keep_pod = _one("keep_pod", keep_pod, pod_options.pop("keep_pod", keep_pod))
        if "startup_timeout" in pod_options:  # KPO's: the pod's start, then its scheduling as long again
            seconds = pod_options.pop("startup_timeout")
            startup_timeout = seconds + pod_options.pop("schedule_timeout", seconds)
        elif "schedule_timeout" in pod_options:
            startup_timeout += pod_options.pop("schedule_timeout")
        if "pod_template_file" in pod_options:
            found = kpo.read_pod_template_file(pod_options.pop("pod_template_file"), _template_searchpath())
            pod = kpo.pod_template_of(found, "pod_template_file", namespace)
            pod_options["pod_template"] = deep_merge(pod, pod_options.get("pod_template") or {})
        unknown = set(pod_options) - set(_POD_OPTIONS)
        if unknown:
            raise ChainConfigError(
                sorted(unknown)[0],
                f"unknown chain option; choose from {', '.join(_POD_OPTIONS)} or KubernetesPodOperator's "
                "(docs/writing-chains.md)",
            )
        if keep_pod not in (True, False, "on_failure"):
            raise ChainConfigError("keep_pod", f"must be True, False or 'on_failure', not {keep_pod!r}")
        if not namespace:
            raise ChainConfigError(
                "namespace",
                "is required: the Kubernetes namespace the chain pod runs in "
                "(e.g. KruiseChain('etl', namespace='data'))",
            )
        check_prepare_next(prepare_next)
        check_flag("go_via_exec", go_via_exec)
        check_defer_after(defer_after)
        if on_prewarm_unavailable not in ("fail", "skip"):
            raise ChainConfigError("on_prewarm_unavailable", "must be 'fail' or 'skip'")
        for field, value in (
            ("swap_timeout", swap_timeout),
            ("startup_timeout", startup_timeout),
            ("pull_timeout", pull_timeout),
        ):
            check_positive(field, value)
        self.name = name
        self.namespace = namespace
        self.prewarm = prewarm
        self.on_prewarm_unavailable = on_prewarm_unavailable
        self.keep_pod = keep_pod
        self.deferrable = deferrable
        self.defer_after = defer_after
        self.prepare_next = prepare_next
        self.go_via_exec = go_via_exec
        self.swap_timeout = swap_timeout
        self.startup_timeout = startup_timeout
        self.pull_timeout = pull_timeout
        self.pod_options = pod_options
        self.connection = KubeConnection(kubernetes_conn_id, config_file, cluster_context, in_cluster)
        self.stages: list[StageSpec] = []
        self.stage_tasks: list[KruiseChainOperator] = []
        self.payload_later: set[str] = set()
        """stages whose arguments are only known when they run (TaskFlow and mapped stages)"""
        self.mapped_images: dict[str, list[str]] = {}
        """mapped stage -> the images of its literal map indexes"""
        ChainSpec(
            name=name,
            namespace=namespace,
            stages=[StageSpec("probe", "busybox:1.36", ["true"])],
            **pod_options,
        ).validate()  # chain-level fields fail here, at parse time
        self._group: TaskGroup | None = None
        self.setup_task: ChainSetupOperator | None = None
        self.prewarm_task: ChainPrewarmOperator | None = None
        self.teardown_task: ChainTeardownOperator | None = None

    @property
    def path(self) -> str:
        """The chain's full task-group path (``outer.etl``): what tells two chains of one name apart (their
        pods, labels and records); its name for a chain outside any task group."""
        if self._group is None:
            raise ChainConfigError("path", "is known inside `with KruiseChain(...) as chain:` only")
        return self._group.group_id or self.name

    def spec(self) -> ChainSpec:
        return ChainSpec(
            name=self.name,
            namespace=self.namespace,
            stages=self.stages,
            keep_pod=self.keep_pod is True,
            **self.pod_options,
        )

    def option(self, name: str) -> Any:
        """The chain's value of its option `name` (what a stage's chain-wide argument must say)."""
        if name in KubeConnection.__dataclass_fields__:
            return getattr(self.connection, name)
        if name in self.pod_options:
            return self.pod_options[name]
        if name not in ChainSpec.__dataclass_fields__ or name in ("name", "namespace", "keep_pod"):
            return getattr(self, name, None)
        default = ChainSpec.__dataclass_fields__[name]
        return default.default_factory() if callable(default.default_factory) else default.default

    def __enter__(self) -> KruiseChain:
        _check_not_in_mapped_group(self.name)
        self._group = TaskGroup(group_id=self.name, tooltip=f"chain {self.name}: one persistent pod")
        self._group.__enter__()
        ACTIVE_CHAINS.append(self)
        try:
            self.setup_task = ChainSetupOperator(
                task_id="setup",
                chain={"name": self.name, "namespace": self.namespace, "stages": []},
                startup_timeout=self.startup_timeout,
                chain_path=self.path,
                **self.connection.to_dict(),
            )
            if self.prewarm:
                self.prewarm_task = ChainPrewarmOperator(
                    task_id="prewarm",
                    chain_name=self.name,
                    namespace=self.namespace,
                    on_unavailable=self.on_prewarm_unavailable,
                    pull_timeout=self.pull_timeout,
                    **self.connection.to_dict(),
                )
                self.setup_task >> self.prewarm_task
        except BaseException as err:  # leave no task group open behind a refused chain
            ACTIVE_CHAINS.remove(self)
            self._group.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def naming(self, name: str | None, kwargs: dict[str, Any]) -> tuple[str, str]:
        """(task id, stage name) of a stage declared as ``chain.stage(NAME, ...)`` or as KubernetesPodOperator
        tasks are, ``chain.stage(task_id=..., name=...)`` (both popped from `kwargs`): the task id is
        `task_id` or NAME; the stage's name in the pod is KPO's `name`, else the task id, made a DNS label as
        KPO makes a pod's name (``write_xcom`` runs as stage ``write-xcom``)."""
        where = f"stages[{len(self.stages)}]"
        task_id, pod_name = kwargs.pop("task_id", None), kwargs.pop("name", None)
        if name is not None and task_id is not None and name != task_id:
            raise ChainConfigError(
                f"{where}.task_id",
                f"the stage is named {name!r} and given task_id={task_id!r}: give one",
            )
        task_id = task_id if task_id is not None else name if name is not None else pod_name
        if not isinstance(task_id, str) or not task_id:
            raise ChainConfigError(
                f"{where}.task_id",
                "is required: name the stage, chain.stage('extract', ...) (or task_id='extract', as for "
                "KubernetesPodOperator)",
            )
        named = pod_name if isinstance(pod_name, str) and pod_name else task_id
        return task_id, stage_name_of(named) or named

    def stage(
        self,
        name: str | None = None,
        /,
        *,
        image: str | None = None,
        cmds: list[str] | None = None,
        arguments: list[str] | None = None,
        env: dict[str, Any] | None = None,
        resources: dict[str, dict[str, str]] | None = None,
        image_pull_policy: str | None = None,
        secrets: list[Any] | None = None,
        env_from: list[dict[str, Any]] | None = None,
        volume_mounts: list[dict[str, Any]] | None = None,
        **operator_kwargs: Any,
    ) -> KruiseChainOperator:
        """Declare a stage (a `KruiseChainOperator` task called `name`, or as KubernetesPodOperator tasks are
        declared, ``task_id=...`` and the pod's ``name=...``: see `naming`); validated now, at parse time.

        Credentials and config come from Kubernetes Secrets and ConfigMaps, never as `env` values: `env`
        values may be ``{"secretKeyRef": {"name", "key"}}`` or ``{"configMapKeyRef": ...}``, `secrets` takes
        cncf.kubernetes' ``Secret("env", NAME, secret, key)``, `env_from` ``{"secretRef": {"name"}}`` or
        ``{"configMapRef": ...}`` (see `core/sources.py`). KubernetesPodOperator's arguments are taken
        with its meaning, or refused naming the counterpart (`kpo.py`; docs/writing-chains.md)."""
        task_id, stage_name = self.naming(name, operator_kwargs)
        where = self.where(stage_name)
        kpo.refuse_xcom_file(where, operator_kwargs)
        if cmds is None:
            raise ChainConfigError(
                f"{where}.cmds",
                "is required: the image's ENTRYPOINT is not used (the stage runner is the slot's command); "
                "give the command to run, e.g. cmds=['python', 'main.py']",
            )
        kwargs = self.stage_kwargs(
            where,
            image=image,
            cmds=cmds,
            arguments=arguments,
            env=env,
            resources=resources,
            image_pull_policy=image_pull_policy,
            secrets=secrets,
            env_from=env_from,
            volume_mounts=volume_mounts,
            **operator_kwargs,
        )
        mounts = kwargs.pop("volume_mounts")
        try:
            task = KruiseChainOperator(task_id=task_id, stage_name=stage_name, **kwargs)
        except ChainConfigError as err:
            raise ChainConfigError(_stage_field(where, err.field), err.message) from None
        self.add_stage(task, where, mounts)
        return task

    stage = StageDeclaration(stage)  # chain.stage.partial(...) too

    def where(self, name: str) -> str:
        """``stages[i]`` of a new stage called `name`, after the checks of its name."""
        if self._group is None or self not in ACTIVE_CHAINS:
            raise ChainConfigError(
                "stage",
                f"declare {name!r} and the other stages of chain {self.name!r} inside `with KruiseChain(...) "
                "as chain:` (when the block ends, the chain's pod is defined)",
            )
        where = f"stages[{len(self.stages)}]"
        if name in CHAIN_TASKS:
            raise ChainConfigError(
                f"{where}.name",
                f"{name!r} is the task id of the chain's own {name} task: give the stage another name",
            )
        check_name(f"{where}.name", name)
        if any(s.name == name for s in self.stages):
            raise ChainConfigError(
                f"{where}.name",
                f"duplicate stage name {name!r}: stage names must be unique within chain {self.name!r}",
            )
        return where

    def stage_kwargs(
        self,
        where: str,
        *,
        image: str | None,
        env: dict[str, Any] | None = None,
        resources: Any = None,
        secrets: list[Any] | None = None,
        env_from: list[Any] | None = None,
        volume_mounts: list[Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """A stage operator's keyword arguments (`volume_mounts` among them, for `add_stage`) from what the
        author gave (KubernetesPodOperator's names and models too), with the chain's identity, connection
        and stage defaults."""
        if image is None:
            raise ChainConfigError(f"{where}.image", "is required: the image the stage runs in")
        try:
            extra = kpo.stage_arguments(kwargs, self)
            env = _one("env", env, extra.pop("env", env))
            resources = kpo.quantities(
                _one("resources", kpo.to_api(resources), extra.pop("resources", kpo.to_api(resources)))
            )
            every = [*kpo.env_from_sources(env_from), *extra.pop("env_from", [])]
            whole = env if resolved_later(env) else None  # an XComArg: a dict of strings once resolved
            env, env_sources, every = sources.from_arguments(None if whole else env, secrets, every)
            env = whole or env
        except ChainConfigError as err:
            raise ChainConfigError(_stage_field(where, f"stage.{err.field}"), err.message) from None
        for option in ("deferrable", "defer_after", "prepare_next", "go_via_exec", "swap_timeout"):
            extra.setdefault(option, getattr(self, option))
        return {
            "chain_name": self.name,
            "chain_path": self.path,
            "namespace": self.namespace,
            "image": image,
            "env": env,
            "env_sources": env_sources,
            "env_from": every,
            "container_resources": resources or {},
            "volume_mounts": kpo.to_api(volume_mounts or []),
            **self.connection.to_dict(),
            **extra,
        }

    def add_stage(
        self, task: KruiseChainOperator, where: str, volume_mounts: list[Any], *, payload_later: bool = False
    ) -> None:
        """Make `task` a stage of this chain: checked, in the chain's pod (after the prewarm or setup: see
        `_after_setup`).
        `payload_later`: its arguments are only known when it runs (a TaskFlow stage's)."""
        spec = self._check_stage(task, where, volume_mounts)
        self.stages.append(spec)
        self.stage_tasks.append(task)
        if payload_later or any(templated(getattr(task, f)) for f in ("cmds", "arguments", "env")):
            self.payload_later.add(spec.name)  # the pod's annotations counted at the largest run spec

    def add_mapped_stage(self, task: Any, where: str, spec: StageSpec, indexes: list[StageSpec]) -> None:
        """Make the mapped `task` a stage of this chain (`mapped.py`): `spec` what its partial says, checked
        with each literal map index's values (`indexes`)."""
        for index in indexes:
            validatable_stage(index).validate(where)
        self.stages.append(spec)
        self.stage_tasks.append(task)
        self.payload_later.add(spec.name)  # expanded values are only known when each index runs
        self.mapped_images[spec.name] = literal_images(indexes)

    def task(
        self,
        python_callable: Callable[..., Any] | None = None,
        *,
        multiple_outputs: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """``@chain.task(image=...)``: a Python function run as a stage of this chain's pod, as
        ``@task.kubernetes`` runs one in a pod (`decorators/kruise_chain.py`: its source and JSON arguments
        ship in the run spec, its return value comes back through ``$CHAIN_OUTPUT`` to XCom). Takes
        `chain.stage`'s options (KubernetesPodOperator's names too) but `cmds`/`arguments`, and `python`
        (the interpreter in the image, ``python3``)."""
        return chain_task(self, python_callable, multiple_outputs, **kwargs)

    def _check_stage(self, task: KruiseChainOperator, where: str, volume_mounts: list[Any]) -> StageSpec:
        """The stage `task` runs, checked as far as it is known before rendering (ChainConfigError naming
        `where`'s field): its template fields as Jinja will parse them, its image once rendered, what an
        XComArg gives when the stage runs (`templating.stand_in`)."""
        check_renderable(task, f"{where}.", {"container_resources": "resources"})
        spec = StageSpec(
            name=task.stage_name,
            image=stand_in(unwrap_literals(task.image), STAND_IN_IMAGE),
            cmds=_words(f"{where}.cmds", stand_in(unwrap_literals(task.cmds), [STAND_IN_WORD])),
            arguments=_words(f"{where}.arguments", stand_in(unwrap_literals(task.arguments), [])),
            env=stand_in(unwrap_literals(task.env), {}),
            resources=task.container_resources,
            image_pull_policy=task.image_pull_policy,
            env_sources=task.env_sources,
            env_from=task.env_from,
            volume_mounts=volume_mounts,
        )
        validatable_stage(spec).validate(where)
        return spec

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._group is not None and self.setup_task is not None
        try:
            if exc_type is not None:
                return
            spec = self.spec()
            validatable(spec).validate()
            # the pod's annotations at their largest (a TaskFlow stage's run spec too), naming the stages
            self._check_annotations_size(spec)
            self.setup_task.chain = spec.to_dict()
            known = self._images_known_before_their_stage()
            self.setup_task.stage_images = {
                name: images[0] for name, images in known.items() if templated(images[0])
            }
            if self.prewarm_task is not None:
                self.prewarm_task.images = list(dict.fromkeys(i for images in known.values() for i in images))
            self.teardown_task = ChainTeardownOperator(
                task_id="teardown",
                chain_name=self.name,
                namespace=self.namespace,
                keep_pod=self.keep_pod,
                **self.connection.to_dict(),
            )
            # every task declared in the block runs between setup and teardown (stages, and e.g. a
            # HotSwapSensor or a task reading the stages' results): roots after setup, teardown after leaves
            members = [t for t in self._group.iter_tasks() if t is not self.teardown_task]
            ids = {t.task_id for t in members}
            self._after_setup(ids)
            for task in members:
                if task is not self.setup_task and not (task.upstream_task_ids & ids):
                    self.setup_task >> task
            leaves = [t for t in members if not (t.downstream_task_ids & ids)]
            leaves >> self.teardown_task  # type: ignore[operator]
            for task in [*members, self.teardown_task]:  # stages, prewarm, teardown, sensors of this chain
                mine = isinstance(task, ChainBaseOperator) and task.chain_name == self.name
                if mine and not task.chain_path:
                    task.chain_path = self.path
                if mine and task not in self.stage_tasks:
                    self._check_task(task)
            # the teardown carries the chain's verdict: the run fails when any task of the chain failed,
            # whatever state a later stage kept from an earlier try (Airflow judges a run by its leaves)
            self.teardown_task.as_teardown(setups=self.setup_task, on_failure_fail_dagrun=True)
            # also after a failed setup (its worker killed before it could clean up): nothing is left behind
            self.teardown_task.trigger_rule = TriggerRule.ALL_DONE
        finally:
            ACTIVE_CHAINS.remove(self)
            self._group.__exit__(exc_type, exc, tb)

    def _check_annotations_size(self, spec: ChainSpec) -> None:
        """`check_annotations_size` with the pod's annotations at their largest (a TaskFlow stage's run spec
        too); a refusal names the mapped stages' `max_map_length` (each counts that many records)."""
        try:
            check_annotations_size(largest_payloads(validatable(spec), self.payload_later))
        except ChainConfigError as err:
            mapped = [s for s in spec.stages if s.map_length]
            if not mapped:
                raise
            names = ", ".join(s.name for s in mapped)
            raise ChainConfigError(
                err.field,
                f"{err.message}; or lower max_map_length on its mapped stages ({names}: the pod records "
                f"each index they may have, {', '.join(str(s.map_length) for s in mapped)}), in "
                "partial(max_map_length=...) or @chain.task(max_map_length=...)",
            ) from None

    def _after_setup(self, ids: set[str]) -> None:
        """Each stage after the prewarm, or the setup: directly, but for a stage with another trigger rule
        than all_success (a clean-up's all_done) without the prewarm, which follows the setup through the
        tasks before it, as Airflow wants a setup task's direct downstream tasks all_success (it holds such a
        stage while an indirect setup has not succeeded, `trigger_rule_dep`); one that no other task of the
        chain precedes is refused."""
        assert self.setup_task is not None
        for i, task in enumerate(self.stage_tasks):
            if self.prewarm_task is not None or task.trigger_rule == TriggerRule.ALL_SUCCESS:
                (self.prewarm_task or self.setup_task) >> task
            elif not (task.upstream_task_ids & (ids - {self.setup_task.task_id})):
                rule = getattr(task.trigger_rule, "value", task.trigger_rule)
                raise ChainConfigError(
                    f"stages[{i}].trigger_rule",
                    f"{rule!r} on a stage no other task of the chain precedes: it would follow the chain's "
                    "setup task directly, whose direct downstream tasks Airflow wants all_success; put it "
                    "after another stage (the rule then applies to the ends of the tasks before it), or keep "
                    "the prewarm (prewarm=True)",
                )

    def _images_known_before_their_stage(self) -> dict[str, list[str]]:
        """stage name -> its images the setup and prewarm tasks can know (a mapped stage's literal map
        indexes' several): plain ones, and templates that render the same in their context as in the
        stage's (`templating.run_level`, and the stage has no params of its own)."""
        assert self.setup_task is not None
        env = self.setup_task.get_template_env()
        known: dict[str, list[str]] = {}
        for spec, task in zip(self.stages, self.stage_tasks, strict=True):
            for image in self.mapped_images.get(spec.name) or [spec.image]:
                if image == STAND_IN_IMAGE:
                    continue  # expanded from an XCom: known when its map index runs
                if not templated(image) or (
                    run_level(image, env) and task.params.dump() == self.setup_task.params.dump()
                ):
                    known.setdefault(spec.name, []).append(image)
        return known

    def _check_task(self, task: ChainBaseOperator) -> None:
        """Check a task of this chain that is not a stage (setup, prewarm, teardown, a sensor) as far as it
        is known before rendering: a `HotSwapSensor` must wait for one of the chain's stages."""
        from airflow_kruise_chain.sensors.hotswap import HotSwapSensor, check_stage_name

        check_renderable(task, f"{task.task_id}.")
        if isinstance(task, HotSwapSensor) and not templated(task.stage):
            try:
                check_stage_name(task.stage)
            except ChainConfigError as err:
                raise ChainConfigError(f"{task.task_id}.stage", err.message) from None
            mapped = {s.name for s in self.stages if s.map_length}
            if task.stage in mapped:
                raise ChainConfigError(
                    f"{task.task_id}.stage",
                    f"stage {task.stage!r} is mapped: each map index i is a stage of its own, "
                    f"{task.stage}-i: name one (e.g. {task.stage}-0)",
                )
            if task.stage not in {name for s in self.stages for name in s.stage_names()}:
                raise ChainConfigError(
                    f"{task.task_id}.stage",
                    f"chain {self.name!r} has no stage {task.stage!r}; its stages: "
                    + ", ".join(s.name for s in self.stages),
                )


def _check_not_in_mapped_group(name: str) -> None:
    """Refuse a chain declared in a mapped task group (``@task_group`` ... ``.expand()``): a DAG run has one
    pod per chain, which the group's map indexes would share (each setup finding it, each teardown deleting
    it under the others)."""
    from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext
    from airflow.sdk.definitions.taskgroup import MappedTaskGroup

    group = TaskGroupContext.get_current(DagContext.get_current())
    while group is not None:
        if isinstance(group, MappedTaskGroup):
            raise ChainConfigError(
                name,
                f"is declared in the mapped task group {group.group_id!r}, whose map indexes would share "
                "the DAG run's one pod of this chain: map its stages instead, "
                "chain.stage.partial(...).expand(...) or a @chain.task function's .expand(...) "
                "(docs/writing-chains.md#mapped-stages)",
            )
        group = group.parent_group


def _stage_field(where: str, field: str) -> str:
    """A stage operator's field as the chain names it: ``stage.image`` as ``stages[1].image``; the operator's
    own options (``swap_timeout``) as they are."""
    return f"{where}.{field.removeprefix('stage.')}" if field.startswith("stage.") else field


def _words(field: str, value: Any) -> list[Any]:
    """`value` as a list of words (a command's), or ChainConfigError naming `field`."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ChainConfigError(field, f"must be a list of strings (one per word), not {value!r}")
    return list(value)


def _one(field: str, given: Any, translated: Any) -> Any:
    """The value of an option given under its own name and a KubernetesPodOperator name: one, or both the
    same."""
    if translated != given and given not in (None, False, {}, [], ()):
        raise ChainConfigError(
            field,
            f"is given as {given!r} and, by a KubernetesPodOperator argument, as {translated!r}: give one",
        )
    return translated


def _template_searchpath() -> list[str]:
    """Where Airflow looks for the current DAG's template files: its template_searchpath, then its folder."""
    import os

    from airflow.sdk.definitions._internal.contextmanager import DagContext

    dag = DagContext.get_current()
    if dag is None:
        return [os.getcwd()]
    paths = dag.template_searchpath or []
    return [*([paths] if isinstance(paths, str) else paths), os.path.dirname(dag.fileloc)]
