"""bench/scheduler.py's `--preimport`: the airflow_local_settings.py it installs (docs/examples/) imports the
chain's Kubernetes clients in the scheduler (whose LocalExecutor workers fork the task processes), in the
Celery worker (whose pool processes fork them) and in the triggerer (its first trigger would wait for them;
and in no other component."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import REPO, deployment_environment
from bench.scheduler import PREIMPORT

CHECK = "import sys; sys.argv = {argv!r}; exec({code!r}); print(sorted({{{modules}}} & set(sys.modules)))"
CLIENTS = (
    "'airflow_kruise_chain.hooks.kruise', 'kubernetes.client.models.v1_pod', "
    "'kubernetes_asyncio.client.models.v1_pod', "
    "'aiohttp.connector'"
)


@pytest.mark.parametrize(
    ("argv", "imported"),
    [
        (["airflow", "scheduler"], ["airflow_kruise_chain.hooks.kruise", "kubernetes.client.models.v1_pod"]),
        (["airflow", "api-server"], []),
        (["airflow", "dag-processor"], []),
        (
            ["airflow", "triggerer"],
            [
                "aiohttp.connector",
                "airflow_kruise_chain.hooks.kruise",
                "kubernetes.client.models.v1_pod",
                "kubernetes_asyncio.client.models.v1_pod",
            ],
        ),
        (
            ["airflow", "celery", "worker", "--queues", "default"],
            ["airflow_kruise_chain.hooks.kruise", "kubernetes.client.models.v1_pod"],
        ),
        (["airflow", "celery", "flower"], []),
    ],
)
def test_the_preimport_settings_import_the_clients_only_where_chain_tasks_and_triggers_run(
    argv: list[str], imported: list[str]
) -> None:
    """The sync client whole where stage tasks are forked from, the async clients too in the triggerer (its
    triggers use them): the provider's hooks alone would load their modules one by one as they are used."""
    code = CHECK.format(argv=argv, code=PREIMPORT.read_text(), modules=CLIENTS)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == str(imported)


def test_the_triggerer_warm_up_defers_once_to_a_trigger_the_triggerer_can_import() -> None:
    """bench/warmup.py: the triggerer builds its in-process Execution API on a trigger's first request (a
    start-up cost, seconds); bench/scheduler.py's warm-up makes one before the measured runs."""
    from airflow.sdk.exceptions import TaskDeferred

    from bench import warmup

    namespace: dict[str, object] = {}
    exec(compile(warmup.WARMUP_DAG, "sched_warmup_triggerer.py", "exec"), namespace)
    dag = namespace["dag"]
    assert dag.dag_id == warmup.DAG_ID and dag.task_ids == ["defer_once"]
    with pytest.raises(TaskDeferred) as deferred:
        dag.get_task("defer_once").execute({})
    classpath, kwargs = deferred.value.trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    assert getattr(__import__(module, fromlist=[name]), name)(**kwargs).serialize() == (classpath, kwargs)


def test_the_airflow_processes_write_and_read_bytecode_caches_as_a_deployment_does() -> None:
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": "/elsewhere"}
    deployment_environment(env)
    assert env == {"PYTHONPATH": f"{REPO}:/elsewhere"}
