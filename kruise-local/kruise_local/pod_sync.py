"""How a pod worker paces its syncs (`pkg/kubelet/pod_workers.go`; `pkg/kubelet/kubelet.go` `SyncPod`).

- One sync at a time per pod (`podWorkerLoop`): an update that arrives while a sync runs (one that kills a
  container with its grace period, or pulls an image) is held as the pod's `pendingUpdate` (`UpdatePod`;
  the latest wins) and synced after it.
- Before each sync the worker waits until the PLEG cache is newer than the end of its last sync
  (`podCache.GetNewerThan(uid, lastSyncTime)`, `pleg.py`).
- Each sync begins with `WaitForAttachAndMount`, which calls `ReprocessPod`: the volume manager's loops then
  rewrite the pod's configMap and downwardAPI files (`volumes.VolumeLoops`). So a changed annotation reaches
  its downwardAPI file only once a sync has processed the update.
- What asks for a sync (`syncLoopIteration`): a pod update from the API server that differs semantically
  (spec, labels, annotations, deletion: `config.go` `podsDifferSemantically`), a PLEG event of the pod
  (ContainerStarted, ContainerDied), a readiness or startup probe result that changed (`results_manager.go`
  `Set` sends only changes), and the periodic resync (`--sync-frequency`, 1 min, each worker requeued with a
  jitter of up to half of it).

Fast-profile shortcuts (`profiles.py`): with `pod_worker_serial` off syncs may overlap; with
`pleg_relist_period` 0 nothing waits for the cache; with `volume_loop_period` 0 the files are rewritten at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .store import Obj


def semantic_fingerprint(pod: Obj) -> str:
    """What `podsDifferSemantically` compares: spec, labels, annotations, deletion timestamp and grace."""
    meta = pod.get("metadata") or {}
    picked = [
        pod.get("spec"),
        meta.get("labels") or {},
        meta.get("annotations") or {},
        meta.get("deletionTimestamp"),
        meta.get("deletionGracePeriodSeconds"),
    ]
    return json.dumps(picked, sort_keys=True, default=str)


class PodSyncs:
    """The pod worker's sync pacing; mixed into `PodWorker`."""

    kubelet: Any
    node: str
    terminating: bool

    def init_syncs(self, pod: Obj) -> None:
        self._sync_lock = asyncio.Lock()
        self._update = asyncio.Event()
        self.last_sync = float("-inf")  # loop time at which the last sync ended (`lastSyncTime`)
        self.syncs = 0
        self.seen_fingerprint = semantic_fingerprint(pod)
        self.update_task: asyncio.Task[None] | None = None

    def _turn(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._sync_lock if self.kubelet.profile.pod_worker_serial else contextlib.nullcontext()

    async def _begin_sync(self) -> None:
        await self.kubelet.pleg(self.node).newer_than(self.last_sync)
        self._update.clear()  # this sync carries every update requested so far (the latest pod wins)
        self.kubelet.volume_loops.reprocess_pod(self)

    def _end_sync(self) -> None:
        self.last_sync = asyncio.get_running_loop().time()
        self.syncs += 1

    @contextlib.asynccontextmanager
    async def pod_sync(self) -> AsyncIterator[None]:
        """One sync of the pod: wait for its turn and for a newer PLEG cache, reprocess its volumes; the
        body is what the sync does to the containers (kill, pull, start)."""
        async with self._turn():
            await self._begin_sync()
            try:
                yield
            finally:
                self._end_sync()

    def request_sync(self) -> None:
        """`UpdatePod`: sync the pod again (updates that arrive before that sync begins make one)."""
        self._update.set()

    def pod_updated(self, pod: Obj, carried: bool) -> None:
        """A pod update from the API server (`HandlePodUpdates`): a sync if it differs semantically, unless a
        container action's sync, woken by the same update, carries it (`carried`)."""
        fingerprint = semantic_fingerprint(pod)
        if fingerprint != self.seen_fingerprint:
            self.seen_fingerprint = fingerprint
            if not carried:
                self.request_sync()

    def after_relist(self, then: Any) -> None:
        """Call `then()` once the PLEG's next relist has seen what the runtime did just now."""

        async def wait() -> None:
            await self.kubelet.pleg(self.node).relisted()
            if not self.terminating:
                then()

        self.kubelet.spawn(wait())

    async def update_loop(self) -> None:
        """Sync the pod for each requested update that no container action's sync carried."""
        while not self.terminating:
            await self._update.wait()
            async with self._turn():
                if not self._update.is_set() or self.terminating:
                    continue
                await self._begin_sync()
                self._end_sync()
