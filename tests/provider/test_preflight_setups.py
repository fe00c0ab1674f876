"""`kruise-chain check` fails when it cannot tell, on each set-up a real cluster can get wrong: no kubeconfig,
an API server out of reach, credentials it refuses, an anonymous connection, a missing namespace, a runner
image that no node can pull or that is not a runner, an identity the shipped admission policy does not hold;
and it passes deploy/ applied as a whole, as deploy/'s identity. `--output json` follows its documented
schema; the connection's Test button says the same."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kruise_local import ClusterConfig, LocalCluster

from airflow_kruise_chain.preflight import CHECKS, FAIL, OK, SCHEMA, SKIP, UNKNOWN, WARN

ROOT = Path(__file__).resolve().parents[2]
NO_POLICY = ("--without", "admission-policy")
NS = "chains"
IDENTITY = "system:serviceaccount:chains:airflow-kruise-chain"
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")


def check_json(kubeconfig: Path | str, *args: str) -> tuple[int, dict[str, Any]]:
    """(exit status, JSON document) of `kruise-chain check --output json`, run in this process."""
    from airflow_kruise_chain.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check", "--kubeconfig", str(kubeconfig), "--output", "json", *args])
    return status, json.loads(out.getvalue())


def found(doc: dict[str, Any], check: str) -> dict[str, Any]:
    return next(f for f in doc["findings"] if f["check"] == check)


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "cluster"))) as cluster:
        yield cluster, cluster.write_kubeconfig(tmp_path / "kubeconfig")


def test_an_empty_kubeconfig_fails_naming_the_fix() -> None:
    status, doc = check_json("/dev/null")
    assert status == 1 and doc["exit_code"] == 1 and doc["ok"] is False
    connection = found(doc, "connection")
    assert (
        connection["status"] == FAIL and "cannot load the connection's configuration" in connection["detail"]
    )
    assert "--kubeconfig" in connection["fix"]
    assert {f["status"] for f in doc["findings"][1:]} == {SKIP}  # nothing else could be checked


def test_an_api_server_out_of_reach_fails(bare, tmp_path: Path) -> None:
    _, kubeconfig = bare
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # discard: nothing listens
    (tmp_path / "away").write_text(yaml.safe_dump(config))
    status, doc = check_json(tmp_path / "away")
    assert status == 1
    connection = found(doc, "connection")
    assert connection["status"] == FAIL
    assert "cannot reach the API server at http://127.0.0.1:9" in connection["detail"]


def test_credentials_the_api_server_refuses_fail(bare, tmp_path: Path) -> None:
    cluster, _ = bare
    cluster.enable_rbac()
    status, doc = check_json(cluster.write_kubeconfig(tmp_path / "bogus", token="not-a-token"))
    assert status == 1
    connection = found(doc, "connection")
    assert connection["status"] == FAIL and "401 Unauthorized" in connection["detail"]
    assert "renew the token" in connection["fix"]


def test_an_anonymous_connection_fails(bare, tmp_path: Path) -> None:
    cluster, kubeconfig = bare
    cluster.enable_rbac()
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"] = {}
    (tmp_path / "anonymous").write_text(yaml.safe_dump(config))
    status, doc = check_json(tmp_path / "anonymous")
    assert status == 1
    identity = found(doc, "identity")
    assert identity["status"] == FAIL and "system:anonymous" in identity["detail"]
    assert "token" in identity["fix"]


def test_a_missing_namespace_fails_naming_the_commands_that_make_it(bare) -> None:
    _, kubeconfig = bare
    status, doc = check_json(kubeconfig, "-n", "nope", *NO_POLICY)
    assert status == 1
    namespace = found(doc, "namespace")
    assert namespace["status"] == FAIL and namespace["detail"] == "the namespace 'nope' does not exist"
    assert (
        "kubectl create namespace nope" in namespace["fix"] and "kubectl apply -k deploy/" in namespace["fix"]
    )
    assert found(doc, "runner")["status"] == SKIP  # nothing was created


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("registry.example.com/mirror/busybox:1.37.0-musl", "cannot be pulled"),  # not on any registry
        ("gcr.io/distroless/static-debian12:nonroot", "cannot run /bin/sh"),  # not a busybox: no shell
    ],
)
def test_a_runner_the_cluster_cannot_deliver_fails(bare, image: str, said: str) -> None:
    _, kubeconfig = bare
    status, doc = check_json(kubeconfig, "--runner-image", image, *NO_POLICY)
    assert status == 1 and "chains can run here" not in doc["verdict"]
    runner = found(doc, "runner")
    assert runner["status"] == FAIL and said in runner["detail"] and image in runner["detail"]
    assert runner["required"] is True


def test_the_json_document_follows_its_schema(bare) -> None:
    _, kubeconfig = bare
    status, doc = check_json(kubeconfig, *NO_POLICY, "--no-probe")
    assert set(doc) == {
        "schema",
        "namespace",
        "identity",
        "without",
        "ok",
        "exit_code",
        "verdict",
        "findings",
    }
    assert (
        doc["schema"] == SCHEMA and doc["namespace"] == "default" and doc["without"] == ["admission-policy"]
    )
    assert doc["identity"] and doc["exit_code"] == status == 0 and doc["ok"] is True
    assert [f["check"] for f in doc["findings"]] == [c.name for c in CHECKS]
    registered = {c.name: c.feature for c in CHECKS}
    for finding in doc["findings"]:
        assert set(finding) == {"check", "status", "detail", "fix", "required", "feature"}
        assert finding["status"] in (OK, WARN, FAIL, UNKNOWN, SKIP)
        assert finding["feature"] == registered[finding["check"]]
        assert finding["required"] is (finding["feature"] is None)


@pytest.fixture
def deployed(tmp_path: Path) -> Iterator[tuple[LocalCluster, Any]]:
    """A TLS + RBAC cluster with deploy/ applied (`kubectl apply -k deploy/`), and its admin's kubectl."""
    from tests.e2e.test_deploy_applied import kubectl_for, ok

    config = ClusterConfig(
        profile="fast", root=str(tmp_path / "cluster"), tls=True, authorization_mode="RBAC"
    )
    with LocalCluster(config) as cluster:
        admin = kubectl_for(cluster.write_kubeconfig(tmp_path / "admin"), tmp_path)
        ok(admin("apply", "-k", "deploy/"))
        yield cluster, admin


def _as(cluster: LocalCluster, admin: Any, account: str, path: Path) -> Path:
    from tests.e2e.test_deploy_applied import ok

    token = ok(admin("create", "token", account, "-n", NS, "--duration=1h")).strip()
    return cluster.write_kubeconfig(path, token=token)


@needs_kubectl
def test_deploy_applied_as_a_whole_passes_as_its_identity(deployed, tmp_path: Path, monkeypatch) -> None:
    cluster, admin = deployed
    kubeconfig = _as(cluster, admin, "airflow-kruise-chain", tmp_path / "chains")
    status, doc = check_json(kubeconfig, "-n", NS)
    assert status == 0, json.dumps(doc, indent=1)
    assert doc["identity"] == IDENTITY and doc["verdict"] == "chains can run here"
    assert found(doc, "admission policy")["status"] == OK
    assert found(doc, "runner")["status"] == OK
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    extra = {"kube_config_path": str(kubeconfig), "namespace": NS}
    monkeypatch.setenv("AIRFLOW_CONN_CHAINS", json.dumps({"conn_type": "kruise_chain", "extra": extra}))
    passed, message = KruiseHook(conn_id="chains").test_connection()  # the Test button says the same
    assert passed and message.endswith("chains can run here"), message


@needs_kubectl
def test_an_identity_the_admission_policy_does_not_hold_fails(deployed, tmp_path: Path, monkeypatch) -> None:
    """The same Role bound to another ServiceAccount: RBAC lets it do what chains do, but the policy, which
    names deploy/'s identity, does not hold it."""
    from tests.e2e.test_deploy_applied import bind_the_role_to

    cluster, admin = deployed
    kubeconfig = cluster.write_kubeconfig(tmp_path / "other", token=bind_the_role_to(admin, "other"))
    status, doc = check_json(kubeconfig, "-n", NS, "--no-probe")
    assert status == 1
    policy = found(doc, "admission policy")
    assert policy["status"] == FAIL
    assert "does not hold system:serviceaccount:chains:other" in policy["detail"]
    assert "serviceAccountName: other in deploy/identity.yaml" in policy["fix"]
    assert found(doc, "Role")["status"] == OK  # RBAC alone would not have told
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    extra = {"kube_config_path": str(kubeconfig), "namespace": NS}
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", json.dumps({"conn_type": "kruise_chain", "extra": extra}))
    passed, message = KruiseHook(conn_id="other").test_connection()
    assert not passed and "FAIL    admission policy" in message and "deploy/identity.yaml" in message


@needs_kubectl
def test_the_admin_reads_which_identity_the_policy_names(deployed, tmp_path: Path) -> None:
    cluster, _ = deployed
    status, doc = check_json(cluster.write_kubeconfig(tmp_path / "admin-again"), "-n", NS, "--no-probe")
    assert status == 1
    policy = found(doc, "admission policy")
    assert policy["status"] == FAIL and f"its matchConditions name '{IDENTITY}'" in policy["detail"]


def test_a_runner_configmap_the_identity_may_not_create_fails_until_an_admin_applies_it(
    bare, tmp_path
) -> None:
    """deploy/role.yaml without `create` on configmaps: the runner's ConfigMap must be made by an admin (the
    command the finding names); once it is, chains can run."""
    import copy

    from kruise_local.testing import service_account_token
    from kubernetes import client, config

    from airflow_kruise_chain.core.runnerinstall import runner_configmap

    cluster, admin_kubeconfig = bare
    role = copy.deepcopy(yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text()))
    for rule in role["rules"]:
        if rule["resources"] == ["configmaps"]:
            rule["verbs"] = ["get"]
    cluster.enable_rbac()
    admin = config.new_client_from_config(str(admin_kubeconfig))
    token = service_account_token(admin, "default", "airflow", role["rules"])
    kubeconfig = cluster.write_kubeconfig(tmp_path / "sa", token=token)
    status, doc = check_json(kubeconfig, *NO_POLICY)
    assert status == 1
    finding = found(doc, "runner ConfigMap")
    assert finding["status"] == FAIL and "may not create it" in finding["detail"]
    assert "kruise-chain runner-configmap --namespace default | kubectl apply -f -" in finding["fix"]
    assert found(doc, "runner")["status"] == SKIP and found(doc, "Role")["status"] == WARN

    client.CoreV1Api(admin).create_namespaced_config_map("default", runner_configmap("default"))
    status, doc = check_json(kubeconfig, *NO_POLICY)
    assert status == 0, json.dumps(doc, indent=1)
    assert found(doc, "runner ConfigMap")["status"] == OK and found(doc, "runner")["status"] == OK


def test_a_runner_configmap_that_is_not_this_provider_s_fails(bare) -> None:
    from kubernetes import client, config

    from airflow_kruise_chain.core.runnerinstall import runner_configmap

    _, kubeconfig = bare
    squatted = runner_configmap("default")
    squatted["data"] = {"runner": "#!/bin/sh\necho not the runner\n"}
    client.CoreV1Api(config.new_client_from_config(str(kubeconfig))).create_namespaced_config_map(
        "default", squatted
    )
    status, doc = check_json(kubeconfig, *NO_POLICY)
    assert status == 1
    finding = found(doc, "runner ConfigMap")
    assert finding["status"] == FAIL and "is not this provider's" in finding["detail"]
    assert "kubectl delete configmap" in finding["fix"]
