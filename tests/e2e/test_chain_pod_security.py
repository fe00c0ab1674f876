"""Chains in namespaces that enforce Pod Security (the local cluster's PodSecurity admission, as upstream's):
the default chain pod meets `baseline`; `pod_security="restricted"` meets `restricted`; a chain that does
not meet its namespace's level fails at setup with an error naming the option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

STEP = 'printf \'{"uid": "%s"}\' "$(id -u)" > "$CHAIN_OUTPUT"'


def labelled_namespace(cluster: Any, level: str, tmp_path: Path) -> str:
    """A namespace labelled pod-security.kubernetes.io/enforce=<level>, made through the official client."""
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(cluster.write_kubeconfig(tmp_path / "admin"))))
    name = f"psa-{level}"
    core.create_namespace(
        {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": level}}}
    )
    return name


def run_chain(namespace: str, failures: Failures | None = None, **options: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    default_args = {"on_failure_callback": failures} if failures else {}
    with DAG(
        f"psa_{namespace.replace('-', '_')}",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        default_args=default_args,
    ) as dag:
        with KruiseChain("c", namespace=namespace, prewarm=False, **FAST_POD, **options) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", STEP])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", STEP])
            one >> two
    return run_inline(dag)


def test_restricted_namespace_admits_a_restricted_chain(e2e_cluster, capfd, tmp_path) -> None:
    ns = labelled_namespace(e2e_cluster, "restricted", tmp_path)
    history = pod_events(e2e_cluster)
    run = run_chain(ns, pod_security="restricted")
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert [xcoms(run)[f"c.{s}"]["outputs"] for s in ("one", "two")] != [None, None]
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert pod["metadata"]["namespace"] == ns and pod["spec"]["automountServiceAccountToken"] is False
    for c in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        assert c["securityContext"]["runAsNonRoot"] is True


def test_restricted_namespace_refuses_the_default_chain_naming_the_option(
    e2e_cluster, capfd, tmp_path
) -> None:
    ns = labelled_namespace(e2e_cluster, "restricted", tmp_path)
    failures = Failures()
    run = run_chain(ns, failures)
    capfd.readouterr()
    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.setup"][0] == "failed" and states["c.one"][0] == "upstream_failed"
    error = str(failures.errors["c.setup"])
    assert "pod_security='restricted'" in error
    assert 'violates PodSecurity "restricted:latest": ' in error and "runAsNonRoot != true" in error
    assert "allowPrivilegeEscalation" not in error  # every chain container sets it false
    assert states["c.setup"][1] == 1  # an AirflowFailException: no retry can help
    pods = e2e_cluster.call(lambda: list(e2e_cluster.store.items(R.PODS, ns)))
    assert pods == []


def test_baseline_namespace_admits_the_default_chain(e2e_cluster, capfd, tmp_path) -> None:
    ns = labelled_namespace(e2e_cluster, "baseline", tmp_path)
    run = run_chain(ns)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
