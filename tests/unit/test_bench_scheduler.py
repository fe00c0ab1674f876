"""bench/scheduler.py's `--preimport`: the airflow_local_settings.py it writes imports the chain's Kubernetes
clients in the scheduler (whose LocalExecutor workers fork the task processes) and in no other component."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.scheduler import PREIMPORT

CHECK = "import sys; sys.argv = {argv!r}; exec({code!r}); print(sorted({{{modules}}} & set(sys.modules)))"
CLIENTS = "'airflow_kruise_chain.hooks.kruise', 'kubernetes', 'kubernetes_asyncio'"


@pytest.mark.parametrize(
    ("argv", "imported"),
    [
        (["airflow", "scheduler"], True),
        (["airflow", "api-server"], False),
        (["airflow", "dag-processor"], False),
        (["airflow", "triggerer"], False),
    ],
)
def test_the_preimport_settings_import_the_clients_in_the_scheduler_only(
    argv: list[str], imported: bool
) -> None:
    code = CHECK.format(argv=argv, code=PREIMPORT, modules=CLIENTS)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    expected = ["airflow_kruise_chain.hooks.kruise", "kubernetes", "kubernetes_asyncio"] if imported else []
    assert out.stdout.strip() == str(expected)
