"""$AIRFLOW_HOME/config/airflow_local_settings.py: import the Kubernetes clients once, in the process that
task processes are forked from, so that no stage task pays their import (about 0.5-1.7 s and 79 MiB each).

- LocalExecutor: task processes are forked from the scheduler's workers: the scheduler imports them.
- CeleryExecutor: task processes are forked from the Celery worker's pool processes, which are forked from the
  `airflow celery worker` process: that process imports them, before its pool starts.
- The triggerer (deferrable stages): imported at its start, the async client included, not by the first
  trigger (which then waits for them: about 4 s on a loaded machine). Elsewhere the provider's hooks load the
  async client only when a trigger uses it (`airflow_kruise_chain/hooks/lazyasync.py`).
"""

import sys

if sys.argv[1:2] in (["scheduler"], ["triggerer"]) or sys.argv[1:3] == ["celery", "worker"]:
    import airflow_kruise_chain.hooks.kruise  # noqa: F401  (the Kubernetes clients, imported once)

    if sys.argv[1:2] == ["triggerer"]:
        from airflow_kruise_chain.hooks.lazyasync import load_async_clients

        load_async_clients()
