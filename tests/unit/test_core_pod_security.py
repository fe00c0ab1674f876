"""The chain pod meets Pod Security `baseline` by default and `restricted` with `pod_security="restricted"`,
and mounts no service account token unless asked: judged by the local cluster's checks (k8s.io/pod-security-
admission's), the oracle the e2e tests enforce through the API."""

from __future__ import annotations

import pytest
from kruise_local.pod_security_checks import evaluate

from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec, build_chain_pod
from airflow_kruise_chain.core.manifest import INIT_CONTAINER, RESTRICTED_RUN_AS_USER, SOURCES_FS_GROUP


def make_pod(**options) -> dict:
    spec = ChainSpec(
        name="etl",
        namespace="data",
        stages=[StageSpec("a", "busybox:1.36", ["true"]), StageSpec("b", "alpine:3.20", ["true"])],
        **options,
    )
    spec.validate()
    return build_chain_pod(spec, pod_name="p", dag_id="d", run_id="r", first_images=spec.first_images)


def violations(pod: dict, level: str) -> list[str]:
    return [reason for reason, _ in evaluate(level, 35, pod["metadata"], pod["spec"])]


def test_default_chain_pod_meets_baseline_but_not_restricted() -> None:
    pod = make_pod()
    assert violations(pod, "baseline") == []
    assert "allowPrivilegeEscalation != false" not in violations(pod, "restricted")  # every chain's
    assert "runAsNonRoot != true" in violations(pod, "restricted")
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_restricted_chain_pod_meets_restricted_on_every_container() -> None:
    pod = make_pod(pod_security="restricted")
    assert violations(pod, "restricted") == []
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    assert [c["name"] for c in containers] == [INIT_CONTAINER, "slot-a", "slot-b"]
    for c in containers:
        slot = {"readOnlyRootFilesystem": True} if c["name"] != INIT_CONTAINER else {}
        assert c["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "runAsUser": RESTRICTED_RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
            **slot,
        }


def test_restricted_keeps_the_pods_own_user() -> None:
    """A pod-level runAsUser (security_context) is the chain's user: the containers do not override it."""
    pod = make_pod(pod_security="restricted", security_context={"runAsUser": 2000, "fsGroup": 2000})
    assert violations(pod, "restricted") == []
    assert all("runAsUser" not in c["securityContext"] for c in pod["spec"]["containers"])


def test_automount_is_opt_in() -> None:
    assert make_pod(automount_service_account_token=True)["spec"]["automountServiceAccountToken"] is True


@pytest.mark.parametrize(
    ("options", "field", "words"),
    [
        ({"pod_security": "privileged"}, "pod_security", "'baseline' or 'restricted'"),
        (
            {"pod_security": "restricted", "security_context": {"runAsUser": 0}},
            "security_context.runAsUser",
            "0",
        ),
        (
            {"pod_security": "restricted", "security_context": {"runAsNonRoot": False}},
            "security_context.runAsNonRoot",
            "restricted",
        ),
        ({"automount_service_account_token": "yes"}, "automount_service_account_token", "True or False"),
    ],
)
def test_bad_options_name_the_field(options: dict, field: str, words: str) -> None:
    with pytest.raises(ChainConfigError) as info:
        make_pod(**options)
    assert info.value.field == field and words in str(info.value)


def test_kruise_chain_takes_the_options_at_parse_time() -> None:
    from airflow_kruise_chain.chain import KruiseChain

    with pytest.raises(ChainConfigError) as info:
        KruiseChain("c", namespace="ns", pod_security="strict")
    assert info.value.field == "pod_security"
    KruiseChain("c", namespace="ns", pod_security="restricted", automount_service_account_token=True)


def test_a_pod_that_mounts_secrets_or_configmaps_gets_an_fsgroup_unless_it_names_one() -> None:
    """The kubelet writes Secret files root's with their mode (0400): only the pod's fsGroup lets a
    non-root runner read them (`manifest.SOURCES_FS_GROUP`); a chain that mounts none keeps the pod as is."""
    assert "securityContext" not in make_pod()["spec"]
    secret = {"DB": {"kind": "secret", "name": "db", "key": "pw"}}
    spec = ChainSpec(
        name="etl", namespace="data", stages=[StageSpec("a", "busybox:1.36", ["true"], env_sources=secret)]
    )
    spec.validate()
    pod = build_chain_pod(spec, pod_name="p", dag_id="d", run_id="r", first_images=spec.first_images)
    assert pod["spec"]["securityContext"] == {"fsGroup": SOURCES_FS_GROUP}
    projected = {"name": "cfg", "projected": {"sources": [{"configMap": {"name": "c"}}]}}
    assert make_pod(volumes=[projected])["spec"]["securityContext"] == {"fsGroup": SOURCES_FS_GROUP}
    own = make_pod(volumes=[projected], security_context={"fsGroup": 7, "runAsUser": 9})
    assert own["spec"]["securityContext"] == {"fsGroup": 7, "runAsUser": 9}
    assert violations(make_pod(volumes=[projected], pod_security="restricted"), "restricted") == []
