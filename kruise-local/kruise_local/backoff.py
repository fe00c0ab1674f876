"""The kubelet's crash-loop and image pull back-off.

- client-go `util/flowcontrol/backoff.go` `Backoff` as `pkg/kubelet/kubelet.go` configures it
  (`newCrashLoopBackOff`: initial 10 s, doubling, at most `MaxCrashLoopBackOff`, expiry `HasExpiredFunc`);
- the two gates that change it (`features.Features.crash_loop_backoff` picks the maximum and the initial value
  per Kubernetes version): `ReduceDefaultCrashLoopBackOffDecay` (KEP-4603 "Tune CrashLoopBackoff", alpha from
  1.33: 1 s to 60 s) and `KubeletCrashLoopBackOffMax`, the node setting
  `crashLoopBackOff.maxContainerRestartPeriod` (1-300 s; alpha in 1.32 under KEP-4603, beta and on by default
  in 1.35 under KEP-5593 "Configure the max CrashLoopBackOff delay", which was split off KEP-4603 for it);
- Go's `time.Duration.String()`, which the kubelet's back-off messages print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

BACKOFF_INITIAL = 10.0  # kubelet.go initialCrashLoopBackOff
BACKOFF_MAX = 300.0  # kubelet.go MaxCrashLoopBackOff (v1beta1.MaxContainerBackOff)
REDUCED_BACKOFF_INITIAL = 1.0  # kubelet.go reducedInitialCrashLoopBackOff
REDUCED_BACKOFF_MAX = 60.0  # kubelet.go reducedMaxCrashLoopBackOff
BACKOFF_EXPIRY = 600.0  # kubelet.go crashLoopBackOff.HasExpiredFunc (whatever the maximum)


IMAGE_BACKOFF_INITIAL = 10.0
IMAGE_BACKOFF_MAX = 300.0  # kubelet.go MaxImageBackOff


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String()` writes it: 10s, 1m20s, 5m0s, 1.5s."""
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.9f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


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

    def get(self, key: str) -> float:
        """The current back-off of `key` in seconds (0 if none)."""
        entry = self.entries.get(key)
        return entry[0] if entry else 0.0

    def in_backoff_since(self, key: str, event: datetime, now: datetime) -> float:
        """`IsInBackOffSince`: seconds left of `key`'s back-off counted from `event` (0 = not in back-off)."""
        self.gc(now)
        entry = self.entries.get(key)
        if entry is None or _expired(event, entry[1]):
            return 0.0
        left = entry[0] - (now - event).total_seconds()
        return left if left > 0 else 0.0

    def next(self, key: str, event: datetime, now: datetime) -> None:
        """`Next`: a new or expired key starts at the initial back-off, else it doubles up to the maximum."""
        entry = self.entries.get(key)
        if entry is None or _expired(event, entry[1]):
            delay = self.initial
        else:
            delay = min(entry[0] * 2, self.max)
        self.entries[key] = (delay, now)

    def gc(self, now: datetime) -> None:
        """`GC` (the kubelet's housekeeping): forget keys not updated for longer than the expiry."""
        for key in [k for k, (_, last) in self.entries.items() if _expired(now, last)]:
            del self.entries[key]


def _expired(event: datetime, last_update: datetime) -> bool:
    return (event - last_update).total_seconds() > BACKOFF_EXPIRY


def check_max_container_restart_period(seconds: float) -> float:
    """`ValidateKubeletConfiguration`'s range for the node setting
    `crashLoopBackOff.maxContainerRestartPeriod` (1 s to 300 s)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 1 <= seconds <= BACKOFF_MAX:
        raise ValueError(
            f"crashLoopBackOff.maxContainerRestartPeriod must be between 1 and 300 seconds, not {seconds!r}"
        )
    return float(seconds)
