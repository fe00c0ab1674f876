"""The volume manager's first mount of a pod's volumes, with its retries and FailedMount events.

- When: a pod's volumes are mounted before anything of the pod runs. `kubelet.go` `SyncPod` calls
  `volumeManager.WaitForAttachAndMount` before `containerRuntime.SyncPod` creates the sandbox, so a pod whose
  Secret is missing gets no sandbox (no pod IP, no container started) while it waits; the populator and the
  reconciler (`volume_manager.go` `desiredStateOfWorldPopulatorLoopSleepPeriod`,
  `reconcilerLoopSleepPeriod`: 100 ms each, the profile's `volume_loop_period`) start the mounts within their
  next passes, 0-0.2 s after the pod reaches the kubelet; here the first try is at once and the retries
  follow the reconciler's loop.
- Each volume on its own: the reconciler starts one `volume_mount` operation per volume
  (`operationexecutor`); a volume that fails does not hold the others up.
- Retries: `nestedpendingoperations` refuses a failed operation's next start until its back-off passed
  (`goroutinemap/exponentialbackoff` `Update`: 500 ms after the first failure, doubled after each one, at most
  2 min 2 s; `SafeToRetry`).
- Events: every failed `MountVolume.SetUp` records a `Warning` `FailedMount` event with the operation's
  error (`operation_generator.go` `GenerateMountVolumeFunc`, `eventRecorderFunc`; `GenerateError`:
  `MountVolume.SetUp failed for volume "<name>" : <error>`); the recorder aggregates repeats into one event
  whose `count` grows.
- Not modelled: `WaitForAttachAndMount` gives up after 2 min 3 s (`podAttachAndMountTimeout`) and the sync
  fails, but records no event for a timeout (`SyncPod`: `if !wait.Interrupted(err)`), and the reconciler goes
  on retrying on the schedule above; nothing of it shows in the API, so the mounts here simply go on.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .volumes import VolumeError

if TYPE_CHECKING:
    from collections.abc import Container

    from .store import Obj

INITIAL_DURATION_BEFORE_RETRY = 0.5
"""`exponentialbackoff.initialDurationBeforeRetry`"""
MAX_DURATION_BEFORE_RETRY = 122.0
"""`exponentialbackoff.maxDurationBeforeRetry`: 2 min 2 s"""


@dataclass
class ExponentialBackoff:
    """`goroutinemap/exponentialbackoff.ExponentialBackoff` of one volume's mount operation."""

    last_error_time: float = 0.0
    duration_before_retry: float = 0.0

    def safe_to_retry(self, now: float) -> bool:
        """`SafeToRetry`: refused while `now - lastErrorTime <= durationBeforeRetry`."""
        return now - self.last_error_time > self.duration_before_retry

    def update(self, now: float) -> None:
        """`Update`: 500 ms after the first error, then twice the last duration, at most 2 min 2 s."""
        if self.duration_before_retry == 0:
            self.duration_before_retry = INITIAL_DURATION_BEFORE_RETRY
        else:
            self.duration_before_retry = min(2 * self.duration_before_retry, MAX_DURATION_BEFORE_RETRY)
        self.last_error_time = now

    def retry_at(self) -> float:
        return self.last_error_time + self.duration_before_retry


class MountingWorker(Protocol):
    """What the mount loop uses of a pod worker (`pod_workers.PodWorker`)."""

    terminating: bool

    def pod(self) -> Obj | None: ...

    def setup_volumes(self, names: Container[str] | None = None) -> None: ...

    def event(self, etype: str, reason: str, message: str, container: str | None = None) -> None: ...


async def mount_volumes(worker: MountingWorker, loop_period: float) -> bool:
    """Mount every volume of the worker's pod, each retried on its own back-off with a FailedMount event per
    failure; True once all are mounted, False if the pod's termination began (or the pod went) first.
    `loop_period`: the reconciler's loop (0: try again exactly when a back-off ends)."""
    loop = asyncio.get_running_loop()
    backoffs: dict[str, ExponentialBackoff] = {}
    mounted: set[str] = set()
    while not worker.terminating:
        pod = worker.pod()
        if pod is None:
            return False
        volumes = (pod.get("spec") or {}).get("volumes") or []
        pending = [v["name"] for v in volumes if v["name"] not in mounted]
        if not pending:
            return True
        for name in pending:
            backoff = backoffs.setdefault(name, ExponentialBackoff())
            if backoff.duration_before_retry and not backoff.safe_to_retry(loop.time()):
                continue
            try:
                worker.setup_volumes({name})
            except VolumeError as e:
                backoff.update(loop.time())
                worker.event("Warning", "FailedMount", str(e))
                continue
            mounted.add(name)
        retries = [backoffs[n].retry_at() for n in pending if n not in mounted]
        if retries:
            await asyncio.sleep(loop_period or max(0.0, min(retries) - loop.time()) + 0.001)
    return False
