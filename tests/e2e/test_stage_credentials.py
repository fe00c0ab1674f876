"""Stage credentials and config from Secrets and ConfigMaps: a value reaches the stage's environment and
nothing else (no pod version, event, task log line or XCom holds it); a stage gets only the keys it declared;
an `env` value Airflow's secrets masker knows is refused before anything runs."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

pytestmark = pytest.mark.slow
START = pendulum.datetime(2026, 1, 1, tz="UTC")
SECRET = "pa$$ 'w0rd' \"kc-7f3a91\"\nsecond line\n\n"  # quotes, $, newlines, trailing ones too
USE = r"""
printf '%s' "$DB_PASSWORD" | sha256sum | cut -d' ' -f1 > "$CHAIN_SCRATCH/sha"
echo "stage ran with mode=$mode level=$level"
printf '{"sha": "%s", "mode": "%s", "level": "%s", "token": "%s"}' "$(cat "$CHAIN_SCRATCH/sha")" \
  "$mode" "$level" "${API_TOKEN:-unset}" > "$CHAIN_OUTPUT"
"""
OTHER = r"""
printf '{"db": "%s", "mode": "%s"}' "${DB_PASSWORD+set}" "${mode+set}" > "$CHAIN_OUTPUT"
"""


def _api(kubeconfig: Any) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))


def test_a_secret_reaches_the_stage_env_and_nothing_else(e2e_cluster, tmp_path, capfd) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    core = _api(cluster.write_kubeconfig(tmp_path / "admin"))
    core.create_namespaced_secret(
        "default",
        {
            "metadata": {"name": "db-creds"},
            "data": {"password": base64.b64encode(SECRET.encode()).decode(), "token": "dG9rZW4tdmFsdWU="},
        },
    )
    core.create_namespaced_config_map(
        "default",
        {"metadata": {"name": "app-config"}, "data": {"mode": "strict", "level": "3", "bad-key": "x"}},
    )
    history: list[tuple[str, Any, dict]] = []
    cluster.call(lambda: cluster.store.listen(lambda kind, res, obj, old: history.append((kind, res, obj))))

    with DAG("stage_credentials", schedule=None, start_date=START) as dag:
        with KruiseChain("cred", namespace="default", prewarm=False, **FAST_POD) as chain:
            use = chain.stage(
                "use",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", USE],
                env={"DB_PASSWORD": {"secretKeyRef": {"name": "db-creds", "key": "password"}}},
                env_from=[{"configMapRef": {"name": "app-config"}}],
            )
            other = chain.stage("other", image="busybox:1.36", cmds=["/bin/sh", "-c", OTHER])
            use >> other
    run = run_inline(dag)
    out = capfd.readouterr()
    states = task_states(run)
    assert str(run.state) == "success", states

    results = xcoms(run)
    # in the declaring stage's environment, byte for byte; the undeclared key of the same Secret is not
    assert results["cred.use"]["outputs"] == {
        "sha": hashlib.sha256(SECRET.encode()).hexdigest(),
        "mode": "strict",
        "level": "3",
        "token": "unset",
    }
    assert results["cred.other"]["outputs"] == {"db": "", "mode": ""}  # the next stage declared nothing
    assert "stage ran with mode=strict level=3" in out.out  # the task log was captured

    # nowhere else: no version of any object but the Secret, no event, no task log line, no XCom
    needles = [SECRET.split("\n", 1)[0], "kc-7f3a91", base64.b64encode(SECRET.encode()).decode()]
    others = [json.dumps(obj) for kind, res, obj in history if res.plural != "secrets"]
    # the pod's versions are there, their run specs holding the key's path only
    assert any("kc_env_file DB_PASSWORD /kruise-chain-sources/secret/db-creds/password" in t for t in others)
    for needle in needles:
        assert not any(needle in text for text in others), needle
        assert needle not in out.out and needle not in out.err, needle
        assert needle not in json.dumps(results), needle
    events = core.list_namespaced_event("default").items
    assert not any("kc-7f3a91" in str(e.message) for e in events)

    # the pod mounts what the chain declared, read-only, in both slots
    pod = next(obj for kind, res, obj in history if res.plural == "pods" and kind == "ADDED")
    mounts = {c["name"]: c["volumeMounts"] for c in pod["spec"]["containers"]}
    for slot in ("slot-a", "slot-b"):
        paths = {m["mountPath"]: m.get("readOnly") for m in mounts[slot]}
        assert paths["/kruise-chain-sources/secret/db-creds"] is True
        assert paths["/kruise-chain-sources/configmap/app-config"] is True


def test_a_missing_key_fails_the_stage_naming_it(e2e_cluster, tmp_path) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    core = _api(e2e_cluster.write_kubeconfig(tmp_path / "admin"))
    core.create_namespaced_secret("default", {"metadata": {"name": "creds"}, "stringData": {"a": "1"}})
    with DAG("stage_credentials_missing_key", schedule=None, start_date=START) as dag:
        with KruiseChain("cred", namespace="default", prewarm=False, **FAST_POD) as chain:
            chain.stage(
                "use",
                image="busybox:1.36",
                cmds=["true"],
                env={"B": {"secretKeyRef": {"name": "creds", "key": "b"}}},
            )
    run = run_inline(dag)
    assert task_states(run)["cred.use"][0] == "failed"
    result = xcoms(run)["cred.use"]
    assert result["exit_code"] == 78
    assert any(
        "env B: /kruise-chain-sources/secret/creds/b is not mounted" in line for line in result["log_tail"]
    )


def test_an_env_value_the_secrets_masker_knows_is_refused_before_the_swap(e2e_cluster, monkeypatch) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    monkeypatch.setenv(
        "AIRFLOW_CONN_WAREHOUSE",
        json.dumps({"conn_type": "postgres", "login": "u", "password": "kc-masked-42"}),
    )
    failures: dict[str, BaseException] = {}
    with DAG("stage_credentials_masked", schedule=None, start_date=START) as dag:
        with KruiseChain("cred", namespace="default", prewarm=False, **FAST_POD) as chain:
            chain.stage(
                "leaky",
                image="busybox:1.36",
                cmds=["true"],
                env={"PASSWORD": "{{ conn.warehouse.password }}"},
                on_failure_callback=lambda ctx: failures.setdefault("leaky", ctx["exception"]),
            )
            chain.stage(
                "allowed",
                image="busybox:1.36",
                cmds=["true"],
                env={"PASSWORD": "{{ conn.warehouse.password }}"},
                allow_secret_env=True,
            )
    run = run_inline(dag)
    states = task_states(run)
    assert states["cred.leaky"][0] == "failed" and states["cred.allowed"][0] == "success", states
    message = str(failures["leaky"])
    assert "env['PASSWORD']" in message and "secretKeyRef" in message and "kc-masked-42" not in message


def test_stages_mount_a_chain_volume_at_their_own_paths(e2e_cluster, tmp_path) -> None:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    core = _api(e2e_cluster.write_kubeconfig(tmp_path / "admin"))
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "settings"}, "data": {"threshold": "42"}}
    )
    read = 'printf \'{"t": "%s"}\' "$(cat {path}/threshold)" > "$CHAIN_OUTPUT"'
    volumes = [{"name": "settings", "configMap": {"name": "settings"}}]
    with DAG("stage_mounts", schedule=None, start_date=START) as dag:
        with KruiseChain("vol", namespace="default", prewarm=False, volumes=volumes, **FAST_POD) as chain:
            a = chain.stage(
                "a",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", read.replace("{path}", "/settings")],
                volume_mounts=[{"name": "settings", "mountPath": "/settings", "readOnly": True}],
            )
            b = chain.stage(
                "b",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", read.replace("{path}", "/conf")],
                volume_mounts=[{"name": "settings", "mountPath": "/conf", "readOnly": True}],
            )
            a >> b
    run = run_inline(dag)
    assert str(run.state) == "success", task_states(run)
    results = xcoms(run)
    assert results["vol.a"]["outputs"] == {"t": "42"} and results["vol.b"]["outputs"] == {"t": "42"}
