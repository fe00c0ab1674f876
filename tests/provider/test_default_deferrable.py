"""`deferrable` defaults to Airflow's ``[operators] default_deferrable``, as KubernetesPodOperator's does.

The default is read when the provider's modules are imported (as cncf.kubernetes does), so each case runs in
a fresh interpreter with its own environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json
import pendulum
from airflow.sdk import DAG
from airflow_kruise_chain.chain import KruiseChain
from airflow_kruise_chain.operators.chain import KruiseChainOperator
from airflow_kruise_chain.sensors.hotswap import HotSwapSensor

STAGE = {"image": "busybox:1.36", "cmds": ["true"]}
with DAG("d", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    with KruiseChain("etl", namespace="data") as chain:
        chain.stage("default", **STAGE)
        chain.stage("explicit", deferrable=False, **STAGE)
    KruiseChainOperator(task_id="direct", chain_name="etl", namespace="data", stage_name="direct", **STAGE)
    HotSwapSensor(task_id="sensor", chain_name="etl", namespace="data", stage="default")
print(json.dumps({t.task_id: t.deferrable for t in dag.tasks if hasattr(t, "deferrable")}))
"""


def deferrable_flags(tmp_path: Path, setting: str | None) -> dict[str, bool]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=str(ROOT))
    if setting is not None:
        env["AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE"] = setting
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("setting", "default"), [(None, False), ("True", True), ("False", False)])
def test_deferrable_follows_airflows_default_deferrable(tmp_path: Path, setting: str | None, default: bool):
    assert deferrable_flags(tmp_path, setting) == {
        "etl.default": default,
        "etl.explicit": False,  # an explicit argument wins
        "direct": default,
        "sensor": default,
    }
