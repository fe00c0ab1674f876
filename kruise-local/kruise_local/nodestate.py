"""A node's kubelet-side state: its image store (what `crictl images` lists), its image puller, its crash-loop
and image pull back-offs and its clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from .backoff import Backoff, image_backoff
from .catalogue import Image
from .image_puller import ImagePuller
from .imageref import normalize, repository, split_reference


@dataclass
class NodeState:
    """A node's kubelet-side state: its image store, its kubelet's image puller (`image_puller.py`) and its
    crash-loop and image pull back-offs, which run on the node's clock: real time plus `clock_offset` (tests
    move it forward instead of sleeping through a back-off)."""

    name: str
    ip: str
    images: dict[str, Image] = field(default_factory=dict)
    pulled_at: dict[str, datetime] = field(default_factory=dict)
    pulling: dict[str, asyncio.Future[Image | None]] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff)
    image_backoff: Backoff = field(default_factory=image_backoff)
    """the image pull back-off, key pod UID + image (image_manager.go `EnsureImageExists`)"""
    puller: ImagePuller = field(default_factory=ImagePuller)
    """the kubelet's image puller: serial unless the node's configuration says otherwise"""
    pull_errors: dict[str, str] = field(default_factory=dict)
    """the last failed pull's error per image pull back-off key (image_manager.go `pullImage`'s
    `prevPullErrMsg`, since 1.32): stored when a pull fails, deleted when the next pull begins, never
    collected otherwise"""
    clock_offset: float = 0.0

    def now(self) -> datetime:
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset)

    def stamp(self, real: datetime) -> datetime:
        """A real time (the runtime's) on this node's clock."""
        return real + timedelta(seconds=self.clock_offset)

    def image_for(self, ref: str) -> Image | None:
        """The stored image `ref` names, as the runtime resolves it: by reference, or for a digest reference
        (`repo@sha256:D`, `repo:tag@sha256:D`: the tag is ignored) any stored image of that repository and
        digest."""
        full = normalize(ref)
        if full in self.images:
            return self.images[full]
        digest = split_reference(full)[2]
        if digest:
            repo = repository(full)
            for image in self.images.values():
                if image.digest == digest and repository(image.ref) == repo:
                    return replace(image, ref=full)
        return None
