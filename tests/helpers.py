"""Small helpers for tests that drive the local cluster through the real client."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    fn: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll `fn` until it returns something truthy; fail the test with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")


def start_airflow(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start `python -m airflow ARGS...` (a component: api-server, scheduler, ...) with `env`, its output into
    `log`, in its own process group (`stop_airflow` ends it with the processes it started)."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_airflow(procs: Iterable[subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    """SIGTERM each component's process group, SIGKILL the groups still there after `grace` seconds (in all:
    a test's stack need not shut down cleanly, its folders are thrown away)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def container(name: str, script: str, image: str = "busybox:1.36", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["/bin/sh", "-c", script], **extra}


def pod_body(name: str, *containers: dict[str, Any], restart: str = "Always", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": list(containers),
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 2,
            **spec,
        },
    }


def status_of(core: Any, ns: str, name: str, cname: str) -> Any:
    pod = core.read_namespaced_pod(name, ns)
    for cs in pod.status.container_statuses or []:
        if cs.name == cname:
            return cs
    return None


def running(core: Any, ns: str, name: str, cname: str) -> Any:
    cs = status_of(core, ns, name, cname)
    return cs if cs is not None and cs.state.running is not None else None


def log_of(core: Any, ns: str, name: str, cname: str) -> str:
    """The container's current log, or "" while it cannot be read yet (400: not started)."""
    from kubernetes.client import ApiException

    try:
        return read_log(core, ns, name, cname)
    except ApiException as e:
        if e.status == 400:
            return ""
        raise


def read_log(core: Any, ns: str, name: str, cname: str, **kw: Any) -> str:
    """pods/log as text (the client's own str conversion of text/plain bodies yields "b'...'")."""
    return core.read_namespaced_pod_log(name, ns, container=cname, _preload_content=False, **kw).data.decode()


def is_static_elf(path: str) -> bool:
    """Whether `path` is an ELF executable with no program interpreter (statically linked), as `file` says."""
    import struct

    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return False
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide:
            phoff, phentsize, phnum = (
                struct.unpack_from(order + "Q", head, 32)[0],
                *struct.unpack_from(order + "HH", head, 54),
            )
        else:
            phoff, phentsize, phnum = (
                struct.unpack_from(order + "I", head, 28)[0],
                *struct.unpack_from(order + "HH", head, 42),
            )
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            if struct.unpack(order + "I", f.read(4))[0] == 3:  # PT_INTERP: a dynamic executable
                return False
    return True
