"""A stage task's calls load none of `kubernetes_asyncio`'s API and model modules (hooks/lazyasync.py), and
the async hook works as before when its client is loaded on first use.

Each check runs in a fresh interpreter (this test session has long loaded both clients), against the session's
local cluster as the `kubernetes_default` connection. The task's interpreter imports the sync client first, as
Celery's worker does for every task it forks (celery provider, `on_celery_import_modules`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kruise_local import LocalCluster

ROOT = Path(__file__).resolve().parents[2]

HEAVY = ("kubernetes_asyncio.client.models.", "kubernetes_asyncio.client.api.", "aiohttp.")
LIGHT = ("aiohttp.client_exceptions", "aiohttp.typedefs")
"""the async client's ~800 API and model modules and aiohttp's client and server (what their import costs),
but for the two modules of aiohttp's exceptions"""

SYNC_TASK = """
import json, sys
import airflow.sdk, kubernetes.client
from airflow_kruise_chain.hooks.kruise import KruiseHook
hook = KruiseHook()
missing = hook.read_pod("no-such-pod", "default")
print(json.dumps({"missing": missing, "modules": sorted(sys.modules)}))
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

ALREADY_IMPORTED = """
import json, sys
import aiohttp, kubernetes_asyncio
import airflow_kruise_chain.hooks.kruise
kinds = {type(m).__name__ for n, m in sys.modules.items() if n.startswith(("kubernetes_asyncio", "aiohttp"))}
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


def test_a_stage_tasks_sync_calls_load_none_of_the_async_clients_api_and_models(
    cluster: LocalCluster, kubeconfig: Path
) -> None:
    result = run(SYNC_TASK, kubeconfig)
    assert result["missing"] is None  # the call reached the cluster
    assert "airflow.providers.cncf.kubernetes.hooks.kubernetes" in result["modules"]
    assert [m for m in result["modules"] if m.startswith(HEAVY) and m not in LIGHT] == []


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


def test_async_clients_imported_before_are_left_as_they_are(kubeconfig: Path) -> None:
    assert run(ALREADY_IMPORTED, kubeconfig) == ["module"]
