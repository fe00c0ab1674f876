"""Every piece a chain pod misses is named, with its fix, as soon as the cluster reports it, not at the
startup timeout (`core/startup.py`): a missing Secret or ConfigMap (the kubelet's FailedMount), a container
the kubelet cannot configure (CreateContainerConfigError), no node with room (FailedScheduling; a cluster
autoscaler's TriggeredScaleUp is waited for, its NotTriggerScaleUp is not), a missing ServiceAccount or
namespace (the pod create refused). Each failed setup leaves no pod behind. The setup's startup_timeout is
60 s: a failure that names its object came before it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local import resources as R
from kruise_local.testing import wait_for

from airflow_kruise_chain.core.errors import PodStartError
from airflow_kruise_chain.hooks.kruise import KruiseApiError
from tests.e2e.inline import FAST_POD
from tests.provider.support import make_context

pytestmark = pytest.mark.slow

STAGE = {"name": "load", "image": "busybox:1.36", "cmds": ["true"]}


def _setup(stages: list[dict[str, Any]], **options: Any) -> Any:
    from airflow_kruise_chain.operators.chain import ChainSetupOperator

    chain = {"name": "c", "namespace": "default", "stages": stages, **FAST_POD, **options}
    return ChainSetupOperator(task_id="setup", startup_timeout=60, chain=chain)


def _failure(setup: Any, error: type[Exception] = PodStartError) -> tuple[Exception, float]:
    """The setup's error and how long it took to come."""
    started = time.monotonic()
    with pytest.raises(error) as failed:
        setup.execute(make_context("d", "run-1"))
    return failed.value, time.monotonic() - started


def _no_pod_left(cluster: LocalCluster) -> None:
    pods = lambda: cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))  # noqa: E731
    wait_for(lambda: not pods(), 30, what="the failed setup's pod to be gone")


def test_a_missing_secret_is_named_with_its_fix(e2e_cluster) -> None:
    ref = {"TOKEN": {"kind": "secret", "name": "no-such-creds", "key": "token"}}
    error, took = _failure(_setup([{**STAGE, "env_sources": ref}]))
    assert error.reason == "FailedMount"
    message = str(error)
    assert "Secret 'no-such-creds' does not exist in namespace 'default' (read by stage 'load')" in message
    assert 'secret "no-such-creds" not found' in message  # the kubelet's own words
    assert "kubectl create secret generic no-such-creds -n default" in message
    assert took < 60  # named before the startup timeout (measured: docs/troubleshooting.md)
    _no_pod_left(e2e_cluster)


def test_a_missing_config_map_is_named_with_its_fix(e2e_cluster) -> None:
    error, _ = _failure(_setup([{**STAGE, "env_from": [{"kind": "configMap", "name": "settings"}]}]))
    assert error.reason == "FailedMount"
    assert "ConfigMap 'settings' does not exist in namespace 'default'" in str(error)
    assert "kubectl create configmap settings -n default" in str(error)


def test_a_container_the_kubelet_cannot_configure_is_named(e2e_cluster) -> None:
    """runAsNonRoot with images that run as root: CreateContainerConfigError (`verifyRunAsNonRoot`)."""
    template = {"spec": {"terminationGracePeriodSeconds": 2, "securityContext": {"runAsNonRoot": True}}}
    error, _ = _failure(_setup([STAGE], pod_template=template))
    assert error.reason == "CreateContainerConfigError"
    assert "would run as root" in str(error) and "runAsUser" in str(error)


def test_a_missing_service_account_is_named_with_its_fix(e2e_cluster) -> None:
    error, _ = _failure(_setup([STAGE], service_account_name="nobody"), KruiseApiError)
    message = str(error)
    assert "the ServiceAccount 'nobody' does not exist" in message
    assert "kubectl create serviceaccount nobody -n default" in message
    assert "permission denied" not in message


def test_a_missing_namespace_is_named_with_its_fix(e2e_cluster) -> None:
    setup = _setup([STAGE])
    setup.chain = {**setup.chain, "namespace": "nope"}
    setup.namespace = "nope"
    error, _ = _failure(setup, KruiseApiError)
    assert "the namespace 'nope' does not exist: create it (kubectl create namespace nope)" in str(error)
    assert "kubectl apply -k deploy/" in str(error)


BIG = {**STAGE, "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "2Gi"}}}


@pytest.fixture
def small(tmp_path, airflow_home, monkeypatch) -> Iterator[LocalCluster]:
    """A cluster whose node has 1 GiB: a stage of 2 GiB fits on no node (a node 'big' can be added)."""
    import json

    config = ClusterConfig(
        profile="fast",
        allocatable={"cpu": "4", "memory": "1Gi", "pods": "110"},
        node_allocatable={"big": {"memory": "8Gi"}},
        root=str(tmp_path / "cluster"),
    )
    with LocalCluster(config) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT",
            json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}),
        )
        monkeypatch.setenv("AIRFLOW__KRUISE_CHAIN__SCALE_UP_WAIT", "3")
        yield cluster


def test_no_node_with_room_fails_after_the_scale_up_wait(small) -> None:
    error, took = _failure(_setup([BIG], sizing="static"))
    assert error.reason == "FailedScheduling"
    assert "no node can run the chain pod" in str(error) and "Insufficient memory" in str(error)
    assert "lower the largest stage's requests" in str(error)
    assert took >= 3  # the autoscaler had scale_up_wait to announce a node


def _as_autoscaler(
    cluster: LocalCluster, reason: str, said: str, then: Callable[[], None]
) -> threading.Thread:
    """Play cluster-autoscaler: once the chain pod is unschedulable, record `reason`, then call `then`."""

    def record(pod: dict[str, Any]) -> None:
        cluster.events.record(pod, "Normal", reason, said, "cluster-autoscaler")

    def act() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pods = cluster.call(lambda: list(cluster.store.items(R.PODS, "default")))
            for pod in pods:
                if any(c.get("reason") == "Unschedulable" for c in pod["status"].get("conditions") or []):
                    cluster.call(lambda pod=pod: record(pod))
                    then()
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


def test_a_triggered_scale_up_is_waited_for(small) -> None:
    def add_node() -> None:
        time.sleep(5)  # longer than scale_up_wait: the TriggeredScaleUp keeps the setup waiting
        small.call(lambda: small.add_node("big"))

    said = "pod triggered scale-up: [{pool-big 0->1 (max: 3)}]"
    thread = _as_autoscaler(small, "TriggeredScaleUp", said, add_node)
    try:
        result = _setup([BIG], sizing="static").execute(make_context("d", "run-1"))
    finally:
        thread.join()
    assert result["node"] == "big"


def test_an_autoscaler_that_adds_no_node_fails_at_once(small, monkeypatch) -> None:
    monkeypatch.setenv("AIRFLOW__KRUISE_CHAIN__SCALE_UP_WAIT", "50")
    said = "pod didn't trigger scale-up: 1 max node group size reached"
    thread = _as_autoscaler(small, "NotTriggerScaleUp", said, lambda: None)
    try:
        error, took = _failure(_setup([BIG], sizing="static"))
    finally:
        thread.join()
    assert error.reason == "NotTriggerScaleUp" and "max node group size reached" in str(error)
    assert took < 50  # not the scale_up_wait


def test_the_documented_role_is_enough_to_name_a_missing_secret(e2e_cluster, tmp_path) -> None:
    """With authorization on and exactly deploy/role.yaml (its `list` on events): the same message."""
    import yaml

    from tests.e2e.conftest import ROOT, connect_as

    role = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())
    connect_as(e2e_cluster, tmp_path, role["rules"])
    ref = {"TOKEN": {"kind": "secret", "name": "no-such-creds", "key": "token"}}
    error, _ = _failure(_setup([{**STAGE, "env_sources": ref}]))
    assert error.reason == "FailedMount" and "Secret 'no-such-creds' does not exist" in str(error)
