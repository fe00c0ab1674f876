"""KubernetesPodOperator's arguments, one by one: each is accepted with KPO's meaning (on the chain or the
stage) or refused at parse naming the counterpart, never with Airflow's generic "Invalid arguments"; the
`kubernetes.client` models KPO takes are accepted as their dicts. The table of `kpo.ARGUMENTS` is walked
against the installed operator's signature, so a new KPO argument cannot go unnoticed."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pendulum
import pytest
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.secret import Secret
from airflow.sdk import DAG
from kubernetes.client import models as k8s

from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.core import ChainConfigError, ChainSpec
from airflow_kruise_chain.kpo import ARGUMENTS, to_api

START = pendulum.datetime(2026, 1, 1, tz="UTC")
STAGE = {"image": "busybox:1.36", "cmds": ["true"]}
VOLUME = k8s.V1Volume(name="data", empty_dir=k8s.V1EmptyDirVolumeSource())
KPO_PARAMETERS = [
    p
    for p in inspect.signature(KubernetesPodOperator.__init__).parameters.values()
    if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
]


def build(chain: dict[str, Any] | None = None, stage: dict[str, Any] | None = None) -> DAG:
    with DAG("kpo", schedule=None, start_date=START) as dag:
        with KruiseChain("c", **{"namespace": "default", **(chain or {})}) as c:
            c.stage("s", **{**STAGE, **(stage or {})})
    return dag


def spec(dag: DAG) -> ChainSpec:
    return ChainSpec.from_dict(dag.task_dict["c.setup"].chain)


def refused(argument: str, **where: dict[str, Any]) -> ChainConfigError:
    with pytest.raises(ChainConfigError) as err:
        build(**where)
    assert argument in err.value.field, err.value
    assert "Invalid arguments" not in str(err.value)
    return err.value


# a value other than KPO's default for every argument, and whether a chain takes it ("ok") or not
SAMPLES: dict[str, tuple[Any, str]] = {
    "kubernetes_conn_id": ("k8s_other", "ok"),
    "namespace": ("other", "ok"),
    "image": ("alpine:3.20", "ok"),
    "name": ("n", "ok"),
    "random_name_suffix": (False, "refused"),
    "cmds": (["echo", "hi"], "ok"),
    "arguments": (["x"], "ok"),
    "ports": ([k8s.V1ContainerPort(container_port=80)], "refused"),
    "volume_mounts": ([k8s.V1VolumeMount(name="data", mount_path="/data")], "ok"),
    "volumes": ([VOLUME], "ok"),
    "env_vars": ([k8s.V1EnvVar(name="A", value="1")], "ok"),
    "env_from": ([k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name="s"))], "ok"),
    "secrets": ([Secret("env", "A", "s", "k")], "ok"),
    "in_cluster": (True, "ok"),
    "cluster_context": ("ctx", "ok"),
    "labels": ({"team": "a"}, "ok"),
    "reattach_on_restart": (False, "refused"),
    "durable": (False, "refused"),
    "startup_timeout_seconds": (60, "ok"),
    "startup_check_interval_seconds": (3, "ok"),
    "schedule_timeout_seconds": (30, "ok"),
    "get_logs": (False, "refused"),
    "base_container_name": ("main", "refused"),
    "base_container_status_polling_interval": (2, "ok"),
    "init_container_logs": (True, "refused"),
    "container_logs": (["sidecar"], "refused"),
    "image_pull_policy": ("Always", "ok"),
    "annotations": ({"a": "b"}, "ok"),
    "container_resources": (k8s.V1ResourceRequirements(limits={"memory": "64Mi"}), "ok"),
    "affinity": (
        k8s.V1Affinity(
            node_affinity=k8s.V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                    node_selector_terms=[
                        k8s.V1NodeSelectorTerm(
                            match_expressions=[
                                k8s.V1NodeSelectorRequirement(key="disk", operator="In", values=["ssd"])
                            ]
                        )
                    ]
                )
            )
        ),
        "ok",
    ),
    "config_file": ("/etc/kubeconfig", "ok"),
    "runtime_class_name": ("gvisor", "ok"),
    "node_selector": ({"disk": "ssd"}, "ok"),
    "image_pull_secrets": ("a,b", "ok"),
    "service_account_name": ("runner", "ok"),
    "automount_service_account_token": (True, "ok"),
    "hostnetwork": (True, "refused"),
    "host_aliases": ([k8s.V1HostAlias(ip="10.0.0.1", hostnames=["db"])], "ok"),
    "tolerations": ([k8s.V1Toleration(key="k", operator="Exists")], "ok"),
    "security_context": (k8s.V1PodSecurityContext(run_as_user=1000), "ok"),
    "container_security_context": (k8s.V1SecurityContext(read_only_root_filesystem=True), "ok"),
    "xcom_sidecar_container_security_context": ({"runAsUser": 1}, "refused"),
    "dnspolicy": ("Default", "ok"),
    "dns_config": (k8s.V1PodDNSConfig(nameservers=["1.1.1.1"]), "ok"),
    "hostname": ("h", "ok"),
    "subdomain": ("s", "ok"),
    "schedulername": ("sched", "ok"),
    "full_pod_spec": (
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="ignored", labels={"from": "pod"}),
            spec=k8s.V1PodSpec(
                containers=[k8s.V1Container(name="base", working_dir="/work")], restart_policy="Never"
            ),
        ),
        "ok",
    ),
    "init_containers": ([k8s.V1Container(name="init", image="busybox:1.36", command=["true"])], "ok"),
    "log_events_on_failure": (True, "ok"),
    "log_events_on_startup": (False, "refused"),
    "do_xcom_push": (False, "ok"),
    "pod_template_file": ("pod.yaml", "ok"),
    "pod_template_dict": ({"spec": {"priorityClassName": "high"}}, "ok"),
    "priority_class_name": ("high", "ok"),
    "pod_runtime_info_envs": ([k8s.V1EnvVar(name="IP")], "refused"),
    "termination_grace_period": (5, "ok"),
    "configmaps": (["cm"], "ok"),
    "skip_on_exit_code": (99, "ok"),
    "deferrable": (True, "ok"),
    "poll_interval": (5, "ok"),
    "log_pod_spec_on_failure": (False, "ok"),
    "on_finish_action": ("keep_pod", "ok"),
    "on_kill_action": ("keep_pod", "refused"),
    "is_delete_operator_pod": (False, "ok"),
    "termination_message_policy": ("FallbackToLogsOnError", "refused"),
    "active_deadline_seconds": (30, "ok"),
    "callbacks": ([object], "refused"),
    "progress_callback": (print, "refused"),
    "logging_interval": (10, "ok"),
    "trigger_kwargs": ({"x": 1}, "refused"),
    "container_name_log_prefix_enabled": (False, "ok"),
    "log_formatter": (lambda container, line: line, "refused"),
}


def test_every_kpo_argument_has_a_row_in_kpo_order_and_a_sample() -> None:
    names = [p.name for p in KPO_PARAMETERS]
    assert list(ARGUMENTS) == names, "airflow_kruise_chain/kpo.py: add a row (in KPO's order), then docs"
    assert sorted(SAMPLES) == sorted(names)


def test_the_rows_know_kpos_defaults() -> None:
    """A `no` or `always` row accepts KPO's default (an author copying a KPO task asks for nothing then)."""
    for p in KPO_PARAMETERS:
        argument = ARGUMENTS[p.name]
        if argument.where in ("no", "always") and p.default is not inspect.Parameter.empty:
            assert argument.accepts is not None and argument.accepts(p.default), p.name


def where_taken(name: str) -> str:
    """`chain` or `stage`: where the sample of `name` is given."""
    return "chain" if ARGUMENTS[name].where.startswith("chain") and name != "deferrable" else "stage"


@pytest.mark.parametrize("name", [p.name for p in KPO_PARAMETERS if p.name != "name"])
def test_each_argument_is_taken_or_refused_naming_the_counterpart(
    name: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pod.yaml").write_text("spec:\n  priorityClassName: high\n")
    value, outcome = SAMPLES[name]
    if name == "pod_template_file":
        value = str(tmp_path / "pod.yaml")
    level = where_taken(name)
    given: dict[str, Any] = {level: {name: value}}
    if name == "volume_mounts":
        given["chain"] = {"volumes": [VOLUME]}
    if outcome == "refused":
        err = refused(name, **given)
        assert err.message and "not what a chain does" in err.message
        return
    dag = build(**given)
    assert "c.s" in dag.task_dict


@pytest.mark.parametrize(
    "name", [n for n, a in ARGUMENTS.items() if a.where == "chain" and n not in ("namespace", "name")]
)
def test_a_chain_wide_argument_on_a_stage_must_say_what_the_chain_says(
    name: str, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pod.yaml").write_text("spec:\n  priorityClassName: high\n")
    value, _ = SAMPLES[name]
    if name == "pod_template_file":
        value = str(tmp_path / "pod.yaml")
    build(chain={name: value}, stage={name: value})  # the same: accepted
    err = refused(name, stage={name: value})
    assert "KruiseChain(" in err.message and "chain-wide" in err.message


def test_image_pull_secrets_in_every_form_kpo_takes() -> None:
    for value in (
        "regcred",
        "a, b",
        ["a", "b"],
        [{"name": "a"}, {"name": "b"}],
        [k8s.V1LocalObjectReference(name="a"), k8s.V1LocalObjectReference(name="b")],
    ):
        names = spec(build(chain={"image_pull_secrets": value})).image_pull_secrets
        assert names in (("regcred",), ("a", "b")), value


def test_models_become_the_api_dicts() -> None:
    dag = build(
        chain={
            "tolerations": [k8s.V1Toleration(key="k", operator="Exists", effect="NoSchedule")],
            "volumes": [VOLUME],
            "security_context": k8s.V1PodSecurityContext(run_as_user=1000, fs_group=2000),
        },
        stage={
            "container_resources": k8s.V1ResourceRequirements(
                requests={"cpu": "100m"}, limits={"memory": "64Mi"}
            ),
            "env_vars": [
                k8s.V1EnvVar(name="A", value="1"),
                k8s.V1EnvVar(
                    name="P",
                    value_from=k8s.V1EnvVarSource(secret_key_ref=k8s.V1SecretKeySelector(name="s", key="pw")),
                ),
            ],
            "volume_mounts": [k8s.V1VolumeMount(name="data", mount_path="/data", read_only=True)],
            "env_from": [k8s.V1EnvFromSource(config_map_ref=k8s.V1ConfigMapEnvSource(name="cm"))],
        },
    )
    chain = spec(dag)
    assert chain.tolerations == ({"key": "k", "operator": "Exists", "effect": "NoSchedule"},)
    assert chain.volumes == ({"name": "data", "emptyDir": {}},)
    assert chain.security_context == {"runAsUser": 1000, "fsGroup": 2000}
    (stage,) = chain.stages
    assert stage.resources == {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}}
    assert stage.env == {"A": "1"}
    assert stage.env_sources == {"P": {"kind": "secret", "name": "s", "key": "pw"}}
    assert stage.volume_mounts == ({"name": "data", "mountPath": "/data", "readOnly": True},)
    assert stage.env_from == ({"kind": "configMap", "name": "cm"},)


def test_to_api_reads_models_by_duck_typing() -> None:
    assert to_api(k8s.V1ResourceRequirements(limits={"cpu": "1"})) == {"limits": {"cpu": "1"}}
    assert to_api([{"a": k8s.V1LocalObjectReference(name="x")}]) == [{"a": {"name": "x"}}]


@pytest.mark.parametrize(
    ("stage", "field", "says"),
    [
        ({"env": {"A": "1"}, "env_vars": {"A": "2"}}, "stages[0].env", "give one"),
        (
            {"resources": {"limits": {"cpu": "1"}}, "container_resources": {"limits": {"cpu": "2"}}},
            "stages[0].resources",
            "give one",
        ),
        (
            {
                "env_vars": [
                    k8s.V1EnvVar(
                        name="IP",
                        value_from=k8s.V1EnvVarSource(
                            field_ref=k8s.V1ObjectFieldSelector(field_path="status.podIP")
                        ),
                    )
                ]
            },
            "stages[0].env_vars[0].valueFrom",
            "template",
        ),
        (
            {"env_from": [k8s.V1EnvFromSource(prefix="X_", secret_ref=k8s.V1SecretEnvSource(name="s"))]},
            "stages[0].env_from[0].prefix",
            "env=",
        ),
        ({"cmds": None}, "stages[0].cmds", "ENTRYPOINT"),
        ({"image": None}, "stages[0].image", "required"),
    ],
)
def test_what_cannot_mean_kpos_meaning_is_refused_naming_the_field(stage, field, says) -> None:
    with pytest.raises(ChainConfigError) as err:
        build(stage=stage)
    assert err.value.field == field and says in err.value.message


def test_what_kpo_arguments_become() -> None:
    dag = build(
        chain={
            "startup_timeout_seconds": 60,
            "schedule_timeout_seconds": 30,
            "on_finish_action": "delete_succeeded_pod",
            "runtime_class_name": "gvisor",
            "container_security_context": {"readOnlyRootFilesystem": True},
        },
        stage={
            "active_deadline_seconds": 30,
            "startup_timeout_seconds": 20,
            "configmaps": ["cm"],
            "skip_on_exit_code": [3, 4],
        },
    )
    setup, stage, teardown = (dag.task_dict[f"c.{t}"] for t in ("setup", "s", "teardown"))
    assert setup.startup_timeout == 90
    assert teardown.keep_pod == "on_failure"
    chain = spec(dag)
    assert chain.pod_template["spec"]["runtimeClassName"] == "gvisor"
    assert [c["securityContext"] for c in chain.pod_template["spec"]["containers"]] == [
        {"readOnlyRootFilesystem": True}
    ] * 2
    assert (stage.stage_timeout, stage.swap_timeout, stage.skip_on_exit_code) == (30, 20, [3, 4])
    assert chain.stages[0].env_from == ({"kind": "configMap", "name": "cm"},)


def test_a_kpo_pod_template_gives_its_task_container_to_both_slots() -> None:
    pod = {
        "metadata": {"name": "x", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "base", "workingDir": "/w"}],
            "priorityClassName": "p",
        },
    }
    chain = spec(build(chain={"pod_template_dict": pod}))
    assert chain.pod_template == {
        "spec": {
            "priorityClassName": "p",
            "containers": [{"name": "slot-a", "workingDir": "/w"}, {"name": "slot-b", "workingDir": "/w"}],
        }
    }
    for bad, field in (
        (
            {"spec": {"containers": [{"name": "base", "image": "x:1"}]}},
            "pod_template_dict.spec.containers[base].image",
        ),
        (
            {"spec": {"containers": [{"name": "base"}, {"name": "sidecar"}]}},
            "pod_template_dict.spec.containers",
        ),
        ({"metadata": {"namespace": "other"}}, "pod_template_dict.metadata.namespace"),
    ):
        with pytest.raises(ChainConfigError) as err:
            build(chain={"pod_template_dict": bad})
        assert err.value.field == field
