"""The runner's init container probes the seal where the pod runs (`runnerinstall.INSTALL_COMMAND`): a script
whose `#!` line names the installed execute-only busybox, started as the slots start the runner, must not be
readable by its own user. Run here in bubblewrap as the pod's containers run: with the chain's capability
drops it passes and installs the runner; with `DAC_OVERRIDE` kept (the runner would count as readable, so it
stays dumpable: what a node without the seal does) it fails with `UNSEALED_EXIT`, which the setup names."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from kruise_local.capabilities import DEFAULT_CAPABILITIES

from airflow_kruise_chain.core.manifest import UNREADABLE_RUNNER_CAPABILITIES
from airflow_kruise_chain.core.runnerinstall import UNSEALED_EXIT, install_failure, runner_script
from tests.unit.test_core_runner_nonroot import init_container

BUSYBOX, BWRAP = shutil.which("busybox"), shutil.which("bwrap")
pytestmark = pytest.mark.skipif(
    BUSYBOX is None or BWRAP is None or os.geteuid() != 0, reason="needs a static busybox and bwrap, as root"
)


def install(volume: Path, capabilities: set[str]) -> subprocess.CompletedProcess[str]:
    """The init container's command as a runtime runs it (`init_container`), as root with `capabilities`."""
    return subprocess.run(
        init_container(volume, runner_script(), capabilities), capture_output=True, text=True, timeout=60
    )


def test_the_probe_passes_with_the_chains_drops_and_fails_where_the_runner_stays_readable(tmp_path) -> None:
    sealed, unsealed = tmp_path / "sealed", tmp_path / "unsealed"
    sealed.mkdir()
    unsealed.mkdir()
    drops = {f"CAP_{c}" for c in UNREADABLE_RUNNER_CAPABILITIES}
    done = install(sealed, set(DEFAULT_CAPABILITIES) - drops)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (sealed / "bin").iterdir()) == ["busybox", "runner"]
    assert not (sealed / "p").exists()  # the probe's script is removed
    done = install(unsealed, set(DEFAULT_CAPABILITIES))  # DAC_OVERRIDE kept
    assert done.returncode == UNSEALED_EXIT, done.stderr
    pod = {
        "metadata": {"namespace": "chains"},
        "spec": {"runtimeClassName": "gvisor", "initContainers": [{"name": "i", "image": "busybox"}]},
        "status": {
            "initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": UNSEALED_EXIT}}}]
        },
    }
    said = install_failure(pod, "i")
    assert (
        said is not None and "runtime class 'gvisor'" in said and "leaves the stage runner readable" in said
    )
