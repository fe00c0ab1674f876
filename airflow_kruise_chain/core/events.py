"""What the driver reports while it follows one generation of a stage: typed events, no log text.

`StageDriver.follow` calls a `StageEvents` (the operator passes its `chainstate.StageMonitor`, which publishes
the chain's monitoring state); `NO_EVENTS` ignores them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from datetime import datetime

    from .podview import Slot
    from .status import StageResult
    from .wire import StartMarker


class StageEvents(Protocol):
    """The events of following one generation, in order: `swapped`, any `waiting`, `started` (again if the
    log is read again from its start), then `ended` or `failed`."""

    def swapped(self, at: datetime | None = None) -> None:
        """Following begins: the swap was made `at` (when its request was sent), or found (a reattach, an
        earlier try's generation: `at` None)."""

    def waiting(self, slot: str, reason: str, message: str) -> None:
        """The slot waits to run the stage (ContainerCreating, ErrImagePull, a restart back-off, ...):
        once per reason in a row, with the kubelet's message."""

    def started(self, marker: StartMarker, slot: Slot | None) -> None:
        """The runner announced the generation (its start marker); `slot` as the pod was last read (the
        kubelet's container times), None when the driver has not read it."""

    def ended(self, result: StageResult) -> None:
        """The generation's result is in."""

    def failed(self, error: BaseException) -> None:
        """Following ended without a result (failed to start, timeout, pod lost, ...): `error`, raised
        next."""


class NoEvents:
    """A `StageEvents` that ignores every event."""

    def swapped(self, at: datetime | None = None) -> None:
        pass

    def waiting(self, slot: str, reason: str, message: str) -> None:
        pass

    def started(self, marker: StartMarker, slot: Slot | None) -> None:
        pass

    def ended(self, result: StageResult) -> None:
        pass

    def failed(self, error: BaseException) -> None:
        pass


NO_EVENTS: StageEvents = NoEvents()
