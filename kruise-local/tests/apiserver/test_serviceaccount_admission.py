"""The ServiceAccount admission plugin on pod creates (`plugin/pkg/admission/serviceaccount/admission.go`
`Admit`): a pod naming a service account its namespace does not have is refused with 403 Forbidden, before the
pod's own validation, dry runs included; through the official client and kubectl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from kruise_local.testing import container, pod_body
from kubernetes.client import ApiException


def _refusal(call) -> tuple[int, dict]:
    with pytest.raises(ApiException) as err:
        call()
    return err.value.status, json.loads(err.value.body)


def _with_account(name: str, account: str, **spec) -> dict:
    return pod_body(name, container("c", "sleep 1"), serviceAccountName=account, **spec)


def test_a_pod_of_a_missing_service_account_is_forbidden(core, namespace):
    status, body = _refusal(lambda: core.create_namespaced_pod(namespace, _with_account("p", "nobody")))
    assert status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        f'pods "p" is forbidden: error looking up service account {namespace}/nobody: '
        'serviceaccount "nobody" not found'
    )
    assert body["details"] == {"name": "p", "kind": "pods"}
    status, body = _refusal(
        lambda: core.create_namespaced_pod(namespace, _with_account("p", "nobody"), dry_run="All")
    )
    assert status == 403 and "error looking up service account" in body["message"]


def test_the_lookup_comes_before_the_pod_s_validation(core, namespace):
    """A mutating plugin: an invalid pod of a missing account is refused for the account (403), not 422."""
    invalid = _with_account("p", "nobody", restartPolicy="Sometimes")
    status, _ = _refusal(lambda: core.create_namespaced_pod(namespace, invalid))
    assert status == 403


def test_a_pod_of_an_existing_account_is_created(core, namespace):
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "runner"}})
    created = core.create_namespaced_pod(namespace, _with_account("p", "runner"))
    assert created.spec.service_account_name == "runner"
    assert (
        core.create_namespaced_pod(
            namespace, pod_body("q", container("c", "sleep 1"))
        ).spec.service_account_name
        == "default"
    )


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_says_which_account_is_missing(kubeconfig, namespace, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    done = subprocess.run(
        ["kubectl", "-n", namespace, "create", "-f", "-"],
        input=json.dumps(_with_account("p", "nobody")),
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        'Error from server (Forbidden): error when creating "STDIN": pods "p" is forbidden: error looking up '
        f'service account {namespace}/nobody: serviceaccount "nobody" not found'
    )
