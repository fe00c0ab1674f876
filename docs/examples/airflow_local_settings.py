"""$AIRFLOW_HOME/config/airflow_local_settings.py: import the Kubernetes clients once, in the process that
task processes are forked from, so that no stage task imports any of their modules (0.1-0.3 s each without
it: the provider's hooks load only the modules a task uses, `airflow_kruise_chain/hooks/lazyclients.py`).

- LocalExecutor: task processes are forked from the scheduler's workers: the scheduler imports them.
- CeleryExecutor: task processes are forked from the Celery worker's pool processes, which are forked from the
  `airflow celery worker` process: that process imports them, before its pool starts.
- The triggerer (deferrable stages): imported at its start, the async clients included, not by the first
  trigger (which then waits for them: about 4 s on a loaded machine).
"""

import sys

if sys.argv[1:2] in (["scheduler"], ["triggerer"]) or sys.argv[1:3] == ["celery", "worker"]:
    import airflow_kruise_chain.hooks.kruise  # noqa: F401  (cncf.kubernetes' hook module, the provider's)
    from airflow_kruise_chain.hooks.lazyclients import load_clients

    if sys.argv[1:2] == ["triggerer"]:
        load_clients()  # the triggers use the async clients
    else:
        load_clients("kubernetes")  # a stage task uses the sync client
