"""Benchmarks (not tests): `python bench/pipelines.py`, `python bench/bench_emulator.py`."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def deployment_environment(env: MutableMapping[str, str]) -> None:
    """The environment of the Airflow or task processes a benchmark starts: the repository on PYTHONPATH (the
    DAGs import `bench`), and bytecode caches as an installed deployment has them (pip compiles them at
    install, Python writes them at a first import): PYTHONDONTWRITEBYTECODE, set on some machines, would have
    every task process compile every module it imports, the Kubernetes clients' 1,800 included (2.7 s instead
    of 0.6 s here), which no deployment pays."""
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
