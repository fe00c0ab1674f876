"""ServiceAccounts (core v1) as the API server stores them (`pkg/registry/core/serviceaccount`: metadata-only
validation, `printServiceAccount` columns) and the `default` account kube-controller-manager's serviceaccounts
controller keeps in every Active namespace (`serviceaccounts_controller.go` `syncNamespace`), through the
official client and kubectl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading

import pytest
from kruise_local import resources as R
from kruise_local.testing import wait_for
from kubernetes import watch
from kubernetes.client import ApiException


def _default_exists(core, namespace: str) -> bool:
    try:
        return core.read_namespaced_service_account("default", namespace).metadata.name == "default"
    except ApiException as err:
        if err.status != 404:
            raise
        return False


def test_every_namespace_has_the_default_account(core, namespace):
    for ns in (*R.DEFAULT_NAMESPACES, namespace):
        wait_for(lambda ns=ns: _default_exists(core, ns), what=f"serviceaccount default in {ns}")
    sa = core.read_namespaced_service_account("default", namespace)
    assert sa.kind == "ServiceAccount" and sa.api_version == "v1"
    assert sa.secrets is None and sa.automount_service_account_token is None  # only its name, as upstream
    listed = core.list_service_account_for_all_namespaces(field_selector="metadata.name=default").items
    assert {(s.metadata.namespace, s.metadata.name) for s in listed} >= {
        (ns, "default") for ns in (*R.DEFAULT_NAMESPACES, namespace)
    }


def test_a_deleted_default_account_comes_back_while_its_namespace_lives(core, namespace):
    wait_for(lambda: _default_exists(core, namespace), what="the default account")
    first = core.read_namespaced_service_account("default", namespace).metadata.uid
    core.delete_namespaced_service_account("default", namespace)
    again = wait_for(
        lambda: (
            _default_exists(core, namespace)
            and core.read_namespaced_service_account("default", namespace).metadata.uid != first
        ),
        what="the default account recreated",
    )
    assert again


def test_a_deleted_namespace_gets_no_account(cluster, core):
    core.create_namespace({"metadata": {"name": "sa-gone"}})
    wait_for(lambda: _default_exists(core, "sa-gone"), what="the default account")
    core.delete_namespace("sa-gone")
    wait_for(lambda: cluster.call(lambda: cluster.store.peek(R.NAMESPACES, "", "sa-gone")) is None)
    assert cluster.call(lambda: list(cluster.store.items(R.SERVICE_ACCOUNTS, "sa-gone"))) == []


def test_crud_list_and_watch(core, namespace):
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    rv = core.list_namespaced_service_account(namespace).metadata.resource_version

    def follow() -> None:
        for ev in w.stream(
            core.list_namespaced_service_account, namespace, resource_version=rv, timeout_seconds=20
        ):
            seen.append((ev["type"], ev["object"].metadata.name))
            if ev["type"] == "DELETED":
                w.stop()

    t = threading.Thread(target=follow)
    t.start()
    body = {
        "metadata": {"name": "builder", "labels": {"team": "a"}},
        "secrets": [{"name": "token"}],
        "imagePullSecrets": [{"name": "registry"}],
        "automountServiceAccountToken": False,
    }
    created = core.create_namespaced_service_account(namespace, body)
    assert created.automount_service_account_token is False
    assert [s.name for s in created.image_pull_secrets] == ["registry"]
    patched = core.patch_namespaced_service_account(
        "builder", namespace, {"metadata": {"labels": {"team": "b"}}}
    )
    assert patched.metadata.labels == {"team": "b"} and patched.secrets[0].name == "token"
    patched.automount_service_account_token = True
    replaced = core.replace_namespaced_service_account("builder", namespace, patched)
    assert replaced.automount_service_account_token is True
    names = [
        s.metadata.name
        for s in core.list_namespaced_service_account(namespace, label_selector="team=b").items
    ]
    assert names == ["builder"]
    core.delete_namespaced_service_account("builder", namespace)
    t.join(30)
    assert (
        ("ADDED", "builder") in seen
        and ("MODIFIED", "builder") in seen
        and seen[-1] == ("DELETED", "builder")
    )
    with pytest.raises(ApiException) as err:
        core.read_namespaced_service_account("builder", namespace)
    assert err.value.status == 404


def test_bad_accounts_are_refused_naming_the_field(core, namespace):
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "Not_A_Name"}})
    body = json.loads(err.value.body)
    assert err.value.status == 422 and body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_service_account(
            namespace, {"metadata": {"name": "x"}, "automountServiceAccountToken": "yes"}
        )
    assert err.value.status == 400 and "automountServiceAccountToken" in json.loads(err.value.body)["message"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_create_and_get_sa(kubeconfig, core, namespace, tmp_path):
    def kubectl(*args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        done = subprocess.run(["kubectl", "-n", namespace, *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    wait_for(lambda: _default_exists(core, namespace), what="the default account")
    assert kubectl("create", "serviceaccount", "robot").strip() == "serviceaccount/robot created"  # protobuf
    rows = [line.split() for line in kubectl("get", "sa").splitlines()]
    assert rows[0] == ["NAME", "SECRETS", "AGE"]
    assert [row[:2] for row in rows[1:]] == [["default", "0"], ["robot", "0"]]
    assert kubectl("get", "serviceaccount", "robot", "-o", "jsonpath={.metadata.name}") == "robot"
