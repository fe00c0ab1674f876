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
