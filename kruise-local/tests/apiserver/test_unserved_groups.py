"""API groups the chain does not need (apps, batch, networking...) answer as a kube-apiserver built
without them: no discovery entry, and a 404 `Status` with the generic message and empty details
(`NewGenericServerResponse`) that the clients turn into their usual "not found" errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kubernetes import client
from kubernetes.client import ApiException

NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}


@pytest.mark.parametrize(
    "path",
    [
        "/apis/apps/v1/namespaces/default/deployments",
        "/apis/apps",
        "/apis/batch/v1/jobs",
        "/apis/rbac.authorization.k8s.io/v1beta1/clusterroles",
        "/api/v1/namespaces/default/services",
        "/api/v2",
        "/api/v1/namespaces/default/pods/p/portforward",
        "/apis/metrics.k8s.io/v1beta1/namespaces/default/nodes",
    ],
)
def test_a_path_not_served_is_the_generic_404(cluster, path):
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(cluster.url + path, timeout=10)
    assert err.value.code == 404 and json.loads(err.value.read()) == NOT_FOUND


def test_discovery_does_not_offer_what_is_not_served(cluster):
    with urllib.request.urlopen(cluster.url + "/apis", timeout=10) as resp:
        groups = {g["name"] for g in json.loads(resp.read())["groups"]}
    assert not groups & {"apps", "batch", "networking.k8s.io"}
    assert {"apps.kruise.io", "metrics.k8s.io", "authorization.k8s.io", "rbac.authorization.k8s.io"} <= groups


def test_clients_meet_their_usual_not_found(api_client, kubeconfig, tmp_path):
    with pytest.raises(ApiException) as err:
        client.AppsV1Api(api_client).list_namespaced_deployment("default")
    assert err.value.status == 404 and json.loads(err.value.body)["reason"] == "NotFound"
    if shutil.which("kubectl") is None:
        return
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    done = subprocess.run(["kubectl", "get", "deployments"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and 'the server doesn\'t have a resource type "deployments"' in done.stderr


def test_the_official_clients_pod_apis_without_exec(core, namespace):
    """What `test_pod_apis` (kubernetes-client/python `kubernetes/e2e_test/test_client.py`) does but its
    exec calls: it waits up to 30 s for the namespace's `default` ServiceAccount (the serviceaccounts
    controller creates it), a busybox pod (`busybox`, no tag) runs `while true; do date; sleep 5; done` as
    `args`, leaves Pending, is listed across namespaces, and is deleted with an empty body."""
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account(name="default", namespace=namespace)
            break
        except ApiException as err:
            assert err.status == 404 and time.monotonic() < deadline, "no default ServiceAccount"
            time.sleep(0.05)
    assert time.monotonic() < deadline - 25, "the default ServiceAccount came late"
    name = f"busybox-test-{uuid.uuid4().hex[:12]}"
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "image": "busybox",
                    "name": "sleep",
                    "args": ["/bin/sh", "-c", "while true;do date;sleep 5; done"],
                }
            ]
        },
    }
    created = core.create_namespaced_pod(body=manifest, namespace=namespace)
    assert created.metadata.name == name and created.status.phase
    deadline = time.monotonic() + 60
    while (pod := core.read_namespaced_pod(name=name, namespace=namespace)).status.phase == "Pending":
        assert time.monotonic() < deadline, "still Pending"
        time.sleep(0.5)
    assert pod.status.phase == "Running"
    assert len(core.list_pod_for_all_namespaces().items) > 0
    core.delete_namespaced_pod(name=name, body={}, namespace=namespace)
