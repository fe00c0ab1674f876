"""An exec into a container runs with the container's capabilities, bounding set, no_new_privs and user, as
runc's exec does: containerd's CRI `execInternal` (`container_execsync.go`) execs with the container's own
process spec (`pspec := spec.Process`), and runc's `linuxSetnsInit.Init` (`setns_init_linux.go`) applies it
through `finalizeNamespace` (`init_linux.go`: bounding set, KEEPCAPS, user, capabilities) before the execve.
The kernel decides at that execve whether the process stays dumpable (fs/exec.c `would_dump`: a file its
credentials cannot read, such as an execute-only binary, leaves it not dumpable), and a child of a process
that is not dumpable may not open its `/proc/PID/fd` nor `environ` (`proc_fd_access_allowed`,
`ptrace_may_access`) without CAP_SYS_PTRACE. Before, kruise-local's exec ran the command with all of its own
capabilities held at the execve (`nsenter` as root), so such a process stayed dumpable and every child could
read it. Through the real `kubernetes` client, on each sandbox that isolates (the `none` sandbox runs an exec
as kruise-local's own process: no isolation to model)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.capabilities import CAPABILITY_NAMES, container_capabilities
from kruise_local.testing import container, exec_output, pod_body, running, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="capabilities need kruise-local as root")

SANDBOXES = ["bwrap", "unshare", "oci"]
SETUP = "cp /bin/busybox /work/busybox && chmod 0111 /work/busybox && touch /work/ready; sleep 3600"
UNREADABLE = ["DAC_OVERRIDE", "DAC_READ_SEARCH", "SYS_PTRACE"]
CASES: dict[str, dict[str, Any]] = {
    "root-default": {},
    "root-dropped": {"capabilities": {"drop": UNREADABLE}},
    "root-none": {"capabilities": {"drop": ["ALL"]}},
    "user-none": {"runAsUser": 1000, "runAsGroup": 1000, "capabilities": {"drop": ["ALL"]}},
}
SHOW = "grep -E '^(CapEff|CapBnd|NoNewPrivs|Uid)' /proc/self/status /proc/1/status"
PROBE = "exec 4</work/ready; for f in fd/4 environ; do "
PROBE += "/work/busybox cat /proc/$$/$f >/dev/null 2>&1 && echo $f-open || echo $f-denied; done"
READY = ["sh", "-c", "test -e /work/ready && echo yes"]


@pytest.fixture(scope="module", params=SANDBOXES)
def pod(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A CoreV1Api of a cluster whose runtime uses the sandbox `request.param`, with a running pod `caps`
    (one container of each case, an execute-only busybox in its volume), and the sandbox."""
    from kubernetes import client, config

    root = tmp_path_factory.mktemp(f"execcaps-{request.param}")
    with LocalCluster(ClusterConfig(profile="fast", sandbox=request.param, root=str(root / "c"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(root / "kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api)
        try:
            core.create_namespace({"metadata": {"name": "caps"}})
            mounts = [{"name": "work", "mountPath": "/work"}]
            containers = [
                container(name, SETUP, securityContext=sc, volumeMounts=mounts) for name, sc in CASES.items()
            ]
            body = pod_body("caps", *containers, restart="Never", volumes=[{"name": "work", "emptyDir": {}}])
            core.create_namespaced_pod("caps", body)
            for name in CASES:
                wait_for(lambda n=name: running(core, "caps", "caps", n), timeout=60, what=f"{name} runs")
                wait_for(
                    lambda n=name: "yes" in exec_output(core, "caps", "caps", n, READY),
                    timeout=30,
                    what=f"{name}'s busybox",
                )
            yield core, request.param
        finally:
            api.close()


def _mask(caps: tuple[str, ...]) -> str:
    return f"{sum(1 << CAPABILITY_NAMES.index(c[4:]) for c in caps):016x}"


def _fields(out: str, path: str) -> dict[str, str]:
    """The status fields of `path` in grep's output (`path:Name:\tvalue`)."""
    lines = [line.removeprefix(path + ":") for line in out.splitlines() if line.startswith(path)]
    rows = [line.split(":\t", 1) for line in lines]
    return {k: v.strip() for k, v in rows}


@pytest.mark.parametrize("name", list(CASES))
def test_an_exec_has_the_containers_capability_sets(pod: tuple[Any, str], name: str) -> None:
    core, sandbox = pod
    out = exec_output(core, "caps", "caps", name, ["sh", "-c", SHOW])
    mine, pid1 = _fields(out, "/proc/self/status"), _fields(out, "/proc/1/status")
    assert mine and mine == pid1, out  # the exec's effective and bounding sets, no_new_privs, user: pid 1's
    if sandbox != "unshare":  # (the unshare fallback keeps every capability)
        eff = _mask(container_capabilities({"securityContext": CASES[name]}))
        assert mine["CapEff"] == (eff if not name.startswith("user") else "0" * 16), out


@pytest.mark.parametrize("name", list(CASES))
def test_a_process_of_an_execute_only_binary_is_not_dumpable(pod: tuple[Any, str], name: str) -> None:
    """Exec'd from the execute-only busybox, the process is dumpable only when the container's credentials
    can read the binary (CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH); a child opens its /proc/PID/fd and
    environ only then, or with CAP_SYS_PTRACE."""
    core, sandbox = pod
    out = exec_output(core, "caps", "caps", name, ["/work/busybox", "sh", "-c", PROBE]).split()
    readable = name == "root-default" or sandbox == "unshare"  # unshare: root, every capability
    want = ["fd/4-open", "environ-open"] if readable else ["fd/4-denied", "environ-denied"]
    assert out == want, (sandbox, name)


def test_an_exec_has_the_containers_environment(pod: tuple[Any, str]) -> None:
    """Nothing of the exec's own set-up reaches the command's environment, nor the container's: not the
    LC_CTYPE that Python's C locale coercion (PEP 538) sets in ociinit's (the unshare sandbox's pid 1 still
    has it: its `ociinit.py --proc`)."""
    core, sandbox = pod
    show = "echo ${LC_CTYPE-unset}; tr '\\0' '\\n' </proc/1/environ | grep -c ^LC_CTYPE="
    out = exec_output(core, "caps", "caps", "root-default", ["sh", "-c", show]).split()
    assert out[0] == "unset"
    if sandbox != "unshare":
        assert out[1] == "0"
