"""A container's process gets the capabilities containerd and runc give it (`capabilities.py`): containerd's
default set (`pkg/oci/spec.go` `defaultUnixCaps`), every capability when privileged, else the security
context's `add` and `drop` (`WithCapabilities`: ALL first, then the names). Read from the container's own
`/proc/self/status` through the real `kubernetes` client; the sets are those of a root container, so the
check needs kruise-local running as root, oci or bwrap (an unprivileged sandbox has no capability at all)."""

from __future__ import annotations

import os

import pytest
from kruise_local.capabilities import (
    ALL_CAPABILITIES,
    CAPABILITY_NAMES,
    DEFAULT_CAPABILITIES,
    container_capabilities,
)
from kruise_local.testing import container, log_of, pod_body, wait_for

SHOW = "grep -E '^Cap(Eff|Prm)' /proc/self/status; sleep 30"


def _mask(caps: tuple[str, ...]) -> str:
    return f"{sum(1 << CAPABILITY_NAMES.index(c[4:]) for c in caps):016x}"


def test_the_security_context_sets_the_capability_sets():
    assert sorted(container_capabilities({})) == sorted(DEFAULT_CAPABILITIES)
    dropped = container_capabilities({"securityContext": {"capabilities": {"drop": ["dac_override"]}}})
    assert "CAP_DAC_OVERRIDE" not in dropped and len(dropped) == len(DEFAULT_CAPABILITIES) - 1
    only = {"capabilities": {"add": ["KILL", "ALL"], "drop": ["ALL"]}}  # ALL first: the named add stays
    assert container_capabilities({"securityContext": only}) == ("CAP_KILL",)
    every = {"capabilities": {"add": ["ALL"], "drop": ["SYS_PTRACE"]}}
    assert container_capabilities({"securityContext": every}) == tuple(
        c for c in ALL_CAPABILITIES if c != "CAP_SYS_PTRACE"
    )
    privileged = {"privileged": True, "capabilities": {"drop": ["ALL"]}}
    assert container_capabilities({"securityContext": privileged}) == ALL_CAPABILITIES


@pytest.mark.skipif(os.geteuid() != 0, reason="a root container's capability sets need kruise-local as root")
def test_a_containers_process_has_the_capabilities_of_its_security_context(cluster, core, namespace):
    if cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("the unshare fallback keeps every capability")
    cases = {
        "default": {},
        "dropped": {"capabilities": {"drop": ["DAC_OVERRIDE", "SYS_PTRACE"]}},
        "only-kill": {"capabilities": {"drop": ["ALL"], "add": ["KILL"]}},
        "privileged": {"privileged": True},
    }
    body = pod_body(
        "caps", *(container(name, SHOW, securityContext=sc) for name, sc in cases.items()), restart="Never"
    )
    core.create_namespaced_pod(namespace, body)
    for name, sc in cases.items():
        lines = wait_for(
            lambda name=name: log_of(core, namespace, "caps", name).splitlines() or None,
            timeout=60,
            what=f"{name}'s capabilities",
        )
        mask = _mask(container_capabilities({"securityContext": sc}))
        assert lines == [f"CapPrm:\t{mask}", f"CapEff:\t{mask}"], name
