"""Helpers for calling chain operators, sensors and triggers directly, outside a DAG run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kruise_local import LocalCluster

FAST_POD = {"pod_template": {"spec": {"terminationGracePeriodSeconds": 2}}}
"""A short grace period for test chain pods (see tests/e2e/inline.py: the local cluster sometimes fails to
stop a container with SIGTERM, and then waits out the grace period)."""


class FakeTI:
    """The parts of a task instance the chain operators use: try number and XCom pushes."""

    def __init__(self, try_number: int = 1) -> None:
        self.try_number = try_number
        self.xcom: dict[str, Any] = {}
        self.pushes: list[str] = []
        """the key of each push, in order"""

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value
        self.pushes.append(key)


def make_context(dag_id: str, run_id: str, try_number: int = 1) -> dict[str, Any]:
    """A minimal task context for calling `execute` / `poke` / `execute_complete` directly."""
    return {"dag": SimpleNamespace(dag_id=dag_id), "run_id": run_id, "ti": FakeTI(try_number)}


def writes(cluster: LocalCluster) -> list[tuple[str, str, int]]:
    """The write requests in the cluster's audit log."""
    return [entry for entry in cluster.audit if entry[0] in ("POST", "PUT", "PATCH", "DELETE")]


class ShellChain:
    """A chain pod of busybox stages, each a shell script (`scripts`: stage name -> script), for one (fake)
    DAG run of `dag_id`, in namespace default: `set_up` creates the pod, `stage` makes a stage's task
    (deferrable unless told otherwise), `teardown` the teardown task."""

    def __init__(self, name: str, dag_id: str, scripts: dict[str, str]) -> None:
        import uuid

        self.name = name
        self.dag_id = dag_id
        self.scripts = scripts
        self.run_id = f"manual__{uuid.uuid4().hex[:8]}"

    def context(self, try_number: int = 1) -> dict[str, Any]:
        return make_context(self.dag_id, self.run_id, try_number)

    def set_up(self) -> None:
        from airflow_kruise_chain.operators.chain import ChainSetupOperator

        stages = [
            {"name": n, "image": "busybox:1.36", "cmds": ["/bin/sh", "-c", c]}
            for n, c in self.scripts.items()
        ]
        ChainSetupOperator(
            task_id="setup",
            chain={"name": self.name, "namespace": "default", "stages": stages, **FAST_POD},
            startup_timeout=30,
        ).execute(self.context())

    def stage(self, name: str, **kwargs: Any) -> Any:
        from airflow_kruise_chain.operators.chain import KruiseChainOperator

        return KruiseChainOperator(
            task_id=name,
            chain_name=self.name,
            namespace="default",
            stage_name=name,
            image="busybox:1.36",
            cmds=["/bin/sh", "-c", self.scripts[name]],
            swap_timeout=20,
            **{"deferrable": True, **kwargs},
        )

    def teardown(self) -> Any:
        from airflow_kruise_chain.operators.chain import ChainTeardownOperator

        return ChainTeardownOperator(task_id="teardown", chain_name=self.name, namespace="default")
