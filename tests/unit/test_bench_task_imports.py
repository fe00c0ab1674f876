"""bench/task_imports.py: a stage task's client imports against the clients whole, per executor."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from bench import REPO


@pytest.mark.parametrize("executor", ["local", "celery"])
def test_it_times_both_ways_and_counts_the_client_modules(executor: str) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "task_imports.py"), "--rounds", "1", "--executor", executor],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    found = dict(re.findall(rf"^{executor} (chain|whole): .* (\d+) client modules$", out, re.M))
    assert set(found) == {"chain", "whole"}
    assert int(found["chain"]) < int(found["whole"])  # the stand-ins load what the task uses
