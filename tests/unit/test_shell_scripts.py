"""Every shell script of the repository (the stage runner and its installer, dev.sh, .ci/run) is shellcheck
clean, each deliberate exception annotated where it stands with its reason. shellcheck is Debian's package,
which `./dev.sh test` installs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHEBANG = re.compile(rb"^#!\S*[/ ](?:ba|da|a)?sh\s")
DIRECTIVE = re.compile(r"#\s*shellcheck\s+(disable|source|shell)=(\S+)(.*)$")


def shell_scripts() -> list[Path]:
    """The files git tracks whose `#!` line runs a shell, and every `*.sh`."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    found = []
    for name in tracked.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and (name.endswith(".sh") or SHEBANG.match(path.read_bytes()[:128])):
            found.append(path)
    return found


def test_the_shell_scripts_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in shell_scripts()}
    assert {
        "airflow_kruise_chain/core/runner.sh",
        "dev.sh",
        ".ci/run",
    } <= names


def test_shellcheck_finds_nothing() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck is not installed (./dev.sh test installs Debian's package)"
    done = subprocess.run(
        [shellcheck, "--format=gcc", *map(str, shell_scripts())], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_shellcheck_exception_says_why() -> None:
    """A `# shellcheck disable=...` (or `source=`, `shell=`) directive ends with `# the reason`."""
    unexplained = []
    for path in shell_scripts():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (directive := DIRECTIVE.search(line)) and not re.match(r"\s+#\s*\S", directive.group(3)):
                unexplained.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert unexplained == []


def test_the_runner_init_containers_line_passes_shellcheck() -> None:
    """The chain pod's init container runs one line of sh (`core/runnerinstall.py`): no file to find."""
    from airflow_kruise_chain.core.runnerinstall import INSTALL_COMMAND

    shellcheck = shutil.which("shellcheck")
    assert shellcheck is not None, "shellcheck is not installed (./dev.sh test installs Debian's package)"
    assert INSTALL_COMMAND[:2] == ("/bin/sh", "-c")
    done = subprocess.run(
        [shellcheck, "--format=gcc", "--shell=sh", "-"],
        input=INSTALL_COMMAND[2],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
