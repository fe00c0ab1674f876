"""Errors raised by the core."""

from __future__ import annotations


class ChainError(Exception):
    """Base class of the chain core's errors."""


class ChainConfigError(ChainError, ValueError):
    """A chain or stage definition is invalid; `field` names the offending setting."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SlotBusyError(ChainError):
    """The slot a swap needs still hosts a generation that has not finished."""

    def __init__(self, slot: str, generation: int, state: str, message: str) -> None:
        super().__init__(message)
        self.slot = slot
        self.generation = generation
        self.state = state


class PodLostError(ChainError):
    """The chain pod is gone, terminating, or has stopped for good."""
