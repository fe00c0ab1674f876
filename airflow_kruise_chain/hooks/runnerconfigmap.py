"""The stage runner's ConfigMap as the setup makes sure of it (`core/runnerinstall.py`), for `KruiseHook`:
read; made when missing; refused, naming the fix, when it is not this provider's or may not be made."""

from __future__ import annotations

from typing import Any

from kubernetes.client import ApiException

from airflow_kruise_chain.core.runnerinstall import (
    configmap_problem,
    creation_refused,
    not_ours,
    runner_configmap,
)
from airflow_kruise_chain.hooks.retry import KruiseApiError, RunnerUnavailableError, api_message, explain


def ensure_runner_configmap(hook: Any, namespace: str) -> bool:
    """Make sure this provider's runner ConfigMap is in `namespace` (through `hook`, a `KruiseHook`: its
    retried calls): read it, create it when it is missing (another setup's create at the same time: 409, read
    again), and raise `RunnerUnavailableError` when the one found is not this provider's or the identity may
    not create it. True when this call made it."""
    body = runner_configmap(namespace)
    name = body["metadata"]["name"]
    core = hook.core_v1_client
    found = _read(hook, name, namespace)
    if found is None:
        try:
            hook._call(
                "create",
                "configmaps",
                namespace,
                name,
                lambda _: core.create_namespaced_config_map(namespace, body, _preload_content=False),
            )
        except ApiException as e:
            if e.status == 403:
                raise RunnerUnavailableError(creation_refused(namespace, api_message(e)), 403) from e
            if e.status != 409:
                raise explain(e, "create", "configmaps", namespace, name) from e
        else:
            return True
        found = _read(hook, name, namespace)  # made meanwhile, or by this create's lost answer
        if found is None:
            raise KruiseApiError(f'configmaps "{name}" in {namespace!r} vanished while being created; retry')
    problem = configmap_problem(found)
    if problem is not None:
        raise RunnerUnavailableError(not_ours(namespace, problem))
    return False


def _read(hook: Any, name: str, namespace: str) -> dict[str, Any] | None:
    read = hook.core_v1_client.read_namespaced_config_map
    return hook._get_or_none("configmaps", namespace, name, lambda: hook._raw(read, name, namespace))
