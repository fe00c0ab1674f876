"""Every Airflow process loads the plugins, each task process too (for their macros); the chain pages' app
imports the API server's own modules (its auth manager and security dependencies, which pull in its
execution API: cadwyn, svcs, aiohttp), 0.2-0.4 s that every task of every DAG paid at its start before the
app was imported only where it is served."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TASK = """
import json, sys
from airflow.sdk.plugins_manager import integrate_macros_plugins

integrate_macros_plugins()  # what a task process does before it renders its templates
loaded = sorted(sys.modules)
from airflow_kruise_chain.plugins import KruiseChainPlugin

apps = KruiseChainPlugin().fastapi_apps  # what the API server reads to mount the pages
print(json.dumps({"loaded": loaded, "apps": [[type(a["app"]).__name__, a["url_prefix"]] for a in apps]}))
"""


def test_a_task_process_loads_the_plugin_without_the_pages_app(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(AIRFLOW_HOME=str(tmp_path), AIRFLOW__CORE__LOAD_EXAMPLES="False", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", TASK], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    loaded = set(seen["loaded"])
    assert "airflow_kruise_chain.plugins" in loaded  # the check looks at the right process
    assert "airflow_kruise_chain.plugins.app" not in loaded
    assert "airflow.api_fastapi.app" not in loaded
    assert seen["apps"] == [["FastAPI", "/kruise-chain"]]
