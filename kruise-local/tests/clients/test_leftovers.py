"""Containers left running (`leftovers.py`): found by the folder they mount; a pytest session that leaves one
fails (the plugin's check) and it is killed; a cluster started on the root a killed run left ends that run's
containers first. The leak made here is the one found in the suite: a non-root pid 1 under bwrap, whose
parent-death signal the user switch cleared, outlives bwrap (`tests/unit/test_core_runner_nonroot.py`
before its fix)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import leftover_containers

pytest_plugins = ["pytester"]
BWRAP, SETPRIV = shutil.which("bwrap"), shutil.which("setpriv")
pytestmark = pytest.mark.skipif(
    BWRAP is None or SETPRIV is None or os.geteuid() != 0, reason="needs bwrap and setpriv, as root"
)


def leaking_container(folder: Path) -> subprocess.Popen[bytes]:
    """bwrap running `sleep` as uid 65532, pid 1 of its namespace, with `folder` mounted."""
    cmd = [BWRAP, "--ro-bind", "/", "/", "--bind", str(folder), "/mnt", "--proc", "/proc", "--dev", "/dev"]
    cmd += ["--unshare-pid", "--as-pid-1", "--die-with-parent", "--", SETPRIV, "--reuid", "65532"]
    return subprocess.Popen([*cmd, "--regid", "65532", "--clear-groups", "--", "sleep", "600"])


def _wait(folder: Path) -> dict[int, str]:
    """The container of `leaking_container` once it is the leak: `sleep` runs, so setpriv has switched the
    user, which cleared the parent-death signal. Found earlier (bwrap's child still root, or setpriv), a kill
    of bwrap still ends it: under load the check then saw no leak (a CI run's flake)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = leftover_containers(folder)
        if any(cmd.startswith("b'sleep") for cmd in found.values()):  # the repr of its command line's head
            return found
        time.sleep(0.05)
    return {}


def test_a_container_left_running_is_found_by_its_folder(tmp_path: Path) -> None:
    (tmp_path / "vol").mkdir()
    proc = leaking_container(tmp_path / "vol")
    found = _wait(tmp_path / "vol")
    proc.kill()  # bwrap goes; its non-root pid 1 stays
    proc.wait(timeout=10)
    time.sleep(0.5)
    assert list(leftover_containers(tmp_path / "vol")) == list(found) and len(found) == 1
    for pid in found:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while leftover_containers(tmp_path / "vol") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_containers(tmp_path / "vol") == {}


def test_a_session_that_leaves_a_container_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_leftovers import _wait, leaking_container

        def test_leaks(tmp_path):
            proc = leaking_container(tmp_path)
            assert _wait(tmp_path)
            proc.kill()
            proc.wait()
        """
    )
    result = pytester.runpytest_subprocess("-p", "kruise_local.pytest_plugin", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*containers left running by the session (killed now): {*sleep*}*"])
    result.assert_outcomes(passed=1)


def test_a_cluster_ends_the_containers_a_killed_run_of_its_root_left(tmp_path: Path) -> None:
    volume = tmp_path / "root" / "pods" / "u" / "volumes" / "v"
    volume.mkdir(parents=True)
    proc = leaking_container(volume)
    assert _wait(tmp_path / "root")
    proc.kill()  # the run that started it is gone
    proc.wait(timeout=10)
    time.sleep(0.5)
    assert leftover_containers(tmp_path / "root")
    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "root"))):
        deadline = time.monotonic() + 10
        while leftover_containers(tmp_path / "root") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftover_containers(tmp_path / "root") == {}
