"""The runner probe: start one chain pod as the setup does (a one-stage chain of the runner image, at the Pod
Security level the namespace admits), wait until both slots are parked, delete it. Only a node can say whether
the runner's image can be pulled and installed and a chain pod starts; the probe fails with the setup's own
message (`core/startup.py`: a missing ConfigMap, an image no node can pull, a runner that is not this
provider's, no node with room), which names the fix. `--no-probe` skips it (nothing is created then)."""

from __future__ import annotations

import time
import uuid

from airflow_kruise_chain.preflight.base import FAIL, OK, SKIP, UNKNOWN, Finding, Preflight, register
from airflow_kruise_chain.preflight.checks import chain_pod

_WHERE = "the message says what (docs/troubleshooting.md)"


@register("runner ConfigMap", needs=("connection", "namespace"))
def runner_configmap(p: Preflight) -> Finding:
    """The stage runner's ConfigMap (`core/runnerinstall.py`) is this provider's, or is missing and the
    identity may create it (the setup then does); nothing is created here."""
    from airflow_kruise_chain.core.runnerinstall import (
        APPLY_COMMAND,
        configmap_name,
        configmap_problem,
        not_ours,
        replace_advice,
    )
    from airflow_kruise_chain.preflight.checks import may

    name = configmap_name()
    status, body = p.get(f"/api/v1/namespaces/{p.namespace}/configmaps/{name}")
    check = "runner ConfigMap"
    if status == 200:
        problem = configmap_problem(body)
        if problem is not None:
            return Finding(
                check, FAIL, not_ours(p.namespace, problem, name), replace_advice(p.namespace, name)
            )
        return Finding(check, OK, f"{name} is this provider's runner")
    if status != 404:
        said = f"reading {name} answered {status}: {body.get('message', '')}"
        return Finding(check, UNKNOWN, said, "grant get on configmaps (deploy/role.yaml)")
    allowed = may(p, "", "configmaps", "", "create")  # True, False, or why the review could not say
    if allowed is True:
        return Finding(check, OK, f"{name} is missing: the first setup makes it")
    if allowed is False:
        return Finding(
            check,
            FAIL,
            f"{name} is missing and the connection's identity may not create it",
            f"have an admin apply it once: {APPLY_COMMAND.format(namespace=p.namespace)}, or grant create on "
            "configmaps (deploy/role.yaml)",
        )
    return Finding(check, UNKNOWN, f"{name} is missing and {allowed}")


@register("runner", needs=("connection", "namespace", "Pod Security", "runner ConfigMap"))
def runner(p: Preflight) -> Finding:
    from airflow_kruise_chain.core.errors import ChainError, StageTimeoutError
    from airflow_kruise_chain.core.manifest import INIT_CONTAINER
    from airflow_kruise_chain.core.runnerinstall import install_failure
    from airflow_kruise_chain.core.startup import StartupWatch, wait_started

    if not p.probe:
        return Finding(
            "runner", SKIP, "not checked (--no-probe): whether a node pulls the runner and starts a chain pod"
        )
    hook = p.hook
    if not hasattr(hook, "pod_events"):  # a plain KubernetesHook: the probe needs the chain's hook
        return Finding(
            "runner", UNKNOWN, "the probe needs a KruiseHook (a kruise_chain or kubernetes connection)"
        )
    name = f"kruise-chain-preflight-{uuid.uuid4().hex[:10]}"
    pod = chain_pod(p, p.pod_security, name)
    started = time.monotonic()
    try:
        hook.ensure_runner_configmap(p.namespace)  # as the setup does: the runner the probe pod installs
        hook.create_pod(pod, p.namespace)
        try:
            ready = wait_started(
                hook,
                name,
                p.namespace,
                p.probe_timeout,
                StartupWatch(p.namespace),
                log=lambda *args: None,
                install_failure=lambda found: install_failure(found.raw, INIT_CONTAINER),
            )
        finally:
            hook.delete_pod(name, p.namespace, grace_period_seconds=0)
    except StageTimeoutError as e:
        return Finding(
            "runner", UNKNOWN, f"a probe chain pod did not start in time: {e}", "raise --probe-timeout"
        )
    except (ChainError, RuntimeError) as e:  # PodStartError, PodLostError, a refused create (KruiseApiError)
        said, _, fix = str(e).partition("; fix: ")
        return Finding("runner", FAIL, f"a probe chain pod cannot start: {said}", fix or _WHERE)
    took = time.monotonic() - started
    return Finding(
        "runner",
        OK,
        f"a probe chain pod ({p.runner_image}, pod_security={p.pod_security}) started on "
        f"{ready.node_name} in {took:.1f}s and was deleted",
    )
