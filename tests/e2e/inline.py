"""Running a DAG built inside a test with `dag.test()`.

`dag.test()` only runs DAGs that the metadata database knows (serialized, with a version); a DAG built in a
test function is in no bundle, so `run_inline` writes it to the database first, under the `dags-folder`
bundle. Import Airflow only inside tests: the `airflow_home` fixture must set AIRFLOW_HOME first.
"""

from __future__ import annotations

from typing import Any


def serialize_to_db(dag: Any) -> None:
    """Write `dag` to the metadata database as the DAG processor would (DagModel, serialized DAG, version)."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.serialization.serialized_objects import LazyDeserializedDAG
    from airflow.utils.session import create_session

    DagBundlesManager().sync_bundles_to_db()
    with create_session() as session:
        update_dag_parsing_results_in_db("dags-folder", None, [LazyDeserializedDAG.from_dag(dag)], {}, None,
                                         set(), session)


def run_inline(dag: Any) -> Any:
    """`dag.test()` for a DAG built in the test; returns the finished DagRun."""
    serialize_to_db(dag)
    return dag.test()


def task_states(run: Any) -> dict[str, tuple[str, int]]:
    """task_id -> (state, try_number) of a finished run."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == run.dag_id,
                                                         TaskInstance.run_id == run.run_id)).all()
        return {ti.task_id: (str(ti.state), ti.try_number) for ti in tis}
