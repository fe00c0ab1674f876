"""Every error the chain core raises, in one place.

The hierarchy (all importable from ``airflow_kruise_chain.core`` and from this module)::

    ChainError                       base: catch this for anything the chain itself reports
    ├── ChainConfigError (ValueError) a chain or stage definition is invalid; `field` names the setting
    ├── PodLostError                 the chain pod is gone, terminating, or has stopped for good
    ├── SlotBusyError                the slot a swap needs still hosts an unfinished generation
    ├── ConflictError                a conditional write lost a race (409): re-read and plan again
    ├── PodStartError                the chain pod cannot start: a missing Secret, ConfigMap, image, node...
    ├── StageStartError              the stage's container could not start (pull failure, crash loop, ...)
    ├── StageTimeoutError            swap_timeout, pull_timeout or stage_timeout ran out
    ├── ResultUnavailableError       an earlier try's generation ended but its result can no longer be read
    ├── ResizeInfeasibleError        the node can never give a slot what its stage requests
    ├── ResizeUnsupportedError       the cluster serves no pods/resize
    ├── ResizeRefusedError           the API server refused a resize (422)
    ├── ResizeTimeoutError           a resize was not applied within the swap timeout
    └── MalformedTrack (ValueError)  a ``chain_state`` XCom that is not a stage track (any task can push one)

The Airflow-facing hook adds its own, outside the core: `hooks.kruise.KruiseApiError` (a failed API call)
and its `PrewarmUnavailableError` (also an `AirflowFailException`: no retry helps).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .status import StageStatus


class ChainError(Exception):
    """Base class of the chain core's errors."""


class ChainConfigError(ChainError, ValueError):
    """A chain or stage definition is invalid; `field` names the offending setting."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SlotBusyError(ChainError):
    """The slot a swap needs still hosts a generation that has not finished, or is being prepared for the
    stage's image (`preparing`: the kubelet's waiting reason for that slot, e.g. ContainerCreating while it
    pulls)."""

    def __init__(
        self, slot: str, generation: int, state: str, message: str, preparing: str | None = None
    ) -> None:
        super().__init__(message)
        self.slot = slot
        self.generation = generation
        self.state = state
        self.preparing = preparing


class PodLostError(ChainError):
    """The chain pod is gone, terminating, or has stopped for good."""


class ConflictError(ChainError):
    """A conditional write lost a race (409 Conflict): re-read and try again."""


_PULL_HINT = (
    "; check that the image reference exists and that the chain's image_pull_secrets give access to its "
    "registry"
)
_START_HINTS = {
    "ErrImagePull": _PULL_HINT,
    "ImagePullBackOff": _PULL_HINT,
    "InvalidImageName": "; fix the image reference",
    "ErrImageNeverPull": "; with image_pull_policy='Never' the image must already be on the node",
}


class PodStartError(ChainError):
    """The chain pod cannot start as things stand (`startup.wait_started`): `reason` is what the cluster
    said (FailedMount, CreateContainerConfigError, FailedScheduling, ErrImagePull, ...); the message names
    the missing object and the fix."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class StageStartError(ChainError):
    """The stage's container could not start (image pull failure, crash loop, bad config)."""

    def __init__(self, status: StageStatus, image: str = "") -> None:
        hint = _START_HINTS.get(status.reason, "")
        super().__init__(
            f"stage {status.stage!r} could not start in {status.slot} (generation {status.generation}"
            f"{', image ' + image if image else ''}): {status.reason}: {status.message}{hint}"
        )
        self.status = status
        self.image = image


class StageTimeoutError(ChainError):
    """A stage exceeded one of its timeouts; the message names which."""

    @classmethod
    def pull(cls, which: str, limit: float, image: str, stage: str, where: str) -> StageTimeoutError:
        """A stage whose image is still not pulled when `which` (`limit` seconds) runs out."""
        return cls(
            f"image pull timeout ({which} {limit:g}s): the image {image} of stage {stage!r} is still not "
            f"pulled on the chain pod's node ({where}); prewarm it (prewarm=True) or allow more time"
        )


class ResultUnavailableError(ChainError):
    """An earlier try's generation of a stage ended, but its result can no longer be read."""


class ResizeInfeasibleError(ChainError):
    """The node can never give the slot what its stage requests (`PodResizePending` reason Infeasible)."""


class ResizeUnsupportedError(ChainError):
    """The cluster serves no `pods/resize` (Kubernetes < 1.33, or the InPlacePodVerticalScaling gate off)."""


class ResizeRefusedError(ChainError):
    """The API server refused a resize (422): `message` says why."""


class ResizeTimeoutError(ChainError):
    """A resize was not applied within the swap timeout (deferred, or a limit the kubelet would not lower)."""


class MalformedTrack(ChainError, ValueError):
    """A ``chain_state`` XCom that is not a `StageTrack`: the message names the field and what is wrong."""
