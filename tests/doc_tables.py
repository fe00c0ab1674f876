"""The tables of the docs generated from the code: in docs/configuration.md the `[kruise_chain]` options from
`get_provider_info()`, the chain's and the stage's options from the signatures of `KruiseChain`,
`KruiseChain.stage`, `KruiseChainOperator` and the fields of `ChainSpec` (names, types, defaults), only the
one-line descriptions of the chain's and stage's options written here; in docs/writing-chains.md a stage's
XCom result, from the fields of `StageResult` and their descriptions (its `to_xcom` is made of them), and
the table of KubernetesPodOperator's arguments from `airflow_kruise_chain.kpo.ARGUMENTS` (where a chain
takes each, and how).

`python -m tests.doc_tables` rewrites the tables; tests/unit/test_docs.py fails when they differ from what
this module generates, or when an option has no description here.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
WRITING = ROOT / "docs" / "writing-chains.md"

CHAIN = {
    "name": "the chain's name: its task group and the stem of its pod's name",
    "namespace": "the namespace the chain pod runs in (required)",
    "prewarm": "add the `prewarm` task: one OpenKruise ImagePullJob per stage image on the pod's node",
    "on_prewarm_unavailable": "`fail`, or `skip` to let stages pull on demand when OpenKruise's "
    "ImagePullJobGate is off",
    "keep_pod": "keep the pod after the run (teardown leaves it; a clear reuses it)",
    "kubernetes_conn_id": "the Airflow connection ([connection.md](connection.md))",
    "config_file": "a kubeconfig path instead of the connection's (templated)",
    "cluster_context": "the kubeconfig context",
    "in_cluster": "use the worker's in-cluster service account",
    "deferrable": "the stages' default: hand a stage's wait to the triggerer after `defer_after` seconds",
    "defer_after": "the stages' default: seconds a deferrable stage is followed on the worker first; None: "
    "the trigger's hold, `[workers] min_heartbeat_interval` + 3 s (8 s by default)",
    "swap_timeout": "seconds from a stage's swap to its container running",
    "startup_timeout": "seconds for setup to create the pod and see both slots parked",
    "pull_timeout": "the prewarm ImagePullJobs' timeout, seconds",
    "prepare_next": "the stages' default: give the idle slot the next stage's image while a stage runs",
    "go_via_exec": "the stages' default: hand a go's run spec to the slot's runner through `pods/exec` too",
    "scratch_size_limit": "size limit of the scratch `emptyDir` at `$CHAIN_SCRATCH` (e.g. `1Gi`)",
    "node_selector": "the pod's nodeSelector",
    "tolerations": "the pod's tolerations",
    "affinity": "the pod's affinity",
    "service_account_name": "the pod's service account (every stage runs under it)",
    "image_pull_secrets": "names of Secrets for pulling the stage images",
    "security_context": "the pod's securityContext ([pod-security.md](pod-security.md))",
    "pod_template": "a pod manifest deep-merged over the generated one (lists of named items by name, "
    "`None` removes a key)",
    "labels": "extra labels of the pod",
    "annotations": "extra annotations of the pod",
    "sizing": "`auto`, `in-place` or `static` ([how-it-works.md](how-it-works.md#how-a-chain-is-sized))",
    "parked_resources": "what an idle slot keeps under in-place sizing (`requests`/`limits`)",
    "runner_image": "the image of the init container that installs the stage runner: a static busybox "
    "(default `[kruise_chain] runner_image`)",
    "volumes": "pod volumes the stages may mount (`volume_mounts`): both slots mount every stage's mounts",
    "pod_security": "`baseline` or `restricted`: the Pod Security level the chain pod meets "
    "([pod-security.md](pod-security.md))",
    "automount_service_account_token": "mount the service account's token into the chain pod",
}

STAGE = {
    "name": "the stage's name and task id (not `setup`, `prewarm` or `teardown`); or, as for "
    "KubernetesPodOperator, `task_id=` and the pod's `name=` (the stage's name in the pod: a DNS label, "
    "`write_xcom` runs as `write-xcom`)",
    "image": "the stage's image (templated)",
    "cmds": "the command, exactly as run (no shell unless it names one; the image's ENTRYPOINT is not used; "
    "templated)",
    "arguments": "appended to `cmds` (templated)",
    "env": "environment variables (templated; values travel in a pod annotation: no secrets), or "
    '`{"secretKeyRef": {"name", "key"}}` or `configMapKeyRef` ([credentials.md](credentials.md))',
    "secrets": 'cncf.kubernetes `Secret("env", NAME, secret, key)`s: Secret keys as env '
    "([credentials.md](credentials.md))",
    "env_from": '`[{"secretRef": {"name"}}]` or `configMapRef`: every key of it as env',
    "volume_mounts": "mounts of the chain's `volumes` (`name`, `mountPath`, `readOnly`, `subPath`); one "
    "mount per path across the chain ([writing-chains.md](writing-chains.md))",
    "allow_secret_env": "send an `env` value Airflow's secrets masker knows anyway (refused by default)",
    "resources": '`{"requests": {...}, "limits": {...}}` for the slot while the stage runs',
    "image_pull_policy": "`Always`, `IfNotPresent` or `Never` (default: Kubernetes' rule for the tag)",
    "stage_timeout": "seconds the stage may run; then it is stopped (SIGTERM) and fails",
    "pull_timeout": "seconds the slot may stay in `ContainerCreating` (the image pull) after the swap",
    "deferrable": "hand the stage's wait to the triggerer",
    "defer_after": "seconds to follow the stage on the worker before deferring",
    "prepare_next": "prepare the idle slot for the next stage",
    "go_via_exec": "hand a go's run spec to the slot's runner through `pods/exec` too",
    "skip_on_exit_code": "exit code(s) that skip the task instead of failing it (KubernetesPodOperator's)",
    "max_map_length": "a mapped stage's most map indexes (`chain.stage.partial`; 128 there): the pod records "
    "each",
}

DEFERRABLE = "`[operators] default_deferrable`"
"""The default of `deferrable`: Airflow's option, read at parse time (as KubernetesPodOperator does)."""

STAGE_FROM_CHAIN = {"swap_timeout", "stage_name", "container_resources", "env_sources"}
"""Operator arguments `chain.stage` sets itself (from the chain or its own arguments)."""


def _default(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return "required"
    if value is None:
        return "`None`"
    if isinstance(value, str):
        return f'`"{value}"`' if value else '`""`'
    return f"`{value!r}`"


def _type(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return f"`{text}`".replace("|", "\\|")


def _table(
    rows: list[tuple[str, ...]], header: tuple[str, ...] = ("option", "type", "default", "what")
) -> str:
    lines = [f"| {' | '.join(header)} |", f"|{'---|' * len(header)}"]
    lines += [f"| `{name}` | {' | '.join(rest)} |" for name, *rest in rows]
    return "\n".join(lines)


def chain_rows() -> list[tuple[str, str, str, str]]:
    from airflow_kruise_chain.chain import _POD_OPTIONS, KruiseChain
    from airflow_kruise_chain.core.spec import ChainSpec

    params = [p for p in inspect.signature(KruiseChain.__init__).parameters.values()]
    rows = [
        (
            p.name,
            _type(p.annotation),
            DEFERRABLE if p.name == "deferrable" else _default(p.default),
            CHAIN[p.name],
        )
        for p in params
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    fields = {f.name: f for f in dataclasses.fields(ChainSpec)}
    for name in _POD_OPTIONS:
        f = fields[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        rows.append((name, _type(f.type), _default(default), CHAIN[name]))
    return rows


def stage_rows() -> list[tuple[str, str, str, str]]:
    from airflow_kruise_chain.chain import KruiseChain
    from airflow_kruise_chain.operators.chain import KruiseChainOperator

    rows = []
    for p in inspect.signature(KruiseChain.stage).parameters.values():
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD:
            rows.append((p.name, _type(p.annotation), _default(p.default), STAGE[p.name]))
    named = {r[0] for r in rows}
    for p in inspect.signature(KruiseChainOperator.__init__).parameters.values():
        if p.name in ("self", *named, *STAGE_FROM_CHAIN) or p.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        default = (
            "the chain's"
            if p.name in ("deferrable", "defer_after", "prepare_next", "go_via_exec")
            else _default(p.default)
        )
        rows.append((p.name, _type(p.annotation), default, STAGE[p.name]))
    return rows


def config_rows() -> list[tuple[str, str, str, str]]:
    from airflow_kruise_chain import get_provider_info

    options = get_provider_info()["config"]["kruise_chain"]["options"]
    return [
        (name, f"`{o['type']}`", _default(o["default"]), " ".join(str(o["description"]).split()))
        for name, o in options.items()
    ]


def xcom_rows() -> list[tuple[str, str, str]]:
    from airflow_kruise_chain.core.status import StageResult

    # the XCom holds JSON: a time is its ISO 8601 text
    shown = {"datetime": "str"}
    rows = []
    for f in dataclasses.fields(StageResult):
        type_ = f.type if isinstance(f.type, str) else f.type.__name__
        rows.append((f.name, _type(shown.get(type_, type_)), f.metadata["doc"]))
    return rows


def kpo_rows() -> list[tuple[str, str, str]]:
    from airflow_kruise_chain.kpo import ARGUMENTS

    return [(name, a.where, a.how) for name, a in ARGUMENTS.items()]


TABLES = {
    "chain-options": (CONFIGURATION, chain_rows, None),
    "stage-options": (CONFIGURATION, stage_rows, None),
    "kruise-chain-options": (CONFIGURATION, config_rows, None),
    "xcom-result": (WRITING, xcom_rows, ("field", "type", "what")),
    "kpo-arguments": (WRITING, kpo_rows, ("argument", "here", "how, or why not")),
}


def render(text: str, doc: Path = CONFIGURATION) -> str:
    """`text` of `doc` with each of its generated tables (between `<!-- generated: NAME -->` and
    `<!-- end generated -->`) replaced by what the code says now."""
    for name, (path, rows, header) in TABLES.items():
        if path != doc:
            continue
        pattern = re.compile(rf"(<!-- generated: {name} -->\n).*?(<!-- end generated -->)", re.S)
        if not pattern.search(text):
            raise ValueError(f"{path.relative_to(ROOT)} has no '<!-- generated: {name} -->' block")
        table = _table(rows(), *([header] if header else []))
        text = pattern.sub(lambda m, table=table: m.group(1) + table + "\n" + m.group(2), text)
    return text


DOCS = (CONFIGURATION, WRITING)
"""the docs that hold generated tables"""

if __name__ == "__main__":
    for doc in DOCS:
        doc.write_text(render(doc.read_text(), doc))
    sys.exit(0)
