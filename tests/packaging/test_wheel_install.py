"""The provider as a user installs it: `python -m build` makes a wheel and an sdist, the wheel installs into a
fresh virtualenv with nothing but its declared dependencies (no kruise-local, no test extras, no checkout on
the path), and Airflow there sees the provider, its `[kruise_chain]` options and the example DAG.

Slow (a fresh venv with Airflow, installed by uv as ./dev.sh installs the project: seconds from its cache,
where pip's resolver and unpacking took about two minutes of CPU); bounded by INSTALL_TIMEOUT.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import airflow_kruise_chain
from airflow_kruise_chain.config import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 900
"""Seconds for the fresh venv's install (a warm cache needs seconds; a cold one downloads Airflow)."""

pytestmark = pytest.mark.slow


def _run(args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel and the sdist, built as a release would build them."""
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)], cwd=out)
    return out


@pytest.fixture(scope="module")
def fresh(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A new venv holding the built wheel and its declared dependencies only; its python and environment
    (a private AIRFLOW_HOME whose dags folder is the example DAGs; the checkout is not on sys.path)."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", str(venv)], cwd=venv)
    (wheel,) = dist.glob("*.whl")
    _run(  # the wheel's metadata resolved as pip would, by the uv that ./dev.sh installs
        [
            sys.executable,
            "-m",
            "uv",
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            str(wheel),
        ],
        cwd=venv,
        timeout=INSTALL_TIMEOUT,
    )
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "example_dags"),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
    )
    return venv, env


def test_the_sdist_holds_what_the_wheel_is_built_from(dist: Path) -> None:
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "airflow_kruise_chain/core/runner.sh",
        "airflow_kruise_chain/plugins/page.html",
    ):
        assert needed in names, f"{needed} missing from {sdist.name}"


def test_the_wheel_carries_its_metadata(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    assert wheel.name.startswith(f"airflow_kruise_chain-{airflow_kruise_chain.__version__}-py3-none-any")
    with zipfile.ZipFile(wheel) as zf:
        meta_name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = zf.read(meta_name).decode()
        names = zf.namelist()
        entry_points = zf.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    assert "Requires-Python: >=3.11" in meta
    assert "License-Expression: Apache-2.0" in meta
    assert "Classifier: Framework :: Apache Airflow :: Provider" in meta
    assert "Project-URL: Changelog," in meta
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert "airflow_kruise_chain/core/runner.sh" in names
    assert "provider_info = airflow_kruise_chain:get_provider_info" in entry_points


def test_airflow_in_a_fresh_venv_sees_the_provider_and_its_options(
    fresh: tuple[Path, dict[str, str]],
) -> None:
    venv, env = fresh
    providers = json.loads(_run(["airflow", "providers", "list", "-o", "json"], cwd=venv, env=env))
    mine = [p for p in providers if p["package_name"] == "airflow-kruise-chain"]
    assert mine and mine[0]["version"] == airflow_kruise_chain.__version__, providers
    options = _run(["airflow", "config", "list", "--section", "kruise_chain"], cwd=venv, env=env)
    for name in OPTIONS:
        assert f"{name} =" in options, f"[kruise_chain] {name} not listed:\n{options}"
    assert "--namespace" in _run(["kruise-chain", "check", "--help"], cwd=venv, env=env)  # the console script
    hooks = _run(["airflow", "providers", "hooks", "-o", "json"], cwd=venv, env=env)
    assert "airflow_kruise_chain.hooks.kruise.KruiseHook" in hooks, "the kruise_chain connection type"
    installed = _run(["python", "-m", "pip", "list", "--format", "json"], cwd=venv, env=env)
    assert "kruise-local" not in {p["name"] for p in json.loads(installed)}, (
        "a declared dependency pulled it in"
    )


def test_the_example_dag_parses_in_the_fresh_venv(fresh: tuple[Path, dict[str, str]]) -> None:
    venv, env = fresh
    script = (
        "import json, sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        "import airflow_kruise_chain\n"
        "assert 'site-packages' in airflow_kruise_chain.__file__, airflow_kruise_chain.__file__\n"
        "bag = DagBag(dag_folder=sys.argv[1])\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},"
        " 'dags': {d: sorted(bag.dags[d].task_ids) for d in bag.dags}}))\n"
    )
    out = _run(
        ["python", "-c", script, str(ROOT / "example_dags" / "example_kruise_chain.py")], cwd=venv, env=env
    )
    parsed = json.loads(out.strip().splitlines()[-1])
    assert parsed["errors"] == {}
    assert "etl.report" in parsed["dags"]["example_kruise_chain"]
