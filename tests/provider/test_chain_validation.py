"""Invalid chain definitions fail when the DAG is parsed, or at the latest before anything is created.

Each case builds a DAG the way an author would and expects `ChainConfigError` naming the offending field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pendulum
import pytest
from airflow.sdk import DAG

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError, ChainSpec
from airflow_kruise_chain.operators.chain import ChainPrewarmOperator, ChainSetupOperator, KruiseChainOperator
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor
from tests.provider.support import make_context, writes

START = pendulum.datetime(2026, 1, 1, tz="UTC")
OK = {"image": "busybox:1.36", "cmds": ["/bin/sh", "-c", "true"]}


def build(body: Callable[[KruiseChain], Any], **chain_kwargs: Any) -> DAG:
    """Parse a one-chain DAG: `body(chain)` declares the stages."""
    chain_kwargs.setdefault("namespace", "data")
    with DAG("validation", schedule=None, start_date=START) as dag:
        with KruiseChain("etl", **chain_kwargs) as chain:
            body(chain)
    return dag


def stages(*specs: dict[str, Any]) -> Callable[[KruiseChain], None]:
    def body(chain: KruiseChain) -> None:
        previous = None
        for spec in specs:
            task = chain.stage(**spec)
            if previous is not None:
                previous >> task
            previous = task

    return body


def test_a_valid_chain_parses():
    dag = build(stages({"name": "extract", **OK}, {"name": "load", **OK}))
    assert {"etl.setup", "etl.prewarm", "etl.extract", "etl.load", "etl.teardown"} == set(dag.task_dict)


def test_the_teardown_decides_the_run_state_and_judges_every_task_of_the_chain():
    dag = build(stages({"name": "extract", **OK}, {"name": "load", **OK}))
    teardown = dag.task_dict["etl.teardown"]
    # a teardown Airflow does not ignore: the stages before it are no longer the run's leaves
    assert teardown.is_teardown and teardown.on_failure_fail_dagrun
    judged = {"etl.setup", "etl.prewarm", "etl.extract", "etl.load"}
    assert teardown.get_flat_relative_ids(upstream=True) == judged


def test_the_setup_task_carries_the_whole_chain_as_a_dict():
    dag = build(stages({"name": "extract", **OK, "env": {"K": "v"}}), labels={"team": "a"}, keep_pod=True)
    spec = ChainSpec.from_dict(dag.task_dict["etl.setup"].chain)
    assert (spec.name, spec.namespace, spec.labels, spec.keep_pod) == ("etl", "data", {"team": "a"}, True)
    assert [(s.name, s.image, s.cmds, s.env) for s in spec.stages] == [
        ("extract", OK["image"], tuple(OK["cmds"]), {"K": "v"})
    ]


@pytest.mark.parametrize(
    ("body", "chain_kwargs", "field", "detail"),
    [
        pytest.param(
            stages({"name": "extract", **OK}, {"name": "load", "image": "Acme/Load::1", "cmds": ["x"]}),
            {},
            "stages[1].image",
            "Acme/Load::1",
            id="bad-image",
        ),
        pytest.param(
            stages({"name": "extract", **OK}, {"name": "load", "image": "acme/load:1 ", "cmds": ["x"]}),
            {},
            "stages[1].image",
            "whitespace",
            id="image-with-space",
        ),
        pytest.param(
            stages({"name": "extract", **OK}, {"name": "extract", **OK}),
            {},
            "stages[1].name",
            "duplicate stage name 'extract'",
            id="duplicate-stage",
        ),
        pytest.param(
            stages({"name": "extract", "image": "busybox:1.36", "cmds": []}),
            {},
            "stages[0].cmds",
            "is empty",
            id="empty-command",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"namespace": None},
            "namespace",
            "is required",
            id="namespace-missing",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"namespace": ""},
            "namespace",
            "is required",
            id="namespace-empty",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"namespace": "Data_NS"},
            "namespace",
            "Data_NS",
            id="namespace-invalid",
        ),
        pytest.param(
            stages({"name": "extract", **OK, "env": {"1BAD": "x"}}),
            {},
            "stages[0].env['1BAD']",
            "not a shell variable name",
            id="bad-env-name",
        ),
        pytest.param(
            stages({"name": "extract", **OK, "env": {"MY-VAR": "x"}}),
            {},
            "stages[0].env['MY-VAR']",
            "not a shell variable name",
            id="env-name-with-dash",
        ),
        pytest.param(
            stages({"name": "extract", **OK, "env": {"CHAIN_SCRATCH": "/tmp"}}),
            {},
            "stages[0].env['CHAIN_SCRATCH']",
            "reserved",
            id="reserved-env-name",
        ),
        pytest.param(
            stages({"name": "extract", **OK, "resources": {"limits": {"memory": "lots"}}}),
            {},
            "stages[0].resources.limits['memory']",
            "not a Kubernetes quantity",
            id="bad-quantity",
        ),
        pytest.param(
            stages(
                {"name": "extract", **OK},
                {"name": "load", **OK, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
            ),
            {},
            "stages[1].resources.requests['cpu']",
            "exceeds the limit",
            id="request-over-limit",
        ),
        pytest.param(
            stages({"name": "e" * 41, **OK}), {}, "stages[0].name", "lowercase", id="bad-stage-name"
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"scratch_size_limit": "1 GB"},
            "scratch_size_limit",
            "not a Kubernetes quantity",
            id="bad-scratch-size",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"on_prewarm_unavailable": "ignore"},
            "on_prewarm_unavailable",
            "'fail' or 'skip'",
            id="bad-prewarm-choice",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"prepare_next": "yes"},
            "prepare_next",
            "True or False",
            id="bad-prepare-next",
        ),
        *(
            pytest.param(
                stages({"name": "extract", **OK}),
                {"defer_after": value},
                "defer_after",
                "finite number of seconds >= 0",
                id=f"bad-defer-after-{value!r}",
            )
            for value in (-1, "1", True, float("nan"), float("inf"))
        ),
        pytest.param(
            stages({"name": "extract", **OK, "defer_after": -0.5}),
            {},
            "defer_after",
            "finite number of seconds >= 0",
            id="bad-stage-defer-after",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"swap_timeout": 0},
            "swap_timeout",
            "positive",
            id="zero-swap-timeout",
        ),
        pytest.param(
            stages({"name": "extract", **OK}),
            {"labels": {"team": "data science"}},
            "labels['team']",
            "not a valid label value",
            id="bad-label",
        ),
        pytest.param(
            stages({"name": "extract", **OK, "image_pull_policy": "Sometimes"}),
            {},
            "stages[0].image_pull_policy",
            "Always, IfNotPresent, Never",
            id="bad-pull-policy",
        ),
    ],
)
def test_invalid_definition_fails_at_parse_naming_the_field(body, chain_kwargs, field, detail):
    with pytest.raises(ChainConfigError) as err:
        build(body, **chain_kwargs)
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")
    assert detail in str(err.value)


def test_stages_inherit_the_chains_task_options_and_may_override_them():
    dag = build(
        stages(
            {"name": "extract", **OK},
            {"name": "load", **OK, "defer_after": 30, "deferrable": False, "prepare_next": True},
        ),
        deferrable=True,
        defer_after=0,
        prepare_next=False,
    )
    extract, load = dag.task_dict["etl.extract"], dag.task_dict["etl.load"]
    assert (extract.deferrable, extract.defer_after, extract.prepare_next) == (True, 0, False)
    assert (load.deferrable, load.defer_after, load.prepare_next) == (False, 30, True)


def test_defer_after_defaults_to_the_triggers_hold(monkeypatch):
    """Issue 40: by default a deferrable stage is followed on the worker for the trigger's hold
    (`[workers] min_heartbeat_interval` + 3 s, read when the task runs, not at parse); a number wins."""
    dag = build(stages({"name": "extract", **OK}, {"name": "load", **OK, "defer_after": 2.5}))
    extract, load = dag.task_dict["etl.extract"], dag.task_dict["etl.load"]
    assert extract.defer_after is None and extract.deferral_delay() == 5 + 3
    monkeypatch.setenv("AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL", "1")
    assert extract.deferral_delay() == 1 + 3
    assert load.deferral_delay() == 2.5


def test_a_chain_without_stages_fails_at_parse():
    with pytest.raises(ChainConfigError, match=r"^stages: a chain needs at least one stage"):
        build(lambda chain: None)


def test_stage_outside_the_with_block_fails():
    chain = KruiseChain("etl", namespace="data")
    with pytest.raises(ChainConfigError, match="inside `with KruiseChain"):
        chain.stage("extract", **OK)


def stage_operator(**kwargs: Any) -> KruiseChainOperator:
    args = {"task_id": "extract", "chain_name": "etl", "namespace": "data", "stage_name": "extract", **OK}
    with DAG("direct", schedule=None, start_date=START):
        return KruiseChainOperator(**{**args, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"container_resources": {"limits": {"cpu": "one"}}}, "stage.resources.limits['cpu']"),
        ({"image_pull_policy": "Sometimes"}, "stage.image_pull_policy"),
        ({"swap_timeout": -1}, "swap_timeout"),
        ({"prepare_next": 1}, "prepare_next"),
        ({"defer_after": False}, "defer_after"),
    ],
)
def test_a_stage_operator_used_directly_fails_at_parse_on_what_is_not_templated(kwargs, field):
    with pytest.raises(ChainConfigError) as err:
        stage_operator(**kwargs)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"image": "acme/Extract:1"}, "stage.image"),
        ({"cmds": []}, "stage.cmds"),
        ({"env": {"2X": "y"}}, "stage.env['2X']"),
    ],
)
def test_a_stage_operator_used_directly_checks_its_template_fields_once_rendered(kwargs, field):
    """Airflow's operator rules: template fields are taken as given and checked after rendering (a chain
    checks them at parse time: the cases of test_invalid_definition_fails_at_parse_naming_the_field)."""
    op = stage_operator(**kwargs)
    op.render_template_fields({})
    with pytest.raises(ChainConfigError) as err:
        op.stage_spec()
    assert err.value.field == field


def test_a_templated_stage_is_checked_when_rendered():
    op = stage_operator(image="{{ params.image }}", cmds=["run"])
    op.render_template_fields({"params": {"image": "Not An Image"}})
    with pytest.raises(ChainConfigError) as err:
        op.stage_spec()
    assert err.value.field == "stage.image"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (
            lambda: HotSwapSensor(
                task_id="w", chain_name="etl", namespace="data", stage="load", target_state="done"
            ),
            "target_state",
        ),
        (
            lambda: ChainPrewarmOperator(
                task_id="p", chain_name="etl", namespace="data", on_unavailable="no"
            ),
            "on_unavailable",
        ),
    ],
)
def test_sensor_and_prewarm_arguments_fail_at_parse(make, field):
    with DAG("others", schedule=None, start_date=START), pytest.raises(ChainConfigError) as err:
        make()
    assert err.value.field == field


def test_sensor_and_prewarm_template_fields_are_checked_once_rendered():
    with DAG("others", schedule=None, start_date=START):
        sensor = HotSwapSensor(task_id="w", chain_name="etl", namespace="data", stage="{{ params.s }}")
        prewarm = ChainPrewarmOperator(
            task_id="p", chain_name="etl", namespace="data", images=["busybox:1.36", "{{ params.i }}"]
        )
    context = {"params": {"s": "", "i": "a b"}}
    sensor.render_template_fields(context)
    with pytest.raises(ChainConfigError) as err:
        sensor.poke(make_context("others", "manual__1"))
    assert err.value.field == "stage"
    prewarm.render_template_fields(context)
    with pytest.raises(ChainConfigError) as err:
        prewarm.rendered_images()
    assert err.value.field == "images[1]"


INVALID_CHAINS = [
    pytest.param(
        {
            "name": "etl",
            "namespace": "default",
            "stages": [{"name": "extract", **OK}, {"name": "load", "image": "bad image", "cmds": ["x"]}],
        },
        "stages[1].image",
        id="bad-image",
    ),
    pytest.param(
        {
            "name": "etl",
            "namespace": "default",
            "stages": [{"name": "extract", **OK}, {"name": "extract", **OK}],
        },
        "stages[1].name",
        id="duplicate-stage",
    ),
    pytest.param(
        {
            "name": "etl",
            "namespace": "default",
            "stages": [{"name": "extract", "image": "busybox:1.36", "cmds": []}],
        },
        "stages[0].cmds",
        id="empty-command",
    ),
    pytest.param(
        {"name": "etl", "namespace": "default", "stages": [{"name": "extract", **OK, "env": {"A B": "1"}}]},
        "stages[0].env['A B']",
        id="bad-env",
    ),
    pytest.param(
        {
            "name": "etl",
            "namespace": "default",
            "stages": [{"name": "extract", **OK, "resources": {"requests": {"memory": "12 Mi"}}}],
        },
        "stages[0].resources.requests['memory']",
        id="bad-quantity",
    ),
    pytest.param(
        {"name": "etl", "namespace": "default", "stages": [{"name": "extract", **OK, "imag": "x"}]},
        "stages[0].imag",
        id="unknown-stage-field",
    ),
    pytest.param(
        {"name": "etl", "namespace": "default", "stages": [{"name": "extract", "cmds": ["x"]}]},
        "stages[0].image",
        id="missing-image",
    ),
    pytest.param({"name": "etl", "stages": [{"name": "extract", **OK}]}, "namespace", id="missing-namespace"),
    pytest.param(
        {"name": "etl", "namespace": "default", "stages": [{"name": "extract", **OK}], "scratch_size": "1Gi"},
        "scratch_size",
        id="unknown-chain-field",
    ),
]


@pytest.mark.parametrize(("chain", "field"), INVALID_CHAINS)
def test_setup_operator_rejects_an_invalid_chain_dict_when_built(fresh_cluster, chain, field):
    with DAG("setup-invalid", schedule=None, start_date=START), pytest.raises(ChainConfigError) as err:
        ChainSetupOperator(task_id="setup", chain=chain)
    assert err.value.field == field
    assert writes(fresh_cluster) == []


@pytest.mark.parametrize(("chain", "field"), INVALID_CHAINS)
def test_setup_operator_creates_nothing_for_an_invalid_chain_dict(fresh_cluster, chain, field):
    """Even when the dict only turns invalid at run time (templating, mutation), execute writes nothing."""
    with DAG("setup-invalid", schedule=None, start_date=START):
        op = ChainSetupOperator(
            task_id="setup",
            chain={"name": "etl", "namespace": "default", "stages": [{"name": "extract", **OK}]},
        )
    op.chain = chain
    op.namespace = chain.get("namespace", "")
    with pytest.raises(ChainConfigError) as err:
        op.execute(make_context("setup-invalid", "manual__1"))
    assert err.value.field == field
    assert writes(fresh_cluster) == [], "an invalid chain must not create anything in the cluster"


def test_setup_operator_checks_a_templated_namespace_once_rendered(fresh_cluster):
    with DAG("setup-templated", schedule=None, start_date=START):
        op = ChainSetupOperator(
            task_id="setup",
            chain={"name": "etl", "namespace": "{{ params.ns }}", "stages": [{"name": "extract", **OK}]},
        )
    op.namespace = "Team_Data"  # what rendering would set
    with pytest.raises(ChainConfigError, match=re.escape("namespace: 'Team_Data' is not a valid namespace")):
        op.execute(make_context("setup-templated", "manual__1"))
    assert writes(fresh_cluster) == []
