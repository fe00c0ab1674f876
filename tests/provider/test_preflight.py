"""`kruise-chain check` and the kruise_chain connection's Test button, on local clusters configured each way a
real one can fall short: each finding names what is missing and its fix."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.pod_security import PodSecurityConfiguration

from airflow_kruise_chain.preflight import FAIL, OK, PERMISSIONS, SKIP, UNKNOWN, WARN

ROOT = Path(__file__).resolve().parents[2]
ROLE = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())


def run_check(
    kubeconfig: Path, namespace: str = "default", *extra: str
) -> tuple[int, dict[str, tuple[str, str]], str]:
    """(exit status, check -> (status, text), output) of `kruise-chain check` against `kubeconfig`, run in
    this process (`cli.main`; test_the_console_script_runs_the_check runs the installed script)."""
    from airflow_kruise_chain.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check", "--kubeconfig", str(kubeconfig), "-n", namespace, *extra])
    return status, parse(out.getvalue()), out.getvalue()


def parse(text: str) -> dict[str, tuple[str, str]]:
    """check -> (status, text with its fix line) of `kruise-chain check`'s text output."""
    findings: dict[str, tuple[str, str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("        fix: "):
            findings[current] = (findings[current][0], findings[current][1] + "\n" + line.strip())
        elif line.split(" ", 1)[0].lower() in (OK, WARN, FAIL, UNKNOWN, SKIP):
            status, rest = line.split(maxsplit=1)
            current, text = rest.split(": ", 1)
            findings[current] = (status.lower(), text)
    return findings


NO_POLICY = ("--without", "admission-policy")
"""a bare local cluster has no deploy/ applied, so no admission policy (test_preflight_setups.py has one)"""


@pytest.fixture
def local(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[LocalCluster, Path]]:
    """A fresh cluster built from the test's `config` marker (ClusterConfig keywords) and its kubeconfig."""
    marker = request.node.get_closest_marker("config")
    with LocalCluster(
        ClusterConfig(root=str(tmp_path / "cluster"), **(marker.kwargs if marker else {}))
    ) as c:
        yield c, c.write_kubeconfig(tmp_path / "kubeconfig")


def _serves_access_reviews(kubeconfig: Path) -> bool:
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig))
    groups = client.ApisApi(api).get_api_versions().groups
    if not any(g.name == "authorization.k8s.io" for g in groups):
        return False
    resources = client.AuthorizationV1Api(api).get_api_resources().resources
    return any(r.name == "selfsubjectaccessreviews" for r in resources)


def test_the_permissions_checked_are_the_documented_role() -> None:
    documented = {
        (group, resource, tuple(rule["verbs"]))
        for rule in ROLE["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    checked = {(g, f"{r}/{s}" if s else r, verbs) for g, r, s, verbs, _ in PERMISSIONS}
    assert checked == documented


def test_a_complete_cluster_passes(local) -> None:
    _, kubeconfig = local
    status, findings, out = run_check(kubeconfig, "default", *NO_POLICY)
    assert status == 0, out
    for check in (
        "connection",
        "identity",
        "Kubernetes",
        "namespace",
        "OpenKruise",
        "ImagePullJobGate",
        "in-place resize",
        "metrics API",
        "Role",
        "Pod Security",
        "runner",
    ):
        assert findings[check][0] == OK, out
    assert "v1.35.0" in findings["Kubernetes"][1]
    assert "ImagePullJob v1alpha1/v1beta1" in findings["OpenKruise"][1]
    assert findings["admission policy"][0] == SKIP
    assert "a probe chain pod" in findings["runner"][1] and "was deleted" in findings["runner"][1]
    assert out.rstrip().endswith("chains can run here (without admission-policy)")
    from kubernetes import client, config

    pods = client.CoreV1Api(config.new_client_from_config(str(kubeconfig))).list_namespaced_pod("default")
    assert [p.metadata.name for p in pods.items if p.metadata.deletion_timestamp is None] == []


def test_the_console_script_runs_the_check(local) -> None:
    _, kubeconfig = local
    done = subprocess.run(
        [
            Path(sys.executable).parent / "kruise-chain",
            "check",
            "--kubeconfig",
            str(kubeconfig),
            "--no-probe",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the bare cluster has no admission policy
    findings = parse(done.stdout)
    assert findings["runner"][0] == SKIP and findings["admission policy"][0] == FAIL
    assert done.stdout.rstrip().endswith("1 of 14 checks failed: chains will fail here until fixed")


def test_nothing_is_created_by_a_check_without_the_probe(local) -> None:
    cluster, kubeconfig = local
    status, _, out = run_check(kubeconfig, "default", *NO_POLICY, "--no-probe")
    assert status == 0 and out.rstrip().endswith("not checked: runner"), out
    posts = [p for m, p, c in cluster.audit if m == "POST" and c in (200, 201)]
    assert any(p.endswith("/pods") for p in posts) and any(p.endswith("/imagepulljobs") for p in posts)
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig))
    assert client.CoreV1Api(api).list_namespaced_pod("default").items == []
    jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "apps.kruise.io", "v1alpha1", "default", "imagepulljobs"
    )
    assert jobs["items"] == []  # both creates were dry runs


@pytest.mark.config(image_pull_job_gate=False)
def test_the_image_pull_job_gate_off_fails_with_how_to_enable_it(local) -> None:
    _, kubeconfig = local
    status, findings, out = run_check(kubeconfig)
    assert status == 1, out
    state, text = findings["ImagePullJobGate"]
    assert state == FAIL
    assert "ImagePullJobGate" in text and 'featureGates="ImagePullJobGate=true"' in text
    assert 'on_prewarm_unavailable="skip"' in text
    status, findings, out = run_check(kubeconfig, "default", *NO_POLICY, "--without", "prewarm")
    assert status == 0, out  # chains that go without prewarm run here
    assert findings["ImagePullJobGate"][0] == SKIP and findings["OpenKruise"][0] == SKIP


@pytest.mark.config(kubernetes_version="1.34.0", in_place_resize=False)  # GA and locked on from 1.35
def test_no_in_place_resize_warns_of_the_static_sizing(local) -> None:
    _, kubeconfig = local
    status, findings, out = run_check(kubeconfig, "default", *NO_POLICY)
    assert status == 0, out
    assert findings["in-place resize"][0] == WARN
    assert "static sizing" in findings["in-place resize"][1] and "fix: Kubernetes >= 1.33" in out


@pytest.mark.config(kubernetes_version="1.32.4")
def test_an_older_kubernetes_is_named_with_what_it_lacks(local) -> None:
    _, kubeconfig = local
    _, findings, out = run_check(kubeconfig)
    assert findings["Kubernetes"][0] == WARN and "v1.32.4" in findings["Kubernetes"][1], out
    assert findings["in-place resize"][0] == WARN, out


@pytest.mark.config(pod_security=PodSecurityConfiguration(enforce="restricted"))
def test_a_namespace_enforcing_restricted_refuses_the_default_chain_pod(local) -> None:
    _, kubeconfig = local
    status, findings, out = run_check(kubeconfig)
    assert status == 1, out
    state, text = findings["Pod Security"]
    assert state == FAIL and 'violates PodSecurity "restricted' in text
    assert (
        "fix: set KruiseChain(..., pod_security='restricted'): a dry-run chain pod with it was admitted"
        in text
    )


@pytest.mark.config(pod_security=PodSecurityConfiguration(warn="restricted"))
def test_a_namespace_warning_at_restricted_is_a_warning(local) -> None:
    _, kubeconfig = local
    status, findings, out = run_check(kubeconfig, "default", *NO_POLICY)
    assert status == 0, out
    state, text = findings["Pod Security"]
    assert state == WARN and "restricted" in text and "pod_security='restricted'" in text, out


def _with_token(cluster: LocalCluster, tmp_path: Path, role: dict[str, Any]) -> Path:
    from kruise_local.testing import service_account_token
    from kubernetes import config

    cluster.enable_rbac()
    admin = config.new_client_from_config(str(cluster.write_kubeconfig(tmp_path / "kubeconfig-admin")))
    token = service_account_token(admin, "default", "airflow", role["rules"])
    return cluster.write_kubeconfig(tmp_path / "kubeconfig-sa", token=token)


def test_a_role_missing_a_verb_is_named_with_the_fix(local, tmp_path: Path) -> None:
    cluster, admin = local
    assert _serves_access_reviews(admin), "kruise-local serves SelfSubjectAccessReview (kubectl auth can-i)"
    role = copy.deepcopy(ROLE)
    role["rules"][0]["verbs"].remove("patch")
    status, findings, out = run_check(_with_token(cluster, tmp_path, role))
    assert status == 1, out
    state, text = findings["Role"]
    assert state == FAIL and "patch pods" in text and "deploy/role.yaml" in text


def test_the_documented_role_passes_with_authorization_on(local, tmp_path: Path) -> None:
    cluster, admin = local
    assert _serves_access_reviews(admin), "kruise-local serves SelfSubjectAccessReview (kubectl auth can-i)"
    status, findings, out = run_check(_with_token(cluster, tmp_path, ROLE), "default", *NO_POLICY)
    assert status == 0, out
    assert findings["Role"][0] == OK and findings["Pod Security"][0] == OK, out


def test_the_connection_test_button_runs_the_check(local, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    _, kubeconfig = local
    monkeypatch.setenv(
        "AIRFLOW_CONN_CHAIN_CLUSTER",
        json.dumps(
            {
                "conn_type": "kruise_chain",
                "extra": {
                    "kube_config_path": str(kubeconfig),
                    "namespace": "default",
                    "preflight_without": "admission-policy",
                },
            }
        ),
    )
    ok, message = KruiseHook(conn_id="chain_cluster").test_connection()
    assert ok, message
    assert "OK      ImagePullJobGate" in message and "OK      Pod Security" in message


@pytest.mark.config(image_pull_job_gate=False)
def test_the_connection_test_button_fails_with_the_fix(local, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    _, kubeconfig = local
    monkeypatch.setenv(
        "AIRFLOW_CONN_CHAIN_CLUSTER",
        json.dumps({"conn_type": "kruise_chain", "extra": {"kube_config_path": str(kubeconfig)}}),
    )
    ok, message = KruiseHook(conn_id="chain_cluster").test_connection()
    assert not ok and "FAIL    ImagePullJobGate" in message and "helm upgrade kruise" in message


def test_the_connection_type_is_registered_with_this_hook() -> None:
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    hook = ProvidersManagerTaskRuntime().hooks["kruise_chain"]
    assert hook is not None and hook.hook_class_name == "airflow_kruise_chain.hooks.kruise.KruiseHook"
