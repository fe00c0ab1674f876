"""TaskFlow stages: a Python callable run as a stage of a chain's pod, as `@task.kubernetes` runs one in one.

``@task.kruise_chain(image=...)`` (registered through `get_provider_info()["task-decorators"]`) or
``@chain.task(image=...)``, called inside a `KruiseChain` block, makes a `TaskFlowStageOperator` stage of
that chain. What ships, and how (the runner contract: a stage gets exactly its argv and env, and returns its
outputs through ``$CHAIN_OUTPUT``):

- the callable's source (its decorators removed), so the image needs no DAG file, only a Python 3 (`python`,
  ``python3`` on its PATH by default): like `@task.kubernetes`, the function imports what it uses;
- its arguments, rendered (templates, XComArgs resolved), as one JSON argv word: they travel in the run spec,
  a pod annotation anyone who may get the pod can read, so a value Airflow's secrets masker knows is refused
  (read credentials from a Secret: `secrets=`/`env=` ``secretKeyRef``), and they are bounded (the annotation's
  size is checked at parse time with each TaskFlow stage at the largest run spec a stage may have);
  larger data goes through ``$CHAIN_SCRATCH``;
- its return value, as JSON through ``$CHAIN_OUTPUT`` (at most `wire.MAX_OUTPUTS_BYTES`), to XCom as the
  task's ``return_value`` (``multiple_outputs`` as for any `@task`); the stage's result is XCom
  ``stage_result``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import attr
from airflow.sdk.bases.decorator import DecoratedOperator, _TaskDecorator, get_unique_task_id
from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS

from airflow_kruise_chain.core.errors import ChainConfigError, ChainError
from airflow_kruise_chain.core.spec import StageSpec
from airflow_kruise_chain.core.wire import MAX_OUTPUTS_BYTES
from airflow_kruise_chain.decorators.source import check_self_contained, function_source
from airflow_kruise_chain.mapped import concurrency, map_length
from airflow_kruise_chain.operators.base import ChainBaseOperator
from airflow_kruise_chain.operators.chain import KruiseChainOperator
from airflow_kruise_chain.templating import stand_in

BOOTSTRAP = """\
import __future__, json, os, sys
name, source, payload = sys.argv[1:4]
scope = {"__name__": "__kruise_chain__"}
exec(compile(source, "<stage %s>" % name, "exec", __future__.annotations.compiler_flag), scope)
arguments = json.loads(payload)
value = scope[name](*arguments["args"], **arguments["kwargs"])
try:
    text = json.dumps({"return_value": value}, allow_nan=False)
except (TypeError, ValueError) as err:
    sys.exit("kruise-chain: the return value of %s() is not JSON (%s): return JSON data (a dict, list, "
             "str or number), or write a file under $CHAIN_SCRATCH and return its path" % (name, err))
with open(os.environ["CHAIN_OUTPUT"], "w") as out:
    out.write(text)
"""
"""The program the stage's Python runs (``python -c BOOTSTRAP NAME SOURCE ARGUMENTS``): defines the callable
from its source, calls it with the JSON arguments, writes its return value to ``$CHAIN_OUTPUT``."""

MAX_ARGUMENTS_BYTES = 32 * 1024
"""Largest JSON of a TaskFlow stage's arguments (a stage's run spec holds at most `MAX_STAGE_PAYLOAD`)."""


class TaskFlowStageOperator(DecoratedOperator, KruiseChainOperator):
    """A Python callable run as a chain stage (see the module's docstring). `python`: the interpreter's name
    or path in the image (``python3``). An image without it fails the task saying so."""

    custom_operator_name = "@task.kruise_chain"
    template_fields: Sequence[str] = (
        *ChainBaseOperator.template_fields,
        "image",
        "env",
        "op_args",
        "op_kwargs",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"env": "json", "op_args": "py", "op_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)
    result_xcom_key = "stage_result"

    def __init__(self, *, python: str = "python3", **kwargs: Any) -> None:
        function = kwargs["python_callable"]
        cmds = [python, "-c", BOOTSTRAP, function.__name__, function_source(function)]
        super().__init__(cmds=cmds, **kwargs)
        self.python = python

    def execute(self, context: Any) -> Any:
        self.arguments = [self.payload()]
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any], **kwargs: Any) -> Any:
        self.arguments = [self.payload()]
        return super().execute_complete(context, event, **kwargs)

    def named_arguments(self) -> dict[str, Any]:
        """The callable's arguments by name (``op_args[i]`` for a positional one)."""
        return {**{f"op_args[{i}]": v for i, v in enumerate(self.op_args)}, **dict(self.op_kwargs)}

    def payload(self) -> str:
        """The callable's rendered arguments as JSON, checked: JSON-able, no value Airflow's secrets masker
        knows (they travel in a pod annotation), at most `MAX_ARGUMENTS_BYTES`."""
        from airflow.sdk.log import redact

        plain = {}
        for name, value in self.named_arguments().items():
            plain[name] = as_json(name, value)
            if redact(plain[name]) != plain[name] and not self.allow_secret_env:
                raise ChainConfigError(
                    name,
                    "holds a value Airflow's secrets masker knows, and a TaskFlow stage's arguments travel "
                    "in a pod annotation readable by anyone who may get the pod: read it from a Kubernetes "
                    "Secret (secrets=[Secret('env', NAME, SECRET, KEY)]) instead, or set "
                    "allow_secret_env=True",
                )
        arguments = {
            "args": [plain[f"op_args[{i}]"] for i in range(len(self.op_args))],
            "kwargs": {k: plain[k] for k in self.op_kwargs},
        }
        text = json.dumps(arguments, allow_nan=False)
        if len(text.encode()) > MAX_ARGUMENTS_BYTES:
            raise ChainConfigError(
                "op_args",
                f"the arguments of {self.python_callable.__name__}() are {len(text.encode())} bytes of JSON, "
                f"over {MAX_ARGUMENTS_BYTES}: they travel in a pod annotation; pass large data through "
                "$CHAIN_SCRATCH (an upstream stage writes a file, this one gets its path)",
            )
        return text

    def finish(self, context: Any, result: Any, pod_uid: str = "") -> Any:
        """The callable's return value (Airflow pushes it, as for any `@task`); the stage's result is XCom
        ``stage_result``. Fails naming the image when it has no `python`, or when the return value did not
        reach ``$CHAIN_OUTPUT``."""
        problem = self.problem(result)
        if problem:
            context["ti"].xcom_push(key=self.result_xcom_key, value=result.to_xcom())
            self.remember_failure(context, result, pod_uid)
            raise ChainError(problem)
        super().finish(context, result, pod_uid)
        return result.outputs["return_value"]

    def problem(self, result: Any) -> str:
        """What went wrong with a TaskFlow stage that a stage's generic failure would not say ('': none)."""
        name = self.python_callable.__name__
        if result.exit_code == 127 and any(
            f'"{self.python}": executable file not found' in line for line in result.log_tail
        ):
            return (
                f"stage {self.stage_name!r} cannot run {name}(): image {result.image!r} has no "
                f"{self.python!r} on its PATH; a TaskFlow stage runs its function with the image's Python 3: "
                "use an image with Python (e.g. python:3.12-slim), or give python='/path/to/python3'"
            )
        if not result.succeeded:
            return ""
        if result.outputs_status == "too-big":
            return (
                f"the return value of {name}() is over {MAX_OUTPUTS_BYTES} bytes of JSON, what a stage's "
                "outputs may hold: write it under $CHAIN_SCRATCH and return its path"
            )
        if not isinstance(result.outputs, dict) or "return_value" not in result.outputs:
            return f"{name}() returned nothing the task could read ($CHAIN_OUTPUT: {result.outputs_status})"
        return ""


def as_json(name: str, value: Any) -> Any:
    """`value` as the JSON the stage gets (`_sequence`'s conversions), or ChainConfigError naming `name`."""
    try:
        return json.loads(json.dumps(value, default=_sequence, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ChainConfigError(
            name,
            f"is not JSON ({err}): a TaskFlow stage gets its arguments as JSON (a str, number, bool, None, "
            "list or dict of them; e.g. a date as its ISO text, '{{ ds }}', a set as a list)",
        ) from None


def _sequence(value: Any) -> Any:
    """JSON for what XCom hands a function besides JSON types: the values of a mapped task (a lazy
    sequence), a mapping."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# -- the decorators ----------------------------------------------------------------------------------------
class StageChain(Protocol):
    """What a TaskFlow stage needs of its `KruiseChain`."""

    def stage_kwargs(self, where: str, *, image: str | None, **kwargs: Any) -> dict[str, Any]: ...

    def where(self, name: str) -> str: ...

    def add_stage(self, task: Any, where: str, volume_mounts: list[Any], *, payload_later: bool) -> None: ...

    def add_mapped_stage(self, task: Any, where: str, spec: StageSpec, indexes: list[StageSpec]) -> None: ...


ACTIVE_CHAINS: list[StageChain] = []
"""The `KruiseChain` blocks being declared, innermost last (`KruiseChain.__enter__` and `__exit__`)."""


def stage_name_of(task_id: str) -> str:
    """A stage's name from a TaskFlow task id (a function name): lowercase, '-' for what names cannot hold."""
    return re.sub(r"[^a-z0-9-]+", "-", task_id.lower()).strip("-")


@attr.define(slots=False)
class ChainTaskDecorator(_TaskDecorator):
    """`_TaskDecorator` whose call makes the task a stage of its chain: `chain`, or the innermost chain
    being declared."""

    chain: Any = None

    def _chain(self) -> StageChain:
        chain = self.chain or (ACTIVE_CHAINS[-1] if ACTIVE_CHAINS else None)
        if chain is None:
            raise ChainConfigError(
                self.function.__name__,
                "a TaskFlow stage runs in a chain's pod: call it inside `with KruiseChain(...) as chain:` "
                "(or decorate it with @chain.task)",
            )
        return chain

    def _stage_kwargs(self) -> tuple[StageChain, str, dict[str, Any], list[Any]]:
        chain = self._chain()
        kwargs = dict(self.kwargs)
        for owned in ("cmds", "arguments"):
            if owned in kwargs:
                raise ChainConfigError(
                    owned, f"a TaskFlow stage's command is its function: drop {owned}= (use @chain.stage)"
                )
        check_self_contained(self.function)
        context_keys = sorted(set(self.function_signature.parameters) & KNOWN_CONTEXT_KEYS)
        if context_keys:
            raise ChainConfigError(
                self.function.__name__,
                f"parameter {context_keys[0]!r} is an Airflow context key, but a TaskFlow stage runs in the "
                "chain's pod without Airflow's context: pass what it needs as an argument (a template such "
                "as '{{ ds }}' is rendered)",
            )
        from airflow.sdk.definitions._internal.contextmanager import DagContext, TaskGroupContext

        dag = DagContext.get_current()
        kwargs.pop("name", None)  # KubernetesPodOperator's pod name: a TaskFlow stage's name is its task id
        task_id = get_unique_task_id(kwargs.pop("task_id"), dag, TaskGroupContext.get_current(dag))
        name = stage_name_of(task_id.rsplit(".", 1)[-1])
        where = chain.where(name)
        stage = chain.stage_kwargs(where, image=kwargs.pop("image", None), **kwargs)
        mounts = stage.pop("volume_mounts")
        return chain, where, {"task_id": task_id, "stage_name": name, **stage}, mounts

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        chain, where, stage, mounts = self._stage_kwargs()
        xcom = _TaskDecorator.__call__(attr.evolve(self, kwargs=stage), *args, **kwargs)
        for name, value in xcom.operator.named_arguments().items():  # the literal ones: now, not at run
            as_json(name, stand_in(value))
        chain.add_stage(xcom.operator, where, mounts, payload_later=True)
        return xcom

    def _expand(self, expand_input: Any, *, strict: bool) -> Any:
        """`.expand(...)` / `.expand_kwargs(...)`: a mapped stage of the chain (`mapped.py`), one map index
        per element of the function's expanded arguments."""
        chain, where, stage, mounts = self._stage_kwargs()
        limit = map_length(where, stage)
        concurrency(where, stage)
        xcom = _TaskDecorator._expand(
            attr.evolve(self, kwargs={**stage, "max_map_length": limit}), expand_input, strict=strict
        )
        python = stage.get("python", "python3")
        spec = StageSpec(
            name=stage["stage_name"],
            image=stage["image"],
            cmds=[python, "-c", BOOTSTRAP, self.function.__name__, function_source(self.function)],
            env=stage["env"],
            resources=stage["container_resources"],
            image_pull_policy=stage.get("image_pull_policy"),
            env_sources=stage["env_sources"],
            env_from=stage["env_from"],
            volume_mounts=mounts,
            map_length=limit,
        )
        chain.add_mapped_stage(xcom.operator, where, spec, [spec])
        return xcom


def kruise_chain_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> Any:
    """``@task.kruise_chain(image=..., ...)``: the function becomes a stage of the chain it is called in
    (see the module's docstring); `kwargs` are `chain.stage`'s (KubernetesPodOperator's names too) and
    `python`, not `cmds` or `arguments`."""
    return chain_task(None, python_callable, multiple_outputs, **kwargs)


def chain_task(
    chain: StageChain | None,
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> Any:
    """The decorator `kruise_chain_task` and `KruiseChain.task` return, bound to `chain` (None: the chain
    the function is called in)."""

    def decorate(function: Callable[..., Any]) -> ChainTaskDecorator:
        return ChainTaskDecorator(
            function=function,
            multiple_outputs=attr.NOTHING if multiple_outputs is None else multiple_outputs,
            operator_class=TaskFlowStageOperator,
            kwargs=kwargs,
            decorator_name="task.kruise_chain",
            chain=chain,
        )

    return decorate(python_callable) if python_callable is not None else decorate
