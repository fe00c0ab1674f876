"""`allowPrivilegeEscalation`, as the kubelet and runc apply it: the kubelet asks for no_new_privs only when
the container sets it to false (`pkg/securitycontext/util.go` `AddNoNewPrivileges`; unset is allowed), runc
sets `PR_SET_NO_NEW_PRIVS` before it execs the process (`standard_init_linux.go`), and then a set-user-ID
program grants nothing; otherwise it does, up to the container's bounding set (runc makes the container's
capabilities the bounding set: a setuid-root program gets those, not every capability). The API server
refuses false with `privileged: true` or an added `CAP_SYS_ADMIN` (`ValidateSecurityContext`). Through the
real `kubernetes` client; the escalation needs kruise-local as root (`sandbox="oci"`: bubblewrap always sets
no_new_privs)."""

from __future__ import annotations

import os
from typing import Any

import pytest
from kruise_local.capabilities import CAPABILITY_NAMES, DEFAULT_CAPABILITIES
from kruise_local.testing import container, log_of, pod_body, wait_for

IMAGE = "kl-test/setuid-tools:1"
SHOW = "suid-id -u; grep NoNewPrivs /proc/self/status; suid-cat /proc/self/status | grep -E '^Cap(Eff|Bnd)'"


def _mask(caps: tuple[str, ...]) -> str:
    return f"{sum(1 << CAPABILITY_NAMES.index(c[4:]) for c in caps):016x}"


@pytest.fixture
def setuid_image(cluster: Any) -> str:
    """An image with set-user-ID root copies of `id` and `cat` (mode 4755, as its layer records them)."""
    if not cluster.kubelet.runtime.models_privilege_escalation:
        pytest.skip(f"the {cluster.kubelet.runtime.sandbox} sandbox always sets no_new_privs")
    cluster.catalogue.add(
        {
            "ref": IMAGE,
            "files": {
                "/usr/local/bin/suid-id": {"from": "/usr/bin/id", "mode": "4755"},
                "/usr/local/bin/suid-cat": {"from": "/usr/bin/cat", "mode": "4755"},
            },
        }
    )
    return IMAGE


@pytest.mark.skipif(os.geteuid() != 0, reason="a set-user-ID program escalates with kruise-local as root")
def test_a_setuid_program_escalates_unless_the_container_forbids_it(core, namespace, setuid_image) -> None:
    cases: dict[str, dict[str, Any]] = {
        "unset": {},
        "allowed": {"allowPrivilegeEscalation": True},
        "forbidden": {"allowPrivilegeEscalation": False},
        "only-kill": {"capabilities": {"drop": ["ALL"], "add": ["KILL"]}},
    }
    body = pod_body(
        "escalate",
        *(
            container(name, f"{SHOW}; sleep 30", setuid_image, securityContext={"runAsUser": 2000, **sc})
            for name, sc in cases.items()
        ),
        restart="Never",
    )
    core.create_namespaced_pod(namespace, body)
    logs = {
        name: wait_for(
            lambda name=name: (lines := log_of(core, namespace, "escalate", name).splitlines())[3:] and lines,
            timeout=60,
            what=f"{name}'s escalation",
        )
        for name in cases
    }
    default = _mask(DEFAULT_CAPABILITIES)
    assert logs["unset"] == ["0", "NoNewPrivs:\t0", f"CapEff:\t{default}", f"CapBnd:\t{default}"]
    assert logs["allowed"] == logs["unset"]
    assert logs["forbidden"][:2] == ["2000", "NoNewPrivs:\t1"]  # the set-user-ID bit granted nothing
    assert logs["forbidden"][2:] == ["CapEff:\t0000000000000000", f"CapBnd:\t{default}"]
    kill = _mask(("CAP_KILL",))
    assert logs["only-kill"] == ["0", "NoNewPrivs:\t0", f"CapEff:\t{kill}", f"CapBnd:\t{kill}"]


def test_no_escalation_is_refused_with_privileged_or_an_added_sys_admin(core, namespace) -> None:
    from kubernetes.client import ApiException

    def create(name: str, sc: dict[str, Any]) -> ApiException | None:
        try:
            core.create_namespaced_pod(namespace, pod_body(name, container("c", "true", securityContext=sc)))
        except ApiException as e:
            return e
        return None

    privileged = create("privileged", {"allowPrivilegeEscalation": False, "privileged": True})
    assert privileged is not None and privileged.status == 422
    assert "cannot set `allowPrivilegeEscalation` to false and `privileged` to true" in privileged.body
    assert "spec.containers[0].securityContext" in privileged.body
    admin = create("admin", {"allowPrivilegeEscalation": False, "capabilities": {"add": ["CAP_SYS_ADMIN"]}})
    assert admin is not None and admin.status == 422
    assert "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN" in admin.body
    # upstream compares the exact string: SYS_ADMIN (what containerd takes too) passes validation
    plain = {"allowPrivilegeEscalation": False, "capabilities": {"add": ["SYS_ADMIN"]}}
    assert create("plain", plain) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="a root container's capabilities need kruise-local as root")
def test_the_command_is_execd_with_the_containers_capabilities(cluster, core, namespace) -> None:
    """runc applies the container's capabilities before it execs the command (`finalizeNamespace`), so the
    kernel's exec-time checks see them: a root process without DAC_OVERRIDE and DAC_READ_SEARCH that execs a
    file it cannot read becomes not dumpable (`fs/exec.c` `would_dump`), and another process of its user
    cannot read its `/proc/1/environ`; with the default set (DAC_OVERRIDE) the file counts as readable."""
    if cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("the unshare fallback keeps every capability")
    image = "kl-test/execute-only-busybox:1"
    cluster.catalogue.add(
        {
            "ref": image,
            "base": "scratch",
            "files": {"/bin/busybox": {"from": "/bin/busybox", "mode": "0111"}},
            "links": {"/bin/sh": "busybox", "/bin/cat": "busybox", "/bin/sleep": "busybox"},
        }
    )
    show = "cat /proc/1/environ >/dev/null 2>&1 && echo readable || echo unreadable; sleep 30"
    dropped = {"capabilities": {"drop": ["DAC_OVERRIDE", "DAC_READ_SEARCH"]}}
    body = pod_body(
        "dumpable",
        container("dropped", show, image, securityContext=dropped),
        container("default", show, image),
        restart="Never",
    )
    core.create_namespaced_pod(namespace, body)
    seen = {
        name: wait_for(
            lambda name=name: log_of(core, namespace, "dumpable", name).strip(), timeout=60, what=name
        )
        for name in ("dropped", "default")
    }
    assert seen == {"dropped": "unreadable", "default": "readable"}
