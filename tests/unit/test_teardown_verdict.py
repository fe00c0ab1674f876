"""The teardown's verdict says what became of the chain pod: kept, deleted, or not there to delete (a setup
that failed before creating it). Before, a run whose setup created no pod was told the pod "was deleted"."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.operators.pod import ChainTeardownOperator
from tests.unit.podfactory import chain_pod


class Hook:
    """The teardown's calls on a pod that `exists` (deleted at once) or never did."""

    def __init__(self, exists: bool) -> None:
        self.exists = exists
        self.deleted: list[str] = []

    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        return chain_pod(name=name, namespace=namespace) if self.exists else None

    def delete_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> bool:
        found, self.exists = self.exists, False
        self.deleted += [name] if found else []
        return found

    def watch_pod(
        self, name: str, namespace: str, seconds: int, resource_version: str | None = None
    ) -> Iterator:
        yield None  # deleted


@pytest.mark.parametrize(
    ("exists", "keep_pod", "said"),
    [
        (False, False, "The chain pod was not there to delete (never created, or already gone)"),
        (True, False, "The chain pod was deleted"),
        (True, "on_failure", "The chain pod was kept"),
    ],
)
def test_the_verdict_says_what_became_of_the_pod(exists: bool, keep_pod: bool | str, said: str) -> None:
    teardown = ChainTeardownOperator(
        task_id="c.teardown", chain_name="c", namespace="data", keep_pod=keep_pod
    )
    hook = Hook(exists)
    teardown.__dict__["hook"] = hook  # the cached hook
    teardown.failed_upstream = lambda context: {"c.setup": "failed"}  # type: ignore[method-assign]
    with pytest.raises(
        AirflowFailException, match=r"did not succeed in this DAG run: c\.setup \(failed\)"
    ) as err:
        teardown.execute({"dag": SimpleNamespace(dag_id="d"), "run_id": "r"})  # type: ignore[arg-type]
    assert said in str(err.value)
    assert bool(hook.deleted) == (exists and keep_pod is False)
