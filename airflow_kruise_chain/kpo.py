"""KubernetesPodOperator's arguments, one by one: what a chain does with each (cncf.kubernetes 10.x).

`ARGUMENTS` says, for every argument of `KubernetesPodOperator.__init__`, where a chain takes it (`chain`:
`KruiseChain(...)`, one pod for every stage; `stage`: `chain.stage(...)`; `always`: what KPO makes optional
is what a chain always does; `no`: refused, naming the counterpart) and how; docs/writing-chains.md's table
is generated from it (tests/doc_tables.py) and tests/unit/test_kpo_arguments.py walks KPO's signature so
that a new argument cannot go unnoticed. `chain_arguments` and `stage_arguments` translate the KPO names an
author passes into the chain's own options, accepting the `kubernetes.client` models KPO takes by duck
typing (`to_api`: nothing here imports the client, a DAG file's import stays light).

A chain-wide argument given to a stage is accepted when it says what the chain says, refused otherwise
naming the chain's option: a stage is a swap in a pod that already runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from airflow_kruise_chain.core.errors import ChainConfigError
from airflow_kruise_chain.core.manifest import deep_merge
from airflow_kruise_chain.templating import resolved_later

SLOT_NAMES = ("slot-a", "slot-b")
KPO_BASE_CONTAINER = "base"
"""The name KPO gives the task's container (its `base_container_name` default)."""


class ChainOptions(Protocol):
    """What a stage's chain-wide argument is compared with: the KPO arguments the chain was given, and the
    chain's value of each of its options."""

    kpo_given: Mapping[str, Any]

    def option(self, name: str) -> Any: ...


def to_api(value: Any) -> Any:
    """`value` in the Kubernetes API's JSON shape: a `kubernetes.client` model (anything with the client's
    `openapi_types` and `attribute_map`) as its camelCase dict, recursively; dicts, lists and scalars as
    they are."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, Mapping):
        return {k: to_api(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_api(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    types, names = getattr(type(value), "openapi_types", None), getattr(type(value), "attribute_map", None)
    if isinstance(types, Mapping) and isinstance(names, Mapping):
        return {
            names[attr]: to_api(getattr(value, attr)) for attr in types if getattr(value, attr) is not None
        }
    return value


def quantities(resources: Any) -> Any:
    """`resources` (``{"requests": {...}, "limits": {...}}``) with the numbers Kubernetes takes as quantities
    (``{"cpu": 1}``, ``0.5``: the client sends them as JSON numbers) as the quantity strings they mean."""
    if not isinstance(resources, Mapping):
        return resources
    return {
        kind: {
            name: str(q) if isinstance(q, (int, float)) and not isinstance(q, bool) else q
            for name, q in values.items()
        }
        if isinstance(values, Mapping)
        else values
        for kind, values in resources.items()
    }


def image_pull_secret_names(value: Any) -> list[str]:
    """Secret names from any form KPO takes: ``"a,b"`` (comma-separated, as KPO splits it), a list of names,
    of ``{"name": ...}`` dicts or of `V1LocalObjectReference`s."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    names = []
    for i, item in enumerate(to_api(value) or []):
        name = item.get("name") if isinstance(item, Mapping) else item
        if not isinstance(name, str):
            raise ChainConfigError(
                f"image_pull_secrets[{i}]",
                f"must be a Secret's name, {{'name': ...}} or V1LocalObjectReference, not {item!r}",
            )
        names.append(name)
    return names


def env_from_env_vars(value: Any) -> dict[str, Any]:
    """KPO's `env_vars` (a dict, or a list of `V1EnvVar`s / ``{"name", "value" | "valueFrom"}`` dicts) as a
    stage's `env` (a `valueFrom` Secret or ConfigMap key as its ``{"secretKeyRef": ...}`` value); an XComArg
    as it is (a dict of strings once it resolves, when the stage runs)."""
    if resolved_later(value):
        return value
    if isinstance(value, Mapping):
        return dict(value)
    env: dict[str, Any] = {}
    for i, item in enumerate(to_api(value) or []):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ChainConfigError(f"env_vars[{i}]", "must be a V1EnvVar or {'name': ..., 'value': ...}")
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = item.get("value", "")
        elif set(source) <= {"secretKeyRef", "configMapKeyRef"} and len(source) == 1:
            env[item["name"]] = source
        else:
            raise ChainConfigError(
                f"env_vars[{i}].valueFrom",
                "only secretKeyRef and configMapKeyRef: a stage gets no field or resource reference (a "
                "slot's environment is fixed when its container starts); pass such a value with a "
                "template, e.g. '{{ run_id }}'",
            )
    return env


def env_from_sources(value: Any) -> list[dict[str, Any]]:
    """KPO's `env_from` (`V1EnvFromSource`s or their dicts) as a stage's `env_from`."""
    sources = []
    for i, item in enumerate(to_api(value) or []):
        if isinstance(item, Mapping) and item.get("prefix"):
            raise ChainConfigError(
                f"env_from[{i}].prefix",
                "is not supported: name each key instead, env={'PREFIX_KEY': {'secretKeyRef': "
                "{'name': ..., 'key': 'KEY'}}}",
            )
        sources.append(
            {k: v for k, v in item.items() if k != "prefix"} if isinstance(item, Mapping) else item
        )
    return sources


def _template(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def pod_template_of(value: Any, field: str, namespace: str | None = None) -> dict[str, Any]:
    """A KPO pod (`full_pod_spec`, `pod_template_dict`, a pod template file) as a chain's `pod_template`:
    KPO's task container (named ``base``, or the only container) gives both slots its settings; what KPO
    replaces by its own arguments (the pod's name, `restartPolicy`) is dropped; the container's image,
    command, args and env belong to the stages."""
    pod = to_api(value)
    if not isinstance(pod, Mapping):
        raise ChainConfigError(field, "must be a pod (a dict or V1Pod)")
    pod = {k: dict(v) if isinstance(v, Mapping) else v for k, v in pod.items() if k in ("metadata", "spec")}
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    metadata.pop("name", None)
    if metadata.get("namespace") not in (None, namespace):
        raise ChainConfigError(
            f"{field}.metadata.namespace",
            f"is {metadata['namespace']!r}, not the chain's namespace {namespace!r}: "
            "set KruiseChain(namespace=...)",
        )
    metadata.pop("namespace", None)
    spec.pop("restartPolicy", None)
    containers = list(spec.pop("containers", None) or [])
    base = [c for c in containers if c.get("name") == KPO_BASE_CONTAINER] or containers[:1]
    if len(containers) > len(base):
        raise ChainConfigError(
            f"{field}.spec.containers",
            "a chain pod has no containers besides its two slots: a sidecar would run beside every stage; "
            "keep only the task's container (named 'base')",
        )
    if base:
        settings = {k: v for k, v in base[0].items() if k != "name"}
        owned = sorted(set(settings) & {"image", "command", "args", "env", "envFrom"})
        if owned:
            raise ChainConfigError(
                f"{field}.spec.containers[{KPO_BASE_CONTAINER}].{owned[0]}",
                "belongs to the stages: give it on chain.stage(...) (image, cmds, arguments, env, env_from)",
            )
        if settings:
            spec["containers"] = [{"name": slot, **settings} for slot in SLOT_NAMES]
    return {k: v for k, v in (("metadata", metadata), ("spec", spec)) if v}


def read_pod_template_file(path: str, searchpath: list[str]) -> Any:
    """The pod a KPO pod template file (YAML or JSON) holds, found as Airflow finds a template file: as
    given, or in the DAG's template search path (its folder first)."""
    import os

    import yaml

    candidates = [path] if os.path.isabs(path) else [os.path.join(d, path) for d in searchpath]
    for candidate in candidates:
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as file:
                text = file.read()
            if "{{" in text or "{%" in text:
                raise ChainConfigError(
                    "pod_template_file",
                    f"{candidate} is templated: the chain pod is built from it before any task renders "
                    "it; give the rendered pod as pod_template_dict",
                )
            return yaml.safe_load(text)
    raise ChainConfigError("pod_template_file", f"{path!r} not found (looked in {', '.join(candidates)})")


# -- how each argument is taken ---------------------------------------------------------------------------
Translate = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Argument:
    """One KPO argument: `where` a chain takes it, `how` (the docs' words, naming the counterpart), and
    what it becomes: `chain(value)` the `KruiseChain` options, `stage(value)` the `chain.stage` options;
    None where it is not taken. `default` is KPO's default: a `no` argument given it asks for nothing."""

    where: str
    how: str
    chain: Translate | None = None
    stage: Translate | None = None
    default: Any = None
    accepts: Callable[[Any], bool] | None = None
    """for `always` and `no`: the values that ask for what a chain does"""


def _to(name: str, convert: Callable[[Any], Any] = to_api) -> Translate:
    return lambda value: {name: convert(value)}


def _pod(*path: str) -> Translate:
    return lambda value: {"pod_template": _template(("spec", *path), to_api(value))}


def _slots(key: str) -> Translate:
    return lambda value: {
        "pod_template": {"spec": {"containers": [{"name": s, key: to_api(value)} for s in SLOT_NAMES]}}
    }


def _keep_pod(action: Any) -> dict[str, Any]:
    choices = {
        "delete_pod": False,
        "delete_active_pod": False,
        "keep_pod": True,
        "delete_succeeded_pod": "on_failure",
    }
    action = getattr(action, "value", action)
    if action not in choices:
        raise ChainConfigError("on_finish_action", f"must be one of {', '.join(choices)}, not {action!r}")
    return {"keep_pod": choices[action]}


def _is(*values: Any) -> Callable[[Any], bool]:
    return lambda value: getattr(value, "value", value) in values


def _positive(value: Any) -> bool:
    return value is None or (not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0)


def _configmaps(value: Any) -> dict[str, Any]:
    return {"env_from": [{"configMapRef": {"name": name}} for name in value or []]}


def _skip_codes(value: Any) -> dict[str, Any]:
    return {"skip_on_exit_code": value}


WATCHED = "watched, not polled: every change of the slot is seen when the API server reports it"
POD_TEMPLATE = "the chain pod's `pod_template`"

ARGUMENTS: dict[str, Argument] = {
    "kubernetes_conn_id": Argument(
        "chain",
        "`KruiseChain(kubernetes_conn_id=...)`, the same `kubernetes` connection "
        "([connection.md](connection.md))",
    ),
    "namespace": Argument("chain", "`KruiseChain(namespace=...)`, required"),
    "image": Argument("stage", "`chain.stage(image=...)`, templated"),
    "name": Argument(
        "chain, stage",
        'the chain\'s name names its pod (`KruiseChain("etl")`: the pod is `etl-` and a hash of the DAG '
        'and run); `chain.stage(task_id="write_xcom", name="writer")` names the stage in the pod, made a '
        "DNS label as KPO makes a pod's name (by default from the task id: `write-xcom`); a TaskFlow stage's "
        "name is its task id's",
    ),
    "random_name_suffix": Argument(
        "always",
        "the pod's name always ends in a hash of the DAG and run (one pod per chain and run, found again by "
        "a retry); `False` is refused: it cannot be exactly `name`",
        default=True,
        accepts=_is(True),
    ),
    "cmds": Argument(
        "stage",
        "`chain.stage(cmds=[...])`, required (the image's ENTRYPOINT is not used: the runner is the slot's "
        "command), templated",
    ),
    "arguments": Argument("stage", "appended to `cmds`, templated"),
    "ports": Argument(
        "no",
        "a pod's ports are fixed when it is created and a stage is short-lived: declare them on the slots "
        'with `pod_template={"spec": {"containers": [{"name": "slot-a", "ports": [...]}, ...]}}`',
        default=None,
        accepts=lambda v: not v,
    ),
    "volume_mounts": Argument(
        "stage",
        "`chain.stage(volume_mounts=[...])` (dicts or `V1VolumeMount`s) of the chain's `volumes`: both slots "
        "mount every stage's mounts when the pod is created, so two stages may not mount different things at "
        "one path (refused at parse); stages also share `$CHAIN_SCRATCH`",
        stage=_to("volume_mounts"),
    ),
    "volumes": Argument(
        "chain",
        "`KruiseChain(volumes=[...])` (dicts or `V1Volume`s), mounted by the stages that name them: a "
        "running pod cannot gain volumes",
        chain=_to("volumes"),
    ),
    "env_vars": Argument(
        "stage",
        "`chain.stage(env_vars=...)` or `env={...}`: a dict or `V1EnvVar`s, templated; not for secrets (the "
        "values travel in a pod annotation): `valueFrom` Secret and ConfigMap keys are read by the runner "
        "([credentials.md](credentials.md)); field and resource references are refused",
        stage=_to("env", env_from_env_vars),
    ),
    "env_from": Argument(
        "stage",
        '`chain.stage(env_from=[...])`: `V1EnvFromSource`s or `{"secretRef": {"name": ...}}` / '
        "`configMapRef` dicts; the runner reads the keys from the slots' read-only mounts (`prefix` is "
        "refused) ([credentials.md](credentials.md))",
        stage=_to("env_from", env_from_sources),
    ),
    "secrets": Argument(
        "stage",
        '`chain.stage(secrets=[Secret("env", NAME, secret, key)])`; `Secret("volume", ...)` is refused: '
        "mount it for the chain with `pod_template` ([credentials.md](credentials.md))",
    ),
    "in_cluster": Argument("chain", "`KruiseChain(in_cluster=True)`"),
    "cluster_context": Argument("chain", "`KruiseChain(cluster_context=...)`"),
    "labels": Argument(
        "chain", "`KruiseChain(labels={...})`: the pod's (a stage is not a pod)", chain=_to("labels")
    ),
    "reattach_on_restart": Argument(
        "always",
        "every try looks at the stage's latest generation first and follows, adopts or re-runs it "
        "([how-it-works.md](how-it-works.md#retries-dead-workers-stopping-and-timeouts)); `False` is refused",
        accepts=_is(True, None),
    ),
    "durable": Argument(
        "always",
        "a try that succeeds records what it delivered in `task_state_store` (Airflow 3.3+); `False` is "
        "refused",
        accepts=_is(True, None),
    ),
    "startup_timeout_seconds": Argument(
        "chain, stage",
        "`KruiseChain(startup_timeout=...)` for the pod (with `schedule_timeout_seconds`), a stage's "
        "`swap_timeout` for its start",
        chain=_to("startup_timeout", lambda v: v),
        stage=_to("swap_timeout", lambda v: v),
    ),
    "startup_check_interval_seconds": Argument("always", WATCHED, default=5, accepts=_positive),
    "schedule_timeout_seconds": Argument(
        "chain",
        "the pod is scheduled once, by the chain's setup: added to its `startup_timeout`",
        chain=_to("schedule_timeout", lambda v: v),
    ),
    "get_logs": Argument(
        "always",
        "the stage's output is always streamed into the task log; `False` is refused",
        default=True,
        accepts=_is(True),
    ),
    "base_container_name": Argument(
        "no", "the slots are `slot-a` and `slot-b`; a stage runs in either", accepts=_is(None, "base")
    ),
    "base_container_status_polling_interval": Argument("always", WATCHED, default=1, accepts=_positive),
    "init_container_logs": Argument(
        "no",
        "the chain's one init container copies the runner; its failure is reported by setup",
        accepts=lambda v: not v,
    ),
    "container_logs": Argument(
        "always",
        "the stage's output, as it runs in its slot (one container per task log)",
        accepts=_is(None, True, "base"),
    ),
    "image_pull_policy": Argument("stage", "`chain.stage(image_pull_policy=...)`"),
    "annotations": Argument("chain", "`KruiseChain(annotations={...})`: the pod's", chain=_to("annotations")),
    "container_resources": Argument(
        "stage",
        "`chain.stage(container_resources=...)` or `resources=`: a dict or `V1ResourceRequirements`; each "
        "stage sized in place ([how-it-works.md](how-it-works.md#how-a-chain-is-sized))",
        stage=_to("resources"),
    ),
    "affinity": Argument(
        "chain", "`KruiseChain(affinity=...)`: a dict or `V1Affinity`", chain=_to("affinity")
    ),
    "config_file": Argument("chain", "`KruiseChain(config_file=...)`, templated"),
    "runtime_class_name": Argument(
        "chain", f"`KruiseChain(runtime_class_name=...)`, into {POD_TEMPLATE}", chain=_pod("runtimeClassName")
    ),
    "node_selector": Argument("chain", "`KruiseChain(node_selector={...})`", chain=_to("node_selector")),
    "image_pull_secrets": Argument(
        "chain",
        '`KruiseChain(image_pull_secrets=...)` for every stage image: `"a,b"` (comma-separated, as KPO), '
        'a list of names, of `{"name": ...}` or of `V1LocalObjectReference`s',
        chain=_to("image_pull_secrets", image_pull_secret_names),
    ),
    "service_account_name": Argument(
        "chain",
        "`KruiseChain(service_account_name=...)`: one identity for all stages (put stages of different trust "
        "in different chains)",
        chain=_to("service_account_name"),
    ),
    "automount_service_account_token": Argument(
        "chain",
        "`KruiseChain(automount_service_account_token=True)` (off by default: a stage could use the token)",
        chain=_to("automount_service_account_token"),
    ),
    "hostnetwork": Argument(
        "no",
        "a chain pod never joins the node's network namespace: it keeps Pod Security baseline, which forbids "
        "host namespaces ([security.md](security.md))",
        default=False,
        accepts=lambda v: not v,
    ),
    "host_aliases": Argument(
        "chain", f"`KruiseChain(host_aliases=[...])`, into {POD_TEMPLATE}", chain=_pod("hostAliases")
    ),
    "tolerations": Argument(
        "chain", "`KruiseChain(tolerations=[...])`: dicts or `V1Toleration`s", chain=_to("tolerations")
    ),
    "security_context": Argument(
        "chain",
        "`KruiseChain(security_context={...})`: the pod's (a dict or `V1PodSecurityContext`)",
        chain=_to("security_context"),
    ),
    "container_security_context": Argument(
        "chain",
        f"`KruiseChain(container_security_context=...)`: both slots', into {POD_TEMPLATE} (fixed when the "
        "pod is created, so shared by every stage)",
        chain=_slots("securityContext"),
    ),
    "xcom_sidecar_container_security_context": Argument(
        "no", "no sidecar: a stage's result travels in its log (`$CHAIN_OUTPUT`)", accepts=lambda v: not v
    ),
    "dnspolicy": Argument(
        "chain", f"`KruiseChain(dnspolicy=...)`, into {POD_TEMPLATE}", chain=_pod("dnsPolicy")
    ),
    "dns_config": Argument(
        "chain", f"`KruiseChain(dns_config=...)`, into {POD_TEMPLATE}", chain=_pod("dnsConfig")
    ),
    "hostname": Argument(
        "chain", f"`KruiseChain(hostname=...)`, into {POD_TEMPLATE}", chain=_pod("hostname")
    ),
    "subdomain": Argument(
        "chain", f"`KruiseChain(subdomain=...)`, into {POD_TEMPLATE}", chain=_pod("subdomain")
    ),
    "schedulername": Argument(
        "chain", f"`KruiseChain(schedulername=...)`, into {POD_TEMPLATE}", chain=_pod("schedulerName")
    ),
    "full_pod_spec": Argument(
        "chain",
        "`KruiseChain(full_pod_spec=V1Pod(...))`: deep-merged over the generated pod; its task container "
        "(`base`) gives both slots its settings (its image, command, args and env are the stages')",
    ),
    "init_containers": Argument(
        "chain",
        f"`KruiseChain(init_containers=[...])`, into {POD_TEMPLATE}: run once, before the first stage",
        chain=_pod("initContainers"),
    ),
    "log_events_on_failure": Argument(
        "always",
        "the slot's waiting reasons and failures are in the task log; `False` is refused",
        default=False,
        accepts=_is(True, False),
    ),
    "log_events_on_startup": Argument(
        "always", "the same, while a stage starts; `False` is refused", default=True, accepts=_is(True)
    ),
    "do_xcom_push": Argument(
        "stage",
        "`True` is refused on `chain.stage`: KPO pushes the JSON its container wrote to "
        "`/airflow/xcom/return.json`, a chain stage writes a JSON object to `$CHAIN_OUTPUT`, read as its "
        "XCom `return_value['outputs']` (a stage's result is always pushed, `False` too); a TaskFlow "
        "stage's return value is its `return_value`, as with `@task.kubernetes`",
    ),
    "pod_template_file": Argument(
        "chain",
        "`KruiseChain(pod_template_file=...)`: the file read when the DAG is parsed (found as Airflow finds "
        "a template file), then as `full_pod_spec`; a templated file is refused",
        chain=lambda v: {"pod_template_file": v},
    ),
    "pod_template_dict": Argument(
        "chain",
        "`KruiseChain(pod_template_dict={...})`: as `full_pod_spec`",
    ),
    "priority_class_name": Argument(
        "chain",
        f"`KruiseChain(priority_class_name=...)`, into {POD_TEMPLATE}",
        chain=_pod("priorityClassName"),
    ),
    "pod_runtime_info_envs": Argument(
        "no",
        "a slot's environment is fixed when its container starts and the runner gives each stage its own env "
        'only: pass the run\'s facts with templates (`env={"RUN": "{{ run_id }}"}`)',
        accepts=lambda v: not v,
    ),
    "termination_grace_period": Argument(
        "chain",
        f"`KruiseChain(termination_grace_period=...)`, into {POD_TEMPLATE} (a stopped stage gets SIGTERM, "
        "then SIGKILL after it)",
        chain=_pod("terminationGracePeriodSeconds"),
    ),
    "configmaps": Argument(
        "stage",
        '`chain.stage(configmaps=[NAME])`: every key as env, as `env_from=[{"configMapRef": ...}]`',
        stage=_configmaps,
    ),
    "skip_on_exit_code": Argument(
        "stage",
        "`chain.stage(skip_on_exit_code=...)`: the task is skipped when the stage exits with it",
        stage=_skip_codes,
    ),
    "deferrable": Argument("chain, stage", "`deferrable=True` (and `defer_after`)"),
    "poll_interval": Argument("always", WATCHED, default=2, accepts=_positive),
    "log_pod_spec_on_failure": Argument(
        "always",
        "the pod is the chain's: a failed stage's task log shows its swap (slot, image, generation) and its "
        "last lines; `False` is accepted",
        default=True,
        accepts=_is(True, False),
    ),
    "on_finish_action": Argument(
        "chain",
        "`KruiseChain(on_finish_action=...)`: `delete_pod` and `delete_active_pod` (the chain pod is active "
        "until teardown) delete it, `keep_pod` is `keep_pod=True`, `delete_succeeded_pod` is "
        '`keep_pod="on_failure"`',
        chain=_keep_pod,
        default="delete_pod",
    ),
    "on_kill_action": Argument(
        "always",
        "`on_kill` stops the running stage (its slot's stop annotation: SIGTERM, SIGKILL after the grace "
        "period); the chain pod stays for the other stages: `keep_pod` is refused",
        default="delete_pod",
        accepts=_is("delete_pod"),
    ),
    "is_delete_operator_pod": Argument(
        "chain",
        "see `on_finish_action`: `False` is `keep_pod=True`",
        chain=lambda v: {} if v is None else {"keep_pod": not v},
    ),
    "termination_message_policy": Argument(
        "no", "the runner writes the termination message", default="File", accepts=_is("File")
    ),
    "active_deadline_seconds": Argument(
        "stage",
        "`chain.stage(active_deadline_seconds=...)` or `stage_timeout`: the stage is stopped then "
        "and fails; the pod has no deadline",
        stage=_to("stage_timeout", lambda v: v),
    ),
    "callbacks": Argument(
        "no",
        "the chain's events are in the task log and the chain page; use Airflow's `on_*_callback`s",
        accepts=lambda v: not v,
    ),
    "progress_callback": Argument(
        "no", "the stage's lines go to the task log as they come", accepts=lambda v: v is None
    ),
    "logging_interval": Argument(
        "always", "a deferred stage's output is logged by the triggerer as it comes", accepts=_positive
    ),
    "trigger_kwargs": Argument(
        "no", "the stage's trigger takes `deferrable` and `defer_after`", accepts=lambda v: not v
    ),
    "container_name_log_prefix_enabled": Argument(
        "always", "one stage's output per task log, with no prefix", default=True, accepts=_is(True, False)
    ),
    "log_formatter": Argument(
        "no", "the lines are logged as the stage prints them", accepts=lambda v: v is None
    ),
}
"""Every argument of cncf.kubernetes' `KubernetesPodOperator.__init__` (10.x), in its order."""

KPO_PODS = frozenset({"full_pod_spec", "pod_template_dict"})
"""KPO arguments holding a whole pod (`pod_template_of`)."""
NATIVE_CHAIN = frozenset(
    {"kubernetes_conn_id", "namespace", "name", "in_cluster", "cluster_context", "config_file", "deferrable"}
)
"""KPO arguments that are `KruiseChain`'s own parameters, of the same name and meaning."""
NATIVE_STAGE = frozenset(
    {"image", "cmds", "arguments", "secrets", "image_pull_policy", "do_xcom_push", "deferrable", "name"}
)
"""KPO arguments that are `chain.stage`'s own (or any operator's), of the same name and meaning."""


XCOM_FILE_HELP = (
    "is KubernetesPodOperator's push of the JSON its container writes to /airflow/xcom/return.json, a file a "
    "chain stage's result does not read (a slot outlives its stage and runs the next one): have the stage "
    'write a JSON object to $CHAIN_OUTPUT instead (e.g. echo \'{"values": [1, 2]}\' > "$CHAIN_OUTPUT"), '
    "which downstream tasks read as the stage's XCom return_value['outputs']; drop do_xcom_push (a stage's "
    "result is always pushed), or make a Python function a stage with @chain.task (its return value is its "
    "return_value, as with @task.kubernetes)"
)


def refuse_xcom_file(where: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse KPO's ``do_xcom_push=True`` on a command stage (`XCOM_FILE_HELP`); `False`, or none given, asks
    for nothing a stage does not do."""
    if kwargs.get("do_xcom_push") is True:
        raise ChainConfigError(f"{where}.do_xcom_push", XCOM_FILE_HELP)


def chain_arguments(kwargs: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    """`KruiseChain`'s keyword arguments with each KPO argument replaced by the chain options it means
    (`namespace`: the chain's, which a KPO pod's must match); ChainConfigError names one it refuses, and
    the counterpart."""
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        argument = ARGUMENTS.get(name)
        if argument is None or name in NATIVE_CHAIN:
            _merge(out, {name: value}, name)
        elif name in KPO_PODS:
            _merge(out, {"pod_template": pod_template_of(value, name, namespace)}, name)
        else:
            _merge(out, _translate(name, argument, value, argument.chain), name)
    return out


def stage_arguments(kwargs: dict[str, Any], chain: ChainOptions) -> dict[str, Any]:
    """`chain.stage`'s keyword arguments with each KPO argument replaced by the stage options it means; a
    chain-wide one is accepted when it says what `chain` says. ChainConfigError names one it refuses, and
    the counterpart."""
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        argument = ARGUMENTS.get(name)
        if argument is None or name in NATIVE_STAGE:
            _merge(out, {name: value}, name)
            continue
        if argument.stage is None and argument.where.startswith("chain"):
            _same_as_chain(name, argument, value, chain)
            continue
        _merge(out, _translate(name, argument, value, argument.stage), name)
    return out


def _translate(name: str, argument: Argument, value: Any, translate: Translate | None) -> dict[str, Any]:
    if translate is not None:
        return translate(value)
    if argument.accepts is not None and argument.accepts(value):
        return {}
    if argument.where in ("always", "no"):
        raise ChainConfigError(name, f"{to_api(value)!r} is not what a chain does: {_plain(argument.how)}")
    raise ChainConfigError(name, f"is a stage's, not the chain's: {_plain(argument.how)}")


def _same_as_chain(name: str, argument: Argument, value: Any, chain: ChainOptions) -> None:
    if value is None or (argument.default is not None and value == argument.default):
        return  # asks for nothing
    if name in chain.kpo_given:
        same = to_api(chain.kpo_given[name]) == to_api(value)
    else:
        translate = argument.chain or (lambda v: {name: v})
        same = True
        for option, wanted in (translate(value) if name not in KPO_PODS else {}).items():
            have = chain.option(option)
            if option == "pod_template":
                same = same and deep_merge(have or {}, wanted) == (have or {})
            else:
                same = same and have == wanted
        same = same and name not in KPO_PODS
    if not same:
        raise ChainConfigError(
            name,
            f"is chain-wide (one pod runs every stage): set it on the chain, KruiseChain({name}=...) "
            f"({_plain(argument.how)}); this stage's {to_api(value)!r} differs from the chain's",
        )


def _merge(out: dict[str, Any], new: dict[str, Any], name: str) -> None:
    for key, value in new.items():
        if key == "pod_template" and key in out:
            out[key] = deep_merge(out[key], value)
        elif key in out and out[key] != value:
            raise ChainConfigError(
                name, f"says {key}={value!r}, but {key}={out[key]!r} is given too: give one"
            )
        else:
            out[key] = value


def _plain(text: str) -> str:
    return text.replace("`", "")
