"""What the kubelet hands the container runtime (the CRI's `CreateContainer` request: command, env, mounts,
log path, the pod sandbox to join) and the runtime's errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .users import ProcessUser

if TYPE_CHECKING:
    from .sandbox import PodSandbox


class RuntimeUnavailable(RuntimeError):
    """No usable sandbox method on this machine (the message says how to fix it)."""


class StartError(RuntimeError):
    """The container's process could not be started (the message is the runtime's, as the kubelet shows it
    in `lastState.terminated.message` with reason StartError and exit code 128)."""


@dataclass
class Mount:
    """A host folder (or file) bound into the container."""

    host_path: Path
    container_path: str
    read_only: bool = False


@dataclass
class ContainerLaunch:
    """Everything the runtime needs to start one container."""

    container_id: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    log_path: Path
    termination_message_path: str
    termination_host_path: Path
    working_dir: str | None = None
    host_paths: list[str] = field(default_factory=list)  # bound read-only at the same path
    memory_limit_bytes: int | None = None
    host_base: bool = True  # the root starts from the host's userland; False: empty (scratch)
    links: list[tuple[str, str]] = field(default_factory=list)  # (path, target) symlinks of the image
    files: list[tuple[str, str]] = field(default_factory=list)  # (host, path) image files, bound read-only
    dirs: list[tuple[str, int, int, int]] = field(default_factory=list)  # (path, mode, uid, gid) folders
    read_only_root: bool = False  # `readOnlyRootFilesystem`: the writable layer is mounted read-only
    no_new_privs: bool = False  # `allowPrivilegeEscalation: false`: no_new_privs before the exec
    pod_sandbox: PodSandbox | None = None  # the pod's network namespace to join (None: the runtime's own)
    capabilities: tuple[str, ...] | None = None  # the process's capability sets (None: the runtime's default)
    user: ProcessUser = field(default_factory=ProcessUser)  # the OCI process user (`users.py`)
    stdin: bool = False  # the container's `stdin`: the runtime keeps a pipe to its stdin (else /dev/null)
    stdin_once: bool = False  # `stdinOnce`: the first attach's end of input closes that pipe
    tty: bool = False  # `tty`
