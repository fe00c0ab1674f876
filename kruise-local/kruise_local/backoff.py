"""The kubelet's crash-loop and image pull back-off.

- client-go `util/flowcontrol/backoff.go` `Backoff` as `pkg/kubelet/kubelet.go` configures it
  (`newCrashLoopBackOff`: initial 10 s, doubling, at most `MaxCrashLoopBackOff`, expiry `HasExpiredFunc`);
- the two gates that change it (`features.Features.crash_loop_backoff` picks the maximum and the initial value
  per Kubernetes version): `ReduceDefaultCrashLoopBackOffDecay` (KEP-4603 "Tune CrashLoopBackoff", alpha from
  1.33: 1 s to 60 s) and `KubeletCrashLoopBackOffMax`, the node setting
  `crashLoopBackOff.maxContainerRestartPeriod` (1-300 s; alpha in 1.32 under KEP-4603, beta and on by default
  in 1.35 under KEP-5593 "Configure the max CrashLoopBackOff delay", which was split off KEP-4603 for it);
- the image pull back-off (`image_backoff`: `NewMainKubelet`'s `flowcontrol.NewBackOff(imageBackOffPeriod,
  MaxImageBackOff)`), collected by `Backoff.GC` after each successful pull (image_manager.go
  `EnsureImageExists`);
- Go's `time.Duration.String()`, which the kubelet's back-off messages print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from .godur import duration_string, seconds_to_duration

BACKOFF_INITIAL = 10.0  # kubelet.go initialCrashLoopBackOff
BACKOFF_MAX = 300.0  # kubelet.go MaxCrashLoopBackOff (v1beta1.MaxContainerBackOff)
REDUCED_BACKOFF_INITIAL = 1.0  # kubelet.go reducedInitialCrashLoopBackOff
REDUCED_BACKOFF_MAX = 60.0  # kubelet.go reducedMaxCrashLoopBackOff
BACKOFF_EXPIRY = 600.0  # kubelet.go crashLoopBackOff.HasExpiredFunc (whatever the maximum)


WORKER_BACKOFF_PERIOD = 10.0  # kubelet.go backOffPeriod: a pod worker's retry after a sync error
WORKER_BACKOFF_JITTER = 0.5  # pod_workers.go workerBackOffPeriodJitterFactor (wait.Jitter: d to d * 1.5)


def sync_error_requeue(jitter: float) -> float:
    """Seconds until a pod worker syncs again after a sync that failed (`pod_workers.go` `completeWork`:
    `wait.Jitter(backOffPeriod, workerBackOffPeriodJitterFactor)`, 10-15 s; `jitter` in [0, 1) is its random
    draw), e.g. after a start that failed with CreateContainerConfigError (`kuberuntime_container.go`
    `startContainer` returns `ErrCreateContainerConfig`, which `SyncPod` returns); an earlier sync of the pod
    (a pod update, another container's PLEG event) tries again before."""
    return WORKER_BACKOFF_PERIOD * (1 + WORKER_BACKOFF_JITTER * jitter)


IMAGE_BACKOFF_INITIAL = 10.0  # kubelet.go imageBackOffPeriod
IMAGE_BACKOFF_MAX = 300.0  # kubelet.go MaxImageBackOff
IMAGE_BACKOFF_EXPIRY = 2 * IMAGE_BACKOFF_MAX
"""flowcontrol's own expiry (`hasExpired`; the image back-off has no `HasExpiredFunc`): an entry not updated
for twice the maximum starts over, and `GC` forgets it"""


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String()` writes it: 10s, 1m20s, 5m0s, 1.5s, 500ms, 1h0m0s
    (`godur.duration_string` of the whole nanoseconds)."""
    return duration_string(seconds_to_duration(seconds))


@dataclass
class Backoff:
    """The kubelet's crash-loop back-off: client-go `util/flowcontrol/backoff.go` `Backoff` as `kubelet.go`
    configures it (`newCrashLoopBackOff`, values from `Features.crash_loop_backoff`): `initial` (10 s, 1 s
    with ReduceDefaultCrashLoopBackOffDecay, never above the maximum), doubling, no jitter, up to `max`
    (300 s, 60 s with ReduceDefaultCrashLoopBackOffDecay, the node's
    `crashLoopBackOff.maxContainerRestartPeriod` with KubeletCrashLoopBackOffMax), and the kubelet's own
    expiry (`HasExpiredFunc`): an entry whose last update is more than 600 s before the event time starts
    over. All times are the node's clock."""

    max: float = BACKOFF_MAX
    initial: float = BACKOFF_INITIAL
    entries: dict[str, tuple[float, datetime]] = field(default_factory=dict)
    expiry: float = BACKOFF_EXPIRY
    """seconds without an update after which a key starts over and `gc` forgets it: the crash-loop back-off's
    `HasExpiredFunc` (600 s whatever the maximum), or flowcontrol's `hasExpired` (twice the maximum)"""

    def get(self, key: str) -> float:
        """The current back-off of `key` in seconds (0 if none)."""
        entry = self.entries.get(key)
        return entry[0] if entry else 0.0

    def in_backoff_since(self, key: str, event: datetime, now: datetime) -> float:
        """`IsInBackOffSince`: seconds left of `key`'s back-off counted from `event` (0 = not in back-off)."""
        self.gc(now)
        entry = self.entries.get(key)
        if entry is None or self._expired(event, entry[1]):
            return 0.0
        left = entry[0] - (now - event).total_seconds()
        return left if left > 0 else 0.0

    def in_backoff_since_update(self, key: str, now: datetime) -> float:
        """`IsInBackOffSinceUpdate(key, now)` (the image pull back-off's test): seconds left of `key`'s
        back-off counted from its last update (0 = not in back-off)."""
        entry = self.entries.get(key)
        if entry is None or self._expired(now, entry[1]):
            return 0.0
        left = entry[0] - (now - entry[1]).total_seconds()
        return left if left > 0 else 0.0

    def next(self, key: str, event: datetime, now: datetime) -> None:
        """`Next`: a new or expired key starts at the initial back-off, else it doubles up to the maximum."""
        entry = self.entries.get(key)
        if entry is None or self._expired(event, entry[1]):
            delay = self.initial
        else:
            delay = min(entry[0] * 2, self.max)
        self.entries[key] = (delay, now)

    def gc(self, now: datetime) -> None:
        """`GC`: forget keys not updated for longer than the expiry. The kubelet calls it on its crash-loop
        back-off from its housekeeping, and on its image pull back-off after each successful pull
        (image_manager.go `EnsureImageExists`: `m.backOff.GC()`)."""
        for key in [k for k, (_, last) in self.entries.items() if self._expired(now, last)]:
            del self.entries[key]

    def _expired(self, event: datetime, last_update: datetime) -> bool:
        return (event - last_update).total_seconds() > self.expiry


def image_backoff() -> Backoff:
    """A node's image pull back-off: `pkg/kubelet/kubelet.go` `NewMainKubelet`'s
    `flowcontrol.NewBackOff(imageBackOffPeriod, MaxImageBackOff)` (10 s doubling to 300 s, no jitter), its
    entries expiring, and collected by `GC`, after twice the maximum."""
    return Backoff(max=IMAGE_BACKOFF_MAX, initial=IMAGE_BACKOFF_INITIAL, expiry=IMAGE_BACKOFF_EXPIRY)


def check_max_container_restart_period(seconds: float) -> float:
    """`ValidateKubeletConfiguration`'s range for the node setting
    `crashLoopBackOff.maxContainerRestartPeriod` (1 s to 300 s)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 1 <= seconds <= BACKOFF_MAX:
        raise ValueError(
            f"crashLoopBackOff.maxContainerRestartPeriod must be between 1 and 300 seconds, not {seconds!r}"
        )
    return float(seconds)
