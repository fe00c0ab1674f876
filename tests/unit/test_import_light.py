"""Importing a DAG file that uses the chain API loads no Kubernetes client: every Airflow task process parses
its DAG file, so whatever the DAG-facing modules import at module level is paid once per stage task.

Each check runs in a fresh interpreter (this test session has long loaded the clients) and reads its
`sys.modules` after importing the DAG file. bench/parse_time.py measures the time this saves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "kubernetes",
    "kubernetes_asyncio",
    "airflow.providers.cncf.kubernetes.hooks",
    "airflow.providers.cncf.kubernetes.kube_client",
    "aiohttp",
)
"""(Airflow itself loads `airflow.providers.cncf.kubernetes.get_provider_info` for providers' settings)"""
PROVIDER_EXECUTION_ONLY = (
    "airflow_kruise_chain.hooks.kruise",
    "airflow_kruise_chain.core.driver",
    "airflow_kruise_chain.core.swap",
    "airflow_kruise_chain.core.chainstate",
)

LOADED = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert module.dag.task_dict, "the DAG file built no tasks"
print(json.dumps(sorted(sys.modules)))
"""


def modules_after_import(path: Path, tmp_path: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", LOADED, str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], prefix: str) -> list[str]:
    return sorted(m for m in modules if m == prefix or m.startswith(prefix + "."))


@pytest.mark.parametrize(
    "dag_file",
    [ROOT / "example_dags" / "example_kruise_chain.py", ROOT / "tests" / "unit" / "sensor_dag.py"],
    ids=["example_dag", "sensor_dag"],
)
def test_parsing_a_chain_dag_loads_no_kubernetes_client(dag_file: Path, tmp_path: Path) -> None:
    modules = modules_after_import(dag_file, tmp_path)
    assert "airflow_kruise_chain.chain" in modules  # the check looks at the right process
    for prefix in (*HEAVY, *PROVIDER_EXECUTION_ONLY):
        assert loaded(modules, prefix) == [], f"parsing {dag_file.name} imported {prefix}"


def test_the_execution_modules_load_when_a_task_needs_them(tmp_path: Path) -> None:
    """Counter-check: the same probe sees the clients once the hook is used (so the test above can fail)."""
    probe = tmp_path / "probe_dag.py"
    probe.write_text(
        (ROOT / "example_dags" / "example_kruise_chain.py").read_text()
        + "\nchain.setup_task.hook  # what a task does when it runs\n"
    )
    modules = modules_after_import(probe, tmp_path)
    assert loaded(modules, "kubernetes") and loaded(modules, "airflow_kruise_chain.hooks.kruise")
