"""The two distributions' wheels hold what they should and nothing of each other: the provider's wheel holds
no `kruise_local` file (issue 21) and its package data (the stage runner, the UI page); kruise-local's holds
its image catalogue and the OpenKruise CRDs.

Each wheel is built from a copy of its sources in a temporary directory (no `build/` or `*.egg-info` in the
checkout), without its dependencies. Without build isolation when the environment's setuptools can build
these projects (>= 77, SPDX license strings), else pip builds them isolated (slower, fetches setuptools).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _setuptools_builds_these() -> bool:
    try:
        return int(version("setuptools").split(".")[0]) >= 77
    except Exception:  # not installed, or a version string we do not read
        return False


def _wheel(tmp_path: Path, project: Path, package: str) -> set[str]:
    """The names in the wheel of `project` (its pyproject.toml, README.md and package `package`)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(project / name, source / name)
    shutil.copytree(project / package, source / package, ignore=IGNORE)
    isolation = ["--no-build-isolation"] if _setuptools_builds_these() else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(tmp_path), source],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def test_the_providers_wheel_holds_no_local_cluster_and_its_package_data(tmp_path: Path) -> None:
    names = _wheel(tmp_path, ROOT, "airflow_kruise_chain")
    assert [n for n in names if "kruise_local" in n or n.startswith("kruise-local")] == []
    assert {"airflow_kruise_chain/core/runner.sh", "airflow_kruise_chain/plugins/page.html"} <= names
    assert "airflow_kruise_chain/core/driver.py" in names
    # nothing of a runner image (the runner travels in a ConfigMap the setup makes), no entry point for
    # kruise-local (the local cluster knows no image of this project)
    assert not [n for n in names if n.endswith((".Dockerfile", "runner-install.sh"))]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (points,) = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = archive.read(points).decode()
    assert "kruise_local" not in text


def test_kruise_locals_wheel_holds_its_catalogue_and_crds(tmp_path: Path) -> None:
    names = _wheel(tmp_path, ROOT / "kruise-local", "kruise_local")
    assert "kruise_local/images.yaml" in names
    crds = {n for n in names if n.startswith("kruise_local/crds/") and n.endswith(".yaml")}
    assert {
        "kruise_local/crds/apps.kruise.io_containerrecreaterequests.yaml",
        "kruise_local/crds/apps.kruise.io_imagepulljobs.yaml",
        "kruise_local/crds/apps.kruise.io_nodeimages.yaml",
    } <= crds
    assert [n for n in names if n.startswith("airflow_kruise_chain")] == []
