"""deploy/ applied as a whole (`kubectl apply -k deploy/`) to a local cluster that authorizes by RBAC and
speaks TLS, as on a real cluster: the example DAG runs in the chains' namespace as deploy/'s identity (a
token from `kubectl create token`): setup, prewarm, stages, teardown, nothing refused. That identity is then
refused what docs/rbac.md says it is refused, by RBAC or by the admission policy; and the same Role bound to
an identity the policy does not name is not held by the policy: what the preflight must catch."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local import resources as R
from kruise_local.testing import wait_for

from tests.e2e.conftest import ROOT, load_dag

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("kubectl") is None, reason="no kubectl on PATH (./dev.sh test installs one)"
    ),
]
NS = "chains"
IDENTITY = "system:serviceaccount:chains:airflow-kruise-chain"
Kubectl = Callable[..., subprocess.CompletedProcess[str]]
CAPABILITY = json.dumps(
    {
        "spec": {
            "containers": [
                {
                    "name": "probe",
                    "image": "busybox:1.36",
                    "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                }
            ]
        }
    }
)
PROBE = (
    "-n", NS, "run", "probe", "--image=busybox:1.36", "--dry-run=server",
    "--labels=app.kubernetes.io/managed-by=airflow-kruise-chain", f"--overrides={CAPABILITY}",
)  # fmt: skip
"""a chain pod that adds a capability, created as a server dry run: admitted unless the policy holds the
requester (Pod Security baseline allows NET_BIND_SERVICE)"""


def kubectl_for(kubeconfig: Path, home: Path) -> Kubectl:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(home)}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(shutil.which("kubectl")), "--cache-dir", str(home / "cache"), *args]
        return subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
        )

    return run


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    assert done.returncode != 0, done.stdout
    for word in words:
        assert word in done.stderr, done.stderr
    return done.stderr


def bind_the_role_to(admin: Kubectl, account: str) -> str:
    """Make the ServiceAccount `account` in the chains' namespace, bind deploy/'s Role to it, and answer a
    token of it: an identity with the chains' verbs that the admission policy does not name."""
    ok(admin("-n", NS, "create", "serviceaccount", account))
    bind = ("--role=airflow-kruise-chain", f"--serviceaccount={NS}:{account}")
    ok(admin("-n", NS, "create", "rolebinding", account, *bind))
    return ok(admin("create", "token", account, "-n", NS, "--duration=1h")).strip()


@pytest.fixture
def deployed(tmp_path: Path, airflow_home: Path) -> Iterator[dict[str, Any]]:
    """A TLS + RBAC cluster with deploy/ applied, the Airflow connection acting as deploy/'s identity."""
    config = ClusterConfig(
        profile="fast", root=str(tmp_path / "cluster"), tls=True, authorization_mode="RBAC"
    )
    with LocalCluster(config) as cluster:
        admin = kubectl_for(cluster.write_kubeconfig(tmp_path / "admin"), tmp_path)
        applied = ok(admin("apply", "-k", "deploy/"))
        token = ok(admin("create", "token", "airflow-kruise-chain", "-n", NS, "--duration=1h")).strip()
        kubeconfig = cluster.write_kubeconfig(tmp_path / "chains", token=token)
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
        yield {
            "cluster": cluster,
            "admin": admin,
            "chain": kubectl_for(kubeconfig, tmp_path),
            "applied": applied,
            "tmp": tmp_path,
        }
        os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


def test_deploy_applies_as_a_whole_and_the_example_dag_runs_as_its_identity(deployed, monkeypatch):
    assert deployed["applied"].split("\n")[:-1] == [
        "namespace/chains created",
        "serviceaccount/airflow-kruise-chain created",
        "role.rbac.authorization.k8s.io/airflow-kruise-chain created",
        "rolebinding.rbac.authorization.k8s.io/airflow-kruise-chain created",
        "validatingadmissionpolicy.admissionregistration.k8s.io/airflow-kruise-chain created",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/airflow-kruise-chain created",
    ]
    assert IDENTITY in ok(deployed["chain"]("auth", "whoami"))
    cluster = deployed["cluster"]
    monkeypatch.setenv("KRUISE_CHAIN_NAMESPACE", NS)
    cluster.audit.clear()
    run = load_dag(ROOT / "example_dags" / "example_kruise_chain.py").test()
    assert str(run.state) == "success"
    assert [(m, p, c) for m, p, c in cluster.audit if c in (401, 403, 422)] == []
    written = {(m, p.split("/")[-1] if m == "POST" else p.split("/")[-2]) for m, p, _ in cluster.audit}
    assert ("POST", "pods") in written and ("POST", "imagepulljobs") in written  # setup and prewarm
    assert any(m == "DELETE" and "/namespaces/chains/pods/" in p for m, p, _ in cluster.audit)  # teardown
    assert not [p for p in cluster.store.items(R.PODS, NS)]


def test_the_identity_is_refused_what_the_docs_say(deployed):
    admin, chain = deployed["admin"], deployed["chain"]
    ok(admin("-n", NS, "create", "secret", "generic", "db", "--from-literal=password=s3cret"))
    ok(admin("-n", NS, "run", "foreign", "--image=busybox:1.36", "--command", "--", "sleep", "300"))
    ok(admin("-n", NS, "create", "serviceaccount", "robot"))
    ok(admin("-n", NS, "wait", "--for=condition=Ready", "pod/foreign", "--timeout=60s"))
    forbidden = 'User "system:serviceaccount:chains:airflow-kruise-chain" cannot'
    # RBAC: no Secret read, nothing outside its namespace, no listing, no restarts, no ConfigMap change
    refused(chain("-n", NS, "get", "secret", "db"), forbidden, 'get resource "secrets"')
    refused(chain("-n", "default", "get", "pod", "x"), forbidden, 'in the namespace "default"')
    refused(chain("-n", NS, "get", "pods"), forbidden, 'list resource "pods"')
    refused(chain("-n", NS, "delete", "configmap", "any"), forbidden, 'delete resource "configmaps"')
    crr = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "restart", "namespace": NS},
        "spec": {"podName": "foreign", "containers": [{"name": "foreign"}]},
    }
    refused(chain("create", "-f", "-", stdin=json.dumps(crr)), forbidden, "containerrecreaterequests")
    # the policy: no pod but a chain pod, and no chain pod that reaches the node or another identity
    policy = "ValidatingAdmissionPolicy 'airflow-kruise-chain'"
    refused(chain("-n", NS, "delete", "pod", "foreign"), policy, "may only DELETE pods labelled")
    refused(
        chain("-n", NS, "run", "p", "--image=busybox:1.36", "--dry-run=server"), policy, "may only CREATE"
    )
    refused(chain(*PROBE), policy, "must not add capabilities")
    other_account = {
        "spec": {"serviceAccountName": "robot", "containers": [{"name": "p", "image": "busybox:1.36"}]}
    }
    labelled = ("-n", NS, "run", "p", "--image=busybox:1.36", "--dry-run=server")
    labelled += ("--labels=app.kubernetes.io/managed-by=airflow-kruise-chain",)
    refused(chain(*labelled, f"--overrides={json.dumps(other_account)}"), policy, "service account")
    host = {"spec": {"hostNetwork": True, "containers": [{"name": "p", "image": "busybox:1.36"}]}}
    refused(chain(*labelled, f"--overrides={json.dumps(host)}"), "hostNetwork")  # Pod Security baseline first
    refused(chain("-n", NS, "exec", "foreign", "--", "cat", "/etc/hostname"), policy, "may only exec")

    # ConfigMaps: only the stage runner's (kruise-chain-runner-<16 hex>), immutable and labelled; the Role
    # lets the identity create any
    def configmap(name: str, **fields: Any) -> str:
        labels = {"app.kubernetes.io/managed-by": "airflow-kruise-chain"}
        meta = {"name": name, "namespace": NS, "labels": labels}
        return json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}, **fields}
        )

    def create(body: str) -> subprocess.CompletedProcess[str]:
        return chain("-n", NS, "create", "--dry-run=server", "-f", "-", stdin=body)

    runner = "kruise-chain-runner-" + "0" * 16
    for name, fields in (
        ("settings", {"immutable": True}),
        (runner, {}),
        (runner + "0", {"immutable": True}),
    ):
        refused(create(configmap(name, **fields)), policy, "may only create the stage runner's ConfigMap")
    assert "created (server dry run)" in ok(create(configmap(runner, immutable=True)))
    # what it still reaches (docs/rbac.md): a chain pod of its own reads any Secret of the namespace, and it
    # reads every pod's log there
    reader = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "p",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "echo $PASSWORD"],
                    "env": [
                        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}
                    ],
                }
            ],
        }
    }
    run = ("-n", NS, "run", "reader", "--image=busybox:1.36", "--restart=Never")
    ok(
        chain(
            *run,
            "--labels=app.kubernetes.io/managed-by=airflow-kruise-chain",
            f"--overrides={json.dumps(reader)}",
        )
    )
    wait_for(lambda: chain("-n", NS, "logs", "reader").stdout.strip() == "s3cret", what="the Secret in a log")
    assert ok(chain("-n", NS, "logs", "foreign")) == ""  # a pod it did not make: its log too


def test_the_role_bound_to_another_identity_escapes_the_policy(deployed):
    """The policy names one username; the same Role bound to any other identity grants the same verbs with no
    policy in the way. The probe (a server dry run of a chain pod that adds a capability) tells them apart:
    refused to the identity the policy binds, admitted to any other. The preflight must catch this."""
    admin, chain = deployed["admin"], deployed["chain"]
    token = bind_the_role_to(admin, "other")
    other = kubectl_for(
        deployed["cluster"].write_kubeconfig(deployed["tmp"] / "other", token=token), deployed["tmp"]
    )
    assert ok(other("auth", "can-i", "create", "pods", "-n", NS)).strip() == "yes"
    assert "pod/probe created (server dry run)" in ok(other(*PROBE))  # the policy does not hold it
    refused(chain(*PROBE), "must not add capabilities")
    bound = ok(admin("get", "validatingadmissionpolicy", "airflow-kruise-chain", "-o", "json"))
    (condition,) = json.loads(bound)["spec"]["matchConditions"]
    assert "".join(condition["expression"].split("'")[1::2]) == IDENTITY
    assert "system:serviceaccount:chains:other" in ok(other("auth", "whoami"))
