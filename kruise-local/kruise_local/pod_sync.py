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
  `Set` sends only changes), and the periodic resync: each sync that ends requeues the pod `--sync-frequency`
  (1 min) later with a jitter of up to half of it (`completeWork`, `wait.Jitter(resyncInterval, 0.5)`), a
  due time the next sync replaces (`basicWorkQueue.Enqueue`). (Upstream's `syncCh` collects due pods once a
  second; here the requeue fires at its due time.)

Fast-profile shortcuts (`profiles.py`): with `pod_worker_serial` off syncs may overlap; with
`pleg_relist_period` 0 nothing waits for the cache; with `volume_loop_period` 0 the files are rewritten at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
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
        self._next_round: _Round | None = None
        self.last_sync = float("-inf")  # loop time at which the last sync ended (`lastSyncTime`)
        self.syncs = 0
        self.seen_fingerprint = semantic_fingerprint(pod)
        self.update_task: asyncio.Task[None] | None = None
        self._resync: asyncio.TimerHandle | None = None
        self._at_begin: list[Any] = []

    def _turn(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return self._sync_lock if self.kubelet.profile.pod_worker_serial else contextlib.nullcontext()

    @contextlib.asynccontextmanager
    async def pod_sync(self) -> AsyncIterator[None]:
        """Take part in the pod's next sync; the body is what it does to one container (kill, pull, start).

        Every action asked for before that sync begins joins it, as one `SyncPod` kills and starts every
        container `computePodActions` lists: the sync waits for its turn (the sync before it ended) and for
        a PLEG cache newer than the last sync, reprocesses the pod's volumes, runs its members' bodies, and
        ends when the last of them is done."""
        rnd = self._next_round
        if rnd is None:
            rnd = self._next_round = _Round()
            self.kubelet.spawn(self._run_round(rnd))
        rnd.members += 1
        try:
            await rnd.begun.wait()
            yield
        finally:
            rnd.members -= 1
            if rnd.members == 0:
                rnd.done.set()

    async def _run_round(self, rnd: _Round) -> None:
        async with self._turn():
            try:
                await self.kubelet.pleg(self.node).newer_than(self.last_sync)
            finally:
                if self._next_round is rnd:
                    self._next_round = None  # what asks for a sync from now on waits for the next one
            self._update.clear()  # this sync carries every update requested so far (the latest pod wins)
            self.kubelet.volume_loops.reprocess_pod(self)
            begun, self._at_begin = self._at_begin, []
            for then in begun:
                then()
            self.sync_begins()
            rnd.begun.set()
            if rnd.members:
                await rnd.done.wait()
            self.last_sync = asyncio.get_running_loop().time()
            self.syncs += 1
            self._requeue()

    def _requeue(self) -> None:
        """`completeWork` after a sync without error: the periodic resync, 1 to 1.5 sync periods from now."""
        self.cancel_resync()
        delay = self.kubelet.sync_period * (1 + 0.5 * random.random())
        self._resync = asyncio.get_running_loop().call_later(delay, self.request_sync)

    def cancel_resync(self) -> None:
        if self._resync is not None:
            self._resync.cancel()
            self._resync = None

    def sync_begins(self) -> None:
        """What the sync's status generation does besides the calls `at_next_sync` queued (the prober
        manager's `UpdatePodStatus`: `PodProber.sync_begins`)."""

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

    def at_next_sync(self, then: Any) -> None:
        """Ask for a sync and call `then()` as the pod's next sync begins (where the status manager gets the
        status `generateAPIPodStatus` makes of the PLEG cache, `kubelet.go` `SyncPod`)."""
        self._at_begin.append(then)
        self.request_sync()

    def after_relist(self, then: Any) -> None:
        """Call `then()` once the PLEG's next relist has seen what the runtime did just now."""

        async def wait() -> None:
            await self.kubelet.pleg(self.node).relisted()
            if not self.terminating:
                then()

        self.kubelet.spawn(wait())

    async def update_loop(self) -> None:
        """Sync the pod for each requested update (one that arrives before a sync begins joins it)."""
        while not self.terminating:
            await self._update.wait()
            async with self.pod_sync():
                pass


class _Round:
    """One sync of a pod and the container actions it carries."""

    def __init__(self) -> None:
        self.begun = asyncio.Event()
        self.done = asyncio.Event()
        self.members = 0
