"""The kubelet's crash-loop and image pull back-off.

- client-go `util/flowcontrol/backoff.go` `Backoff` as `pkg/kubelet/kubelet.go` configures it
  (`newCrashLoopBackOff`: initial 10 s, doubling, at most `MaxContainerBackOff`, expiry `HasExpiredFunc`);
- the node setting `crashLoopBackOff.maxContainerRestartPeriod` (KEP-5593, 1-300 s);
- Go's `time.Duration.String()`, which the kubelet's back-off messages print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

BACKOFF_INITIAL = 10.0  # kubelet.go initialCrashLoopBackOff


BACKOFF_MAX = 300.0  # kubelet.go MaxContainerBackOff; KEP-5593 lets a node lower it (1-300 s)


BACKOFF_EXPIRY = 600.0  # kubelet.go crashLoopBackOff.HasExpiredFunc


IMAGE_BACKOFF_INITIAL = 10.0


def go_duration(seconds: float) -> str:
    """`seconds` as Go's `time.Duration.String()` writes it: 10s, 1m20s, 5m0s, 1.5s."""
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.9f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


@dataclass
class Backoff:
    """The kubelet's crash-loop back-off: client-go `util/flowcontrol/backoff.go` `Backoff` as `kubelet.go`
    configures it (`newCrashLoopBackOff`): initial 10 s (`initialCrashLoopBackOff`), doubling, no jitter, up
    to the node's `crashLoopBackOff.maxContainerRestartPeriod` (default 300 s, `MaxContainerBackOff`; a lower
    maximum lowers the initial value too), and the kubelet's own expiry (`HasExpiredFunc`): an entry whose
    last update is more than 600 s before the event time starts over. All times are the node's clock."""

    max: float = BACKOFF_MAX
    entries: dict[str, tuple[float, datetime]] = field(default_factory=dict)

    @property
    def initial(self) -> float:
        return min(BACKOFF_INITIAL, self.max)

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
    """Validate the node setting `crashLoopBackOff.maxContainerRestartPeriod` (KEP-5593: 1 s to 300 s)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 1 <= seconds <= BACKOFF_MAX:
        raise ValueError(
            f"crashLoopBackOff.maxContainerRestartPeriod must be between 1 and 300 seconds, not {seconds!r}"
        )
    return float(seconds)
