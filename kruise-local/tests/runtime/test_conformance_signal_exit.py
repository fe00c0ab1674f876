"""A container whose pid 1 a signal ends records 128 + the signal as its exit code, as runc and containerd
report an init process's wait status (runc `libcontainer/utils` `ExitStatus`, containerd `sys/reaper`
`exitStatus`: `status.Signaled()` gives 128 + signal) and the kubelet copies it into
`state.terminated.exitCode` with reason `Error` (`kuberuntime_container.go` `toKubeContainerStatus`). From
outside, SIGKILL always reaches pid 1 (the OOM killer's, a node agent's); SIGTERM reaches it only through
a handler of its own (pid_namespaces(7)): without one the command runs on; a fault signal (SIGSEGV) ends it
as it would any process. On every sandbox kruise-local runs, through the real `kubernetes` client. Before,
the oci and unshare sandboxes recorded 1 for a SIGKILLed pid 1: util-linux `unshare --fork` < 2.40 exits 1
when its child dies of SIGKILL (it cannot re-raise SIGKILL on itself, util-linux#2614)."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, status_of, wait_for

SANDBOXES = ["bwrap", "unshare", "oci", "none"]


@pytest.fixture(scope="module", params=SANDBOXES)
def sandbox_core(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A CoreV1Api of a cluster whose runtime uses the sandbox `request.param`, and a namespace on it."""
    if request.param == "oci" and os.geteuid() != 0:
        pytest.skip("the oci sandbox needs kruise-local as root")
    from kubernetes import client, config

    root = tmp_path_factory.mktemp(f"sig-{request.param}")
    with LocalCluster(ClusterConfig(profile="fast", sandbox=request.param, root=str(root / "c"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(root / "kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": "sig"}})
        try:
            yield core
        finally:
            api.close()


def _host_pid(argv: list[str]) -> int | None:
    """The host pid of the one process whose command line is `argv` (a unique token in it), once it runs."""
    want = "\0".join(argv).encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == want:
                    found.append(int(entry.name))
            except OSError:
                continue
    assert len(found) <= 1, found
    return found[0] if found else None


def _start(core: Any, script: str, image: str = "busybox:1.36") -> str:
    name = f"p-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod("sig", pod_body(name, container("c", script, image), restart="Never"))
    return name


def _running(core: Any, name: str, argv: list[str]) -> int:
    """Wait for the container to run `argv`; its host pid."""
    wait_for(lambda: running(core, "sig", name, "c"), timeout=60, what=f"{name} running")
    return wait_for(lambda: _host_pid(argv), timeout=30, what=f"{argv} running")


def _terminated(core: Any, name: str) -> Any:
    return wait_for(
        lambda: (cs := status_of(core, "sig", name, "c")) is not None and cs.state.terminated,
        timeout=60,
        what=f"{name}'s end",
    )


def test_a_sigkill_from_outside_records_137(sandbox_core: Any, request: pytest.FixtureRequest) -> None:
    token = str(86400 + uuid.uuid4().int % 10000)
    name = _start(sandbox_core, f"exec sleep {token}")
    pid = _running(sandbox_core, name, ["sleep", token])
    if request.node.callspec.params["sandbox_core"] != "none":  # "none": no pid namespace of its own
        os.kill(pid, signal.SIGTERM)  # pid 1 with no handler: dropped, as the kernel drops it for an init
    os.kill(pid, signal.SIGKILL)
    end = _terminated(sandbox_core, name)
    assert (end.exit_code, end.reason) == (137, "Error")


def test_a_sigterm_with_a_handler_ends_pid_1_with_the_handlers_code(sandbox_core: Any) -> None:
    token = str(96400 + uuid.uuid4().int % 10000)
    script = f"trap 'exit 143' TERM; sleep {token} & wait"
    name = _start(sandbox_core, script)
    sleeper = _running(sandbox_core, name, ["sleep", token])  # started after the trap was set
    shell = int(Path(f"/proc/{sleeper}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(shell, signal.SIGTERM)
    end = _terminated(sandbox_core, name)
    assert (end.exit_code, end.reason) == (143, "Error")


def test_a_fault_records_128_plus_its_signal(sandbox_core: Any) -> None:
    name = _start(sandbox_core, "exec python3 -c 'import ctypes; ctypes.string_at(0)'", "python:3.11-slim")
    end = _terminated(sandbox_core, name)
    assert (end.exit_code, end.reason) == (139, "Error")
