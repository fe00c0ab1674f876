"""A swap that waits for a slot prepared for its stage (`SlotBusyError.preparing`: the kubelet restarts it on
the stage's image) waits on one pod watch until that slot's state or reason changes, and plans from the
version the watch sent, not in half-second rounds of a watch and a read: the restart changes the pod; only a
slot whose end its log alone can tell is looked at again soon."""

from __future__ import annotations

import copy
from collections.abc import Iterator

from airflow_kruise_chain.core.driver import StageDriver, Timeouts
from airflow_kruise_chain.core.podview import ChainPod
from tests.unit.test_core_prepare import Api, prepared_pod
from tests.unit.test_core_swap import LOAD


class _RestartingApi(Api):
    """An `Api` whose kubelet restarts the prepared slot-a (its runner parked, Ready) once a watch has been
    open 3 s: a watch that ends sooner (its timeout) sees nothing."""

    def __init__(self, pod: object) -> None:
        super().__init__(pod)  # type: ignore[arg-type]
        self.windows: list[int] = []

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]:
        self.calls.append("watch")
        self.windows.append(timeout_seconds)
        if timeout_seconds >= 3:
            self.pod.start("slot-a", ready=True)
            yield ChainPod.of(copy.deepcopy(self.pod.pod))


def test_a_swap_waits_for_its_prepared_slot_on_one_watch():
    pod, _ = prepared_pod(made_before=True)  # a pod whose slots know their prepare need not wait
    pod.set_ready("slot-b")  # transform ended; slot-a is being prepared for load
    api = _RestartingApi(pod)
    plan = StageDriver(api, "etl-abc", "data").swap(LOAD, 1, Timeouts(swap=30))
    assert (plan.action, plan.slot) == ("go", "slot-a")
    assert api.windows[0] >= 3  # before: 1 s windows, a read after each
    assert api.calls == ["get", "log", "watch", "patch"]  # planned from the version the watch sent
