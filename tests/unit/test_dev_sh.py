"""`./dev.sh example` installs only what the example needs and starts no system service; `./dev.sh test`
installs the rest.

dev.sh runs here with stub `dpkg-query` (nothing installed), `id` (not root), `sudo` (records what it was
asked and runs nothing) and a prepared venv whose `python` records its arguments: what the script would
install and run is read from the stubs' records."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVERS = {"postgresql", "redis-server"}
BROWSER = {"chromium", "chromium-driver"}


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(tmp_path: Path, command: str) -> tuple[list[str], str]:
    bin_dir, venv, log = tmp_path / "bin", tmp_path / "venv", tmp_path / "calls"
    bin_dir.mkdir()
    (venv / "bin").mkdir(parents=True)
    _stub(bin_dir, "dpkg-query", "exit 1")
    _stub(bin_dir, "id", "echo 1000")
    _stub(bin_dir, "sudo", f'echo "sudo $*" >> {log}; cat > /dev/null')
    for tool in ("kubectl", "uv", "ruff", "shellcheck"):
        _stub(venv / "bin", tool, f'echo "{tool} $*" >> {log}')
    _stub(venv / "bin", "python", f'echo "python $*" >> {log}')
    stamp = subprocess.run(
        ["sh", "-c", "cat pyproject.toml kruise-local/pyproject.toml | sha256sum | cut -c1-16"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (venv / f".installed-{command}-{stamp}").touch()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VENV": str(venv)}
    done = subprocess.run(
        [str(ROOT / "dev.sh"), command, "--collect-only"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return calls, done.stderr


def _installed(calls: list[str]) -> set[str]:
    installs = [c for c in calls if c.startswith("sudo env DEBIAN_FRONTEND=noninteractive apt-get install")]
    assert len(installs) == 1, calls
    return {word for word in installs[0].split() if not word.startswith("-")} - {
        "sudo",
        "env",
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "install",
    }


@pytest.mark.skipif(shutil.which("bash") is None, reason="dev.sh is a bash script")
def test_the_example_installs_what_it_needs_and_no_server_or_browser(tmp_path: Path) -> None:
    calls, stderr = _run(tmp_path, "example")
    assert _installed(calls) == {"bubblewrap", "busybox-static"}, stderr
    assert calls[-1] == "python example_dags/run_example.py --collect-only"
    assert not [c for c in calls if c.startswith(("uv ", "kubectl ", "ruff "))], calls  # stamped: no install


@pytest.mark.skipif(shutil.which("bash") is None, reason="dev.sh is a bash script")
def test_the_tests_install_the_rest_with_no_service_started(tmp_path: Path) -> None:
    calls, stderr = _run(tmp_path, "test")
    assert {"bubblewrap", "busybox-static", *SERVERS, *BROWSER} <= _installed(calls), stderr
    install = next(i for i, c in enumerate(calls) if " apt-get install " in c)
    if not Path("/usr/sbin/policy-rc.d").exists():  # a machine's own policy is kept as it is
        # invoke-rc.d asks /usr/sbin/policy-rc.d: exit 101 forbids starting a service during the install
        policy = calls.index("sudo tee /usr/sbin/policy-rc.d")
        removed = calls.index("sudo rm -f /usr/sbin/policy-rc.d")
        assert policy < install < removed
