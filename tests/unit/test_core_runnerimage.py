"""The runner image (`core/runnerimage.py`): what the kruise-local catalogue serves of it (its files with the
modes the Dockerfile gives them) and how the setup tells a stale or foreign runner image apart
(`install_failure`), from the pod's status as the kubelet reports it."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from kruise_local.catalogue import Catalogue

from airflow_kruise_chain.core.runnerimage import (
    DOCKERFILE,
    INIT_COMMAND,
    INSTALLER,
    STALE_EXIT_CODE,
    install_failure,
    installer_path,
    kruise_local_images,
    runner_path,
    runner_sha256,
)
from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE

IMAGE = "registry.example.com/kruise-chain/runner:0.0.9"
# runc's message for a command the image lacks, as containerd reports it (kruise-local's too)
NO_INSTALLER = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    'failed: unable to start container process: exec: "/kruise-chain-runner/install": stat '
    "/kruise-chain-runner/install: no such file or directory: unknown"
)


def pod(status: dict) -> dict:
    return {
        "spec": {"initContainers": [{"name": "kruise-chain-runner", "image": IMAGE}]},
        "status": {"initContainerStatuses": [{"name": "kruise-chain-runner", "image": IMAGE, **status}]},
    }


def test_the_init_container_runs_the_installer_by_its_path() -> None:
    assert INIT_COMMAND == ("/kruise-chain-runner/install",) and INSTALLER == INIT_COMMAND[0]


def test_an_image_without_the_installer_fails_at_exec_and_is_named_with_the_fix() -> None:
    """A plain busybox image (or any image without /kruise-chain-runner/install): the runtime cannot exec the
    command (containerd's StartError, exit 128, runc's message), then the kubelet restarts it with back-off
    (RunContainerError, then CrashLoopBackOff, the StartError as its last state)."""
    start_error = {"exitCode": 128, "reason": "StartError", "message": NO_INSTALLER}
    for status in (
        {"state": {"terminated": start_error}},
        {"state": {"waiting": {"reason": "RunContainerError", "message": NO_INSTALLER}}},
        {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": start_error}},
        {"state": {"waiting": {"reason": "StartError", "message": NO_INSTALLER}}},
    ):
        said = install_failure(pod(status), "kruise-chain-runner")
        assert said is not None, status
        assert said.startswith(f"the runner image {IMAGE} is not this provider's runner image: it has no ")
        assert "/kruise-chain-runner/install" in said and "no such file or directory" in said
        assert DEFAULT_RUNNER_IMAGE in said and DOCKERFILE in said


def test_a_stale_runner_image_is_named_with_its_sha_and_the_fix() -> None:
    said = install_failure(
        pod(
            {
                "state": {
                    "terminated": {"exitCode": STALE_EXIT_CODE, "message": "its runner files have sha256 x"}
                }
            }
        ),
        "kruise-chain-runner",
    )
    assert said is not None and said.startswith(
        f"the runner image {IMAGE} is not this provider's (its runner"
    )
    assert DEFAULT_RUNNER_IMAGE in said and DOCKERFILE in said


def test_an_installer_that_fails_otherwise_is_named_with_its_exit_code() -> None:
    said = install_failure(
        pod({"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}), "kruise-chain-runner"
    )
    assert said is not None and "failed to install the runner (exit code 1: Error)" in said
    assert install_failure(pod({"state": {"running": {}}}), "kruise-chain-runner") is None
    assert (
        install_failure(pod({"state": {"waiting": {"reason": "PodInitializing"}}}), "kruise-chain-runner")
        is None
    )


def test_the_local_runner_image_carries_the_files_with_the_dockerfiles_modes() -> None:
    """kruise-local serves the image's files with the modes the Dockerfile's `COPY --chmod` gives them (not
    the installed package's file modes): both scripts readable and executable, by their image names."""
    (entry,) = kruise_local_images()
    image = Catalogue([entry]).lookup(DEFAULT_RUNNER_IMAGE)
    assert image is not None and not image.host_base
    files = {path: host for host, path in image.unpacked_files()}
    assert set(files) == {"/kruise-chain-runner/runner", "/kruise-chain-runner/install"}
    for path, source in (("/kruise-chain-runner/runner", runner_path()), (INSTALLER, installer_path())):
        assert stat.S_IMODE(os.stat(files[path]).st_mode) == 0o555
        assert Path(files[path]).read_bytes() == source.read_bytes()
    dockerfile = (runner_path().parent / DOCKERFILE).read_text()
    assert "COPY --chmod=0555 runner.sh /kruise-chain-runner/runner\n" in dockerfile
    assert "COPY --chmod=0555 runner-install.sh /kruise-chain-runner/install\n" in dockerfile
    both = runner_path().read_bytes() + installer_path().read_bytes()
    assert runner_sha256() == hashlib.sha256(both).hexdigest()
