"""A stage task's calls load a few of the Kubernetes clients' generated modules (hooks/lazyclients.py), and
both clients work as before with their modules loaded as they are used.

Each check runs in a fresh interpreter (this test session has long loaded the clients), against the session's
local cluster as the `kubernetes_default` connection. A Celery task's interpreter has imported the sync client
first (the Celery worker does, for every task it forks: celery provider, `on_celery_import_modules`); a
LocalExecutor task's has not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kruise_local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.", "aiohttp.")
LIGHT = ("aiohttp.client_exceptions", "aiohttp.typedefs")
"""the async client's ~800 API and model modules and aiohttp's client and server (what their import costs),
but for the two modules of aiohttp's exceptions"""

SYNC_TASK = """
import json, sys
import airflow.sdk
if sys.argv[1] == "celery":
    import kubernetes.client
from airflow_kruise_chain.hooks.kruise import KruiseHook
hook = KruiseHook()
missing = hook.read_pod("no-such-pod", "default")
print(json.dumps({"missing": missing, "modules": sorted(sys.modules)}))
"""

GENERATED = ("kubernetes.client.models.", "kubernetes.client.api.")

SYNC_CLIENT = """
import json, sys
import airflow_kruise_chain.hooks
import kubernetes
from kubernetes import client, config, watch
from kubernetes.client.api.core_v1_api import CoreV1Api as HomeCoreV1Api
from kubernetes.client.models.v1_pod import V1Pod as HomeV1Pod
deferred = type(sys.modules["kubernetes.client"]).__name__

config.load_kube_config()
core = client.CoreV1Api()
name = sys.argv[1]
container = client.V1Container(name="main", image="busybox:1.36", command=["sleep", "60"])
pod = client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=client.V1PodSpec(containers=[container]))
core.create_namespaced_pod("default", pod)
try:
    read = core.read_namespaced_pod(name, "default")
    listed = [p.metadata.name for p in core.list_namespaced_pod("default").items if p.metadata.name == name]
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=1
    )
    watched = [e["object"].metadata.name for e in stream][:1]
    try:
        core.read_namespaced_pod("no-such-pod", "default")
        status = None
    except client.ApiException as e:
        status = e.status
finally:
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
used = len([m for m in sys.modules if m.startswith("kubernetes.client.models.")])

from airflow_kruise_chain.hooks.lazyclients import load_clients
load_clients("kubernetes")
print(json.dumps({
    "deferred": deferred,
    "seen": [read.metadata.name, listed, watched, status],
    "same_classes": [
        type(read) is HomeV1Pod,
        client.V1Pod is HomeV1Pod,
        kubernetes.client.models.V1Pod is HomeV1Pod,
        client.CoreV1Api is HomeCoreV1Api,
        client.ApiException is kubernetes.client.exceptions.ApiException,
        type(sys.modules["kubernetes.client"]).__name__ == "module",
    ],
    "models": [used, len([m for m in sys.modules if m.startswith("kubernetes.client.models.")])],
    "version": kubernetes.__version__,
}))
"""

ASYNC_TRIGGER = """
import asyncio, json, sys
from kubernetes import client as sync_client, config as sync_config
from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook
deferred = [type(sys.modules[n]).__name__ for n in ("kubernetes_asyncio.client", "aiohttp")]

sync_config.load_kube_config()
core = sync_client.CoreV1Api()
name = sys.argv[1]
core.create_namespaced_pod("default", {
    "metadata": {"name": name},
    "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "60"]}]},
})

async def main():
    hook = AsyncKruiseHook()
    missing = await hook.read_pod("no-such-pod", "default")
    pod = await hook.read_pod(name, "default")
    watched = [p.name async for p in hook.watch_pod(name, "default", timeout_seconds=1) if p][:1]
    return missing, pod.name, watched

try:
    missing, found, watched = asyncio.run(main())
finally:
    core.delete_namespaced_pod(name, "default", grace_period_seconds=0)

import aiohttp
import aiohttp.client_exceptions
import kubernetes_asyncio
from kubernetes_asyncio.client import ApiClient, ApiException, CoreV1Api
from kubernetes_asyncio.client.api_client import ApiClient as HomeApiClient
from kubernetes_asyncio.client.exceptions import ApiException as HomeApiException
from kubernetes_asyncio.client.models import V1Pod
from kubernetes_asyncio.client.models.v1_pod import V1Pod as HomeV1Pod
from airflow.providers.cncf.kubernetes import kube_client
from airflow.providers.cncf.kubernetes.hooks import kubernetes as cncf_hook
from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import TRANSIENT_CONNECTION_ERRORS
print(json.dumps({
    "deferred": deferred,
    "missing": missing,
    "found": found,
    "watched": watched,
    "same_classes": [
        ApiClient is HomeApiClient,
        ApiException is HomeApiException,
        V1Pod is HomeV1Pod,
        kubernetes_asyncio.client.models.V1Pod is HomeV1Pod,
        issubclass(kube_client._TimeoutAsyncK8sApiClient, ApiClient),
        cncf_hook.async_client.exceptions.ApiException is ApiException,
        cncf_hook.async_client.CoreV1Api is CoreV1Api,
        kubernetes_asyncio.client.exceptions.ApiException is ApiException,
        aiohttp.ClientConnectionError is aiohttp.client_exceptions.ClientConnectionError,
        aiohttp.ClientConnectionError in TRANSIENT_CONNECTION_ERRORS,
        type(sys.modules["aiohttp"]).__name__ == "module",
    ],
    "version": kubernetes_asyncio.__version__,
}))
"""

THREADS = """
import json, sys, threading
import airflow_kruise_chain.hooks
from kubernetes import client
from airflow_kruise_chain.hooks.lazyclients import load_clients

barrier = threading.Barrier(8)
seen, errors = [], []

def use(i):
    barrier.wait()
    try:
        if i % 4 == 3:
            load_clients()
        seen.append((client.CoreV1Api, client.V1Pod, sys.modules["kubernetes"].client.models.V1Pod))
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=use, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
from kubernetes.client.api.core_v1_api import CoreV1Api
from kubernetes.client.models.v1_pod import V1Pod
print(json.dumps({"errors": errors, "same": [s == (CoreV1Api, V1Pod, V1Pod) for s in seen]}))
"""

ALREADY_IMPORTED = """
import json, sys
import aiohttp, kubernetes, kubernetes_asyncio
import airflow_kruise_chain.hooks.kruise
kinds = {type(m).__name__ for n, m in sys.modules.items() if n.startswith(("kubernetes", "aiohttp"))}
print(json.dumps(sorted(kinds)))
"""


def run(script: str, kubeconfig: Path, *args: str) -> object:
    env = dict(os.environ)
    env.update(
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        ),
        KUBECONFIG=str(kubeconfig),
        PYTHONPATH=str(ROOT),
    )
    out = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("executor", ["celery", "local"])
def test_a_stage_tasks_sync_calls_load_a_few_generated_modules_and_none_of_the_async_clients(
    cluster: LocalCluster, kubeconfig: Path, executor: str
) -> None:
    result = run(SYNC_TASK, kubeconfig, executor)
    assert result["missing"] is None  # the call reached the cluster
    assert "airflow.providers.cncf.kubernetes.hooks.kubernetes" in result["modules"]
    assert [m for m in result["modules"] if m.startswith(HEAVY) and m not in LIGHT] == []
    generated = [m for m in result["modules"] if m.startswith(GENERATED)]
    if executor == "local":  # ~800 when the package is imported whole, as Celery's worker does
        assert 0 < len(generated) < 20, generated


def test_the_sync_client_loads_its_modules_as_they_are_used_and_works_as_before(
    cluster: LocalCluster, kubeconfig: Path
) -> None:
    result = run(SYNC_CLIENT, kubeconfig, "lazy-sync-client")
    assert result["deferred"] == "DeferredModule"  # the check ran with the stand-in in place
    assert result["seen"] == ["lazy-sync-client", ["lazy-sync-client"], ["lazy-sync-client"], 404]
    assert result["same_classes"] == [True] * 6
    used, whole = result["models"]
    assert used < 60 < 500 < whole  # the pod's models, then every model once loaded whole
    assert result["version"]


def test_the_async_hook_loads_its_client_on_first_use_and_works_as_before(
    cluster: LocalCluster, kubeconfig: Path
) -> None:
    result = run(ASYNC_TRIGGER, kubeconfig, "lazy-async-client")
    assert result["deferred"] == ["DeferredModule"] * 2  # the check ran with the stand-ins in place
    assert (result["missing"], result["found"], result["watched"]) == (
        None,
        "lazy-async-client",
        ["lazy-async-client"],
    )
    assert result["same_classes"] == [True] * 11
    assert result["version"]


def test_threads_that_use_the_clients_and_load_them_at_once_see_one_class_each(kubeconfig: Path) -> None:
    assert run(THREADS, kubeconfig) == {"errors": [], "same": [True] * 8}


def test_clients_imported_before_are_left_as_they_are(kubeconfig: Path) -> None:
    assert run(ALREADY_IMPORTED, kubeconfig) == ["module"]
