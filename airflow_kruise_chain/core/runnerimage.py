"""The runner image: what the chain pod's init container installs, and how a stale one is told apart.

The provider ships the image's files next to each other in this folder: the runner script (`runner.sh`),
its installer (`runner-install.sh`) and `runner.Dockerfile`, which builds
`ghcr.io/airflow-kruise-chain/runner:<provider version>` (`DEFAULT_RUNNER_IMAGE`) from busybox's static
musl image: ``/bin/busybox``, ``/kruise-chain-runner/runner`` and ``/kruise-chain-runner/install``, both
`#!` scripts of mode 0555. The init container's command is the installer's path (`INIT_COMMAND`; no script
travels in the pod spec), with the sha256 of this provider's two files in env ``KC_RUNNER_SHA256``: files
that differ (an older or newer provider's image) fail it with `STALE_EXIT_CODE` and a termination message;
an image without the installer (a plain busybox) cannot even start it (the runtime's StartError, exit code
128: runc's "no such file or directory"). The setup reports either, naming the image and the fix
(`install_failure`). Otherwise it copies the runner (0555) and the busybox, execute-only, into the runner's
emptyDir (see `manifest.UNREADABLE_RUNNER_CAPABILITIES`), where the slots run ``/kruise-chain/bin/runner``.

On the local cluster (kruise-local) the image exists through `kruise_local_images`, declared under the entry
point group ``kruise_local.images`` in this package's metadata: it serves the installed package's own files,
with the Dockerfile's modes, so the image is never stale there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from .wire import DEFAULT_RUNNER_IMAGE

IMAGE_DIR = "/kruise-chain-runner"
"""Where the runner image holds the runner script and its installer (its busybox is /bin/busybox)."""
IMAGE_BUSYBOX = "/bin/busybox"
DOCKERFILE = "runner.Dockerfile"
STALE_EXIT_CODE = 65
"""The init container's exit code when the image's runner script is not this provider's."""
SHA_ENV = "KC_RUNNER_SHA256"

IMAGE_RUNNER = f"{IMAGE_DIR}/runner"
"""The runner script in the image (`runner.sh`)."""
INSTALLER = f"{IMAGE_DIR}/install"
"""The installer in the image (`runner-install.sh`)."""
IMAGE_FILE_MODE = 0o555
"""Both scripts' mode in the image (the Dockerfile's `COPY --chmod`): read by their shell, exec'd by path."""

INIT_COMMAND: tuple[str, ...] = (INSTALLER,)
"""The init container's command: the image's installer, run by the kernel through its `#!/bin/busybox sh`."""
_START_ERRORS = frozenset({"RunContainerError", "CreateContainerError", "StartError"})


def runner_path() -> Path:
    """The runner script shipped with the package."""
    return Path(str(importlib_resources.files(__package__).joinpath("runner.sh")))


def runner_script() -> str:
    """The stage runner (POSIX sh) shipped with the package."""
    return runner_path().read_text(encoding="utf-8")


def installer_path() -> Path:
    """The runner image's installer shipped with the package (``/kruise-chain-runner/install`` in the
    image)."""
    return runner_path().with_name("runner-install.sh")


def runner_sha256() -> str:
    """The sha256 of this provider's runner script followed by its installer: the runner image must carry
    exactly these two files."""
    return hashlib.sha256(runner_path().read_bytes() + installer_path().read_bytes()).hexdigest()


def install_failure(pod: Mapping[str, Any], container: str) -> str | None:
    """Why the runner's init container `container` of `pod` (API JSON) cannot install the runner, or None
    while it may still: its image cannot be pulled or run, or it is not this provider's runner image."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    status = next((s for s in statuses if s.get("name") == container), None)
    if status is None:
        return None
    image = status.get("image") or ""
    for spec in (pod.get("spec") or {}).get("initContainers") or []:
        if spec.get("name") == container:
            image = spec.get("image") or image
    fix = (
        f"use the runner image of this provider's version ({DEFAULT_RUNNER_IMAGE}, the default of "
        "[kruise_chain] runner_image and of a chain's runner_image), or a copy of it, or build one from "
        f"airflow_kruise_chain/core/{DOCKERFILE}"
    )
    state, last = status.get("state") or {}, status.get("lastState") or {}
    waiting = state.get("waiting") or {}
    for ended in (state.get("terminated") or {}, last.get("terminated") or {}):
        if ended.get("exitCode") == STALE_EXIT_CODE:
            said = ended.get("message") or "stale"
            return f"the runner image {image} is not this provider's ({said}); {fix}"
        if ended.get("reason") == "StartError":
            return _cannot_start(image, ended.get("message") or ended.get("reason") or "", fix)
        if ended.get("exitCode"):
            said = ended.get("message") or ended.get("reason") or "no message"
            return (
                f"the runner image {image} failed to install the runner (exit code {ended['exitCode']}: "
                f"{said}); an image that is not this provider's runner image does; {fix}"
            )
    if waiting.get("reason") in {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}:
        return (
            f"the runner image {image} cannot be pulled ({waiting['reason']}: {waiting.get('message', '')}); "
            f"{fix}, pullable by the node (mirror it and set [kruise_chain] runner_image)"
        )
    if waiting.get("reason") in _START_ERRORS:
        return _cannot_start(image, waiting.get("message") or waiting["reason"], fix)
    return None


def _cannot_start(image: str, said: str, fix: str) -> str:
    """The runtime could not start the init container's command (containerd's StartError, exit code 128, or
    the kubelet's RunContainerError / CreateContainerError with the runtime's message): an image without
    the installer (runc: `exec: "/kruise-chain-runner/install": stat ...: no such file or directory`, a plain
    busybox image), or one whose installer is not executable."""
    return (
        f"the runner image {image} is not this provider's runner image: it has no {INSTALLER} it can run "
        f"({said}); {fix}"
    )


def kruise_local_images() -> list[dict[str, Any]]:
    """The runner image as a kruise-local catalogue entry (entry point group ``kruise_local.images``):
    busybox's static musl image (the host's static /bin/busybox, Debian package busybox-static) with this
    installed package's runner script and installer in /kruise-chain-runner, with the Dockerfile's mode
    (kruise-local's `files`: the image's own modes, whatever mode the package's files were installed with)."""
    applets = ("sh", "true", "cat", "cp", "mv", "chmod", "mkdir", "sha256sum", "ls", "echo", "sleep")
    mode = f"{IMAGE_FILE_MODE:04o}"
    return [
        {
            "ref": DEFAULT_RUNNER_IMAGE,
            "size": "1500Ki",
            "digest": f"sha256:{runner_sha256()}",  # new files are a new image
            "base": "scratch",
            "provides": [IMAGE_BUSYBOX],
            "files": {
                IMAGE_RUNNER: {"from": str(runner_path().resolve()), "mode": mode},
                INSTALLER: {"from": str(installer_path().resolve()), "mode": mode},
            },
            "links": {f"/bin/{a}": "busybox" for a in applets},
            "cmd": ["sh"],
        }
    ]
