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
    [
        ROOT / "example_dags" / "example_kruise_chain.py",
        ROOT / "tests" / "unit" / "sensor_dag.py",
        ROOT / "tests" / "unit" / "authoring_dag.py",
    ],
    ids=["example_dag", "sensor_dag", "authoring_dag"],
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


RESUMED = """
import json, sys
from types import SimpleNamespace
from airflow_kruise_chain.operators.chain import KruiseChainOperator

class TI:
    try_number = 1
    def xcom_push(self, key, value):
        pass

op = KruiseChainOperator(task_id="load", chain_name="c", namespace="default", stage_name="load",
                         image="acme/load:1", cmds=["true"], deferrable=True)
context = {"dag": SimpleNamespace(dag_id="d"), "run_id": "r", "ti": TI()}
try:
    print("result", json.dumps(op.execute_complete(context, json.loads(sys.argv[1]), slot="slot-b",
                                                   generation=3, pod_uid="u")))
except Exception as err:  # the counter-check's task reaches for the cluster: there is none
    print("error", type(err).__name__)
print(json.dumps(sorted(sys.modules)))
"""


def modules_after_resuming(event: dict, tmp_path: Path) -> tuple[str, set[str]]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AIRFLOW__") and k != "AIRFLOW_CONN_KUBERNETES_DEFAULT"
    }
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", RESUMED, json.dumps(event)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    outcome = next(line for line in lines if line.startswith(("result ", "error ")))
    return outcome, set(json.loads(lines[-1]))


def test_a_resumed_deferred_stage_loads_no_kubernetes_client(tmp_path: Path) -> None:
    """The trigger parked the slot and its event holds the result: the resumed task (a second task start,
    in a fresh process) reports it without the Kubernetes clients; an older trigger's event (no `parked`)
    makes it park the slot itself, with them (the counter-check)."""
    from tests.unit.test_trigger_event import event

    outcome, modules = modules_after_resuming(event(), tmp_path)
    assert outcome.startswith("result ") and json.loads(outcome[len("result ") :])["exit_code"] == 0
    assert "airflow_kruise_chain.operators.chain" in modules  # the check looks at the right process
    for prefix in HEAVY:
        assert loaded(modules, prefix) == [], f"resuming imported {prefix}"
    older = event()
    del older["parked"]
    _, modules = modules_after_resuming(older, tmp_path)
    assert loaded(modules, "kubernetes") and loaded(modules, "airflow_kruise_chain.hooks.kruise")
