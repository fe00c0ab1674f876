"""What Airflow's rendering will do to a chain task's template fields, known when the DAG is parsed.

Airflow renders every string of a template field with Jinja when the task runs (also strings holding no
``{{ }}``), and operators must take their template fields as given (Airflow's `validate_operators_init`
rules): so a value is checked here, by the chain API at parse time, as far as it is known before rendering
(`validatable`: a templated image is checked once rendered), and Jinja's own syntax is checked for every
string (`check_renderable`: a shell's ``${#VAR}`` starts a Jinja comment). A stage image templated on the DAG
run alone (`run_level`: params, Variables, ``dag_run.conf``, dates) renders the same in the chain's setup
and prewarm tasks as in its stage, so they render it too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow.sdk import literal

from airflow_kruise_chain.core.errors import ChainConfigError

if TYPE_CHECKING:
    import jinja2

    from airflow_kruise_chain.core.spec import ChainSpec, StageSpec

STAND_IN_IMAGE = "templated.invalid/rendered-when-its-stage-runs:0"
"""What a templated image is validated as before it is rendered (its rendered value is checked then)."""

STAND_IN_NAMESPACE = "rendered-when-the-task-runs"
"""What a templated namespace is validated as before it is rendered."""

JINJA_MARKS = ("{{", "{%", "{#")
"""What starts Jinja syntax: an expression, a statement, a comment."""

RUN_LEVEL = frozenset(
    {
        "params",
        "var",
        "conn",
        "macros",
        "dag",
        "dag_run",
        "run_id",
        "ds",
        "ds_nodash",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
        "logical_date",
        "data_interval_start",
        "data_interval_end",
        "prev_data_interval_start_success",
        "prev_data_interval_end_success",
        "prev_start_date_success",
        "prev_end_date_success",
        "triggering_asset_events",
    }
)
"""Context names whose value is the same for every task of a DAG run (not `ti`, `task`, XComs, ...)."""

_LITERAL = type(literal(""))


def unwrap_literals(value: Any) -> Any:
    """`value` with each Airflow `literal(x)` replaced by `x` (rendering does the same when the task runs)."""
    if isinstance(value, _LITERAL):
        return value.value
    if isinstance(value, Mapping):
        return {k: unwrap_literals(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [unwrap_literals(v) for v in value]
    return value


def resolved_later(value: Any) -> bool:
    """Whether `value` is an XComArg (or any of Airflow's runtime-resolved values but `literal()`): rendering
    replaces it by what it resolves to when the task runs."""
    from airflow.sdk.definitions._internal.mixins import ResolveMixin

    return isinstance(value, ResolveMixin) and not isinstance(value, _LITERAL)


STAND_IN_WORD = "rendered-when-its-stage-runs"
"""What a word or env value resolved from an XCom is validated as before it is rendered."""


def stand_in(value: Any, whole: Any = STAND_IN_WORD) -> Any:
    """`value` with each XComArg in it replaced by `STAND_IN_WORD` (`whole` when `value` is one), for the
    checks made before rendering: the stage checks what it resolves to when it runs."""
    if resolved_later(value):
        return whole
    if isinstance(value, Mapping):
        return {k: stand_in(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [stand_in(v) for v in value]
    return value


def templated(value: Any) -> bool:
    """Whether rendering may change `value` (a string in it holds Jinja syntax, or an XComArg is in it;
    `literal()` never renders). Dict keys are not rendered."""
    if resolved_later(value):
        return True
    if isinstance(value, str):
        return any(mark in value for mark in JINJA_MARKS)
    if isinstance(value, Mapping):
        return any(templated(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(templated(v) for v in value)
    return False


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(path, string) of each string Airflow renders in `value` (not `literal()`s, not dict keys)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def check_renderable(task: Any, where: str, fields: Mapping[str, str] | None = None) -> None:
    """ChainConfigError naming the field (``{where}{field}[i]``) of `task`'s first template-field string that
    Jinja cannot parse, so the render that runs it would fail: Airflow renders every string of a template
    field, so a shell's ``${#VAR}`` or an unclosed ``{#`` is a Jinja syntax error. `fields` names a field as
    the author wrote it (``{"container_resources": "resources"}``)."""
    values = {(fields or {}).get(f, f): getattr(task, f, None) for f in task.template_fields}
    check_renderable_values(task.get_template_env(), values, where)


def check_renderable_values(env: jinja2.Environment, values: Mapping[str, Any], where: str) -> None:
    """`check_renderable` for values about to be template fields (`values`: field -> value)."""
    import jinja2

    for field, value in values.items():
        for path, text in _strings(value, f"{where}{field}"):
            if not any(mark in text for mark in JINJA_MARKS):
                continue
            try:
                env.parse(text)
            except jinja2.TemplateSyntaxError as err:
                raise ChainConfigError(
                    path,
                    f"Jinja cannot parse {text!r} ({err.message}, line {err.lineno}), and Airflow renders "
                    "every string of a template field when the task runs: pass it as written with Airflow's "
                    "literal() (`from airflow.sdk import literal`; literal('...')), or escape the Jinja "
                    "syntax ({% raw %}...{% endraw %}; a shell's ${#VAR} as ${{ '{#' }}VAR})",
                ) from None


def run_level(template: str, env: jinja2.Environment) -> bool:
    """Whether `template` reads only the DAG run's context (`RUN_LEVEL`), so any task of the run renders it
    the same (the chain's setup and prewarm as its stage). False when it reads the task's own (`ti`, its
    XComs, `task`) or does not parse."""
    import jinja2
    from jinja2 import meta

    if not isinstance(template, str):
        return False  # an XComArg: the stage's own context
    try:
        return meta.find_undeclared_variables(env.parse(template)) <= RUN_LEVEL
    except jinja2.TemplateSyntaxError:
        return False


def validatable(spec: ChainSpec) -> ChainSpec:
    """`spec` with each templated stage image replaced by `STAND_IN_IMAGE` (and a templated namespace by
    `STAND_IN_NAMESPACE`), so that `validate()` checks all that is known before rendering (the tasks check
    the rendered values when they run)."""
    namespace = STAND_IN_NAMESPACE if templated(spec.namespace) else spec.namespace
    return replace(spec, namespace=namespace, stages=[validatable_stage(s) for s in spec.stages])


def largest_payloads(spec: ChainSpec, names: set[str]) -> ChainSpec:
    """`spec` with the stages `names` (whose arguments are only known when they run: TaskFlow stages) at the
    largest run spec a stage may have (`spec.MAX_STAGE_PAYLOAD`), for the check of the pod's annotations."""
    from airflow_kruise_chain.core.spec import MAX_STAGE_PAYLOAD

    stages = []
    for stage in spec.stages:
        room = MAX_STAGE_PAYLOAD - len(stage.run_spec().encode()) - 3  # the filler word's quotes and space
        if stage.name in names and room > 0:
            stage = replace(stage, arguments=[*stage.arguments, "x" * room])
        stages.append(stage)
    return replace(spec, stages=stages)


def validatable_stage(stage: StageSpec) -> StageSpec:
    """`stage` with its image replaced by `STAND_IN_IMAGE` when it is templated (see `validatable`)."""
    return replace(stage, image=STAND_IN_IMAGE) if templated(stage.image) else stage
