"""Helpers for tests that drive a local cluster through the official `kubernetes` client: pod bodies,
container states, logs, and polling. Shipped with the distribution so that projects testing against
`kruise-local` (the provider's own tests among them) need not write them again."""

from __future__ import annotations

import contextlib
import gc
import os
import struct
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .leftovers import containers_using

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


def gone(core: Any, ns: str, name: str) -> bool:
    """Whether the pod no longer exists (its read answers 404)."""
    from kubernetes.client import ApiException

    try:
        core.read_namespaced_pod(name, ns)
    except ApiException as e:
        return e.status == 404
    return False


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


def exec_output(core: Any, ns: str, name: str, cname: str, argv: list[str]) -> str:
    """Run `argv` in container `cname` of pod `name` through pods/exec; its output (stdout and stderr)."""
    from kubernetes.stream import stream

    return stream(
        core.connect_get_namespaced_pod_exec,
        name,
        ns,
        container=cname,
        command=argv,
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )


def service_account_token(
    api: Any,
    namespace: str,
    name: str,
    rules: list[dict[str, Any]] | None = None,
    *,
    role_namespace: str | None = None,
) -> str:
    """What an admin does with kubectl for an identity: the ServiceAccount `namespace/name` created (its
    namespace too) when missing; with `rules`, a Role `name` of them in `role_namespace` (default the
    account's) bound to the account by a RoleBinding `name`; then a token of the account (`kubectl create
    token`). `api` is an admin's `kubernetes.client.ApiClient`."""
    from kubernetes import client
    from kubernetes.client import ApiException

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    for create, args in (
        (core.create_namespace, ({"metadata": {"name": namespace}},)),
        (core.create_namespaced_service_account, (namespace, {"metadata": {"name": name}})),
    ):
        try:
            create(*args)
        except ApiException as e:
            if e.status != 409:
                raise
    if rules is not None:
        where = role_namespace or namespace
        try:
            core.create_namespace({"metadata": {"name": where}})
        except ApiException as e:
            if e.status != 409:
                raise
        rbac.create_namespaced_role(where, {"metadata": {"name": name}, "rules": rules})
        subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        rbac.create_namespaced_role_binding(
            where,
            {
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [subject],
            },
        )
    request = core.create_namespaced_service_account_token(name, namespace, {"spec": {}})
    return str(request.status.token)


def is_static_elf(path: str) -> bool:
    """Whether `path` is an ELF executable with no program interpreter (statically linked), as `file` says."""
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


def child_processes() -> dict[int, str]:
    """This process's child processes, a zombie not yet reaped among them: pid -> the head of its command line
    (to say what a leftover is)."""
    me = str(os.getpid())
    found: dict[int, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1] == me:
                found[int(pid)] = repr(Path(f"/proc/{pid}/cmdline").read_bytes()[:60])
    return found


def new_child_processes(before: dict[int, str]) -> dict[int, str]:
    """The child processes (`child_processes`) that were not there `before`."""
    return {pid: cmd for pid, cmd in child_processes().items() if pid not in before}


def leftover_containers(folder: str | Path) -> dict[int, str]:
    """Containers still running that mount from `folder` (a cluster's root, a test's temporary folder), pid ->
    the head of its command line (`leftovers.containers_using`): once whatever started them has ended, they
    are leaks."""
    return {pid: cmd for pid, (_, cmd) in containers_using(folder).items()}


@contextlib.contextmanager
def no_process_leaks() -> Iterator[None]:
    """Fail if the block leaves a child process to the garbage collector: an unraisable exception (such as
    'Event loop is closed', a transport closed after its loop had gone) or a ResourceWarning about a child
    process (a subprocess transport left open, a subprocess object dropped while its process ran). Earlier
    garbage is collected first, and other garbage (such as a client's unclosed socket) is not counted."""
    gc.collect()  # earlier tests' garbage is theirs
    unraisable: list[str] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(f"{u.exc_value!r} {u.object!r}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            yield
            gc.collect()
    finally:
        sys.unraisablehook = hook
    leaks = [
        str(w.message)
        for w in caught
        if w.category is ResourceWarning
        and ("SubprocessTransport" in str(w.message) or "is still running" in str(w.message))
    ]
    if unraisable or leaks:
        raise AssertionError(f"left to the garbage collector: {unraisable + leaks}")
