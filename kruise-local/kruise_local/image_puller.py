"""The kubelet's image puller: how a node's kubelet lets its pods' image pulls reach the runtime.

`pkg/kubelet/images/image_manager.go` `NewImageManager` picks it from the kubelet configuration (the same in
1.32 to 1.35; `serializeImagePulls` since 1.x, `maxParallelImagePulls` since 1.27, KEP-3673, no feature gate):

- `serializeImagePulls: true` (the default): `puller.go` `serialImagePuller`. Every pull request of every pod
  on the node goes into one queue (`pullRequests`, a channel) that one goroutine, `processImagePullRequests`,
  works off one pull at a time, in order.
- `serializeImagePulls: false`: `puller.go` `parallelImagePuller`, one goroutine per pull; with
  `maxParallelImagePulls` set, a pull first takes one of that many tokens (`tokens`, a buffered channel) and
  gives it back when done; unset, no limit.

Both time the pull itself from the moment it leaves the queue or holds its token (`pullResult.pullDuration`),
which `image_manager.go` `pullImage` prints in the Pulled event next to the time since before the request was
queued: "Successfully pulled image %q in %v (%v including waiting)".

The kubelet's configuration defaults and validation (`apis/config/v1beta1/defaults.go`
`SetDefaults_KubeletConfiguration`, `apis/config/validation/validation.go` `ValidateKubeletConfiguration`):
an unset `serializeImagePulls` is true unless `maxParallelImagePulls` is set to 2 or more; a set
`maxParallelImagePulls` must be positive, and above 1 only with `serializeImagePulls: false`.

Not through this puller: OpenKruise's ImagePullJob. kruise-daemon pulls with its own CRI image client, one
goroutine per image tag (`pkg/daemon/imagepuller/puller.go` `newPullWorker` -> `pullWorker.Run` ->
`doPullImage` -> `runtime.PullImage`), neither queued behind the kubelet's pulls nor holding its tokens
(`kruise.py` calls the node's runtime pull, `Kubelet.pull_to_node`, directly).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


def image_pull_settings(
    serialize_image_pulls: bool | None, max_parallel_image_pulls: int | None
) -> tuple[bool, int | None]:
    """A kubelet configuration's `serializeImagePulls` and `maxParallelImagePulls` (None: unset) as the
    kubelet runs them: defaulted (`SetDefaults_KubeletConfiguration`), then checked
    (`ValidateKubeletConfiguration`, whose messages the ValueError carries)."""
    if serialize_image_pulls is not None and not isinstance(serialize_image_pulls, bool):
        raise ValueError(f"serializeImagePulls must be true or false, not {serialize_image_pulls!r}")
    if max_parallel_image_pulls is not None and (
        isinstance(max_parallel_image_pulls, bool) or not isinstance(max_parallel_image_pulls, int)
    ):
        raise ValueError(f"maxParallelImagePulls must be a whole number, not {max_parallel_image_pulls!r}")
    serialize = serialize_image_pulls
    if serialize is None:
        # "SerializeImagePulls is default to true when MaxParallelImagePulls is not set, and false when
        # MaxParallelImagePulls is set" (to 2 or more)
        serialize = max_parallel_image_pulls is None or max_parallel_image_pulls < 2
    if max_parallel_image_pulls is not None and max_parallel_image_pulls < 1:
        raise ValueError(
            f"invalid configuration: maxParallelImagePulls {max_parallel_image_pulls} must be a positive "
            "number"
        )
    if serialize and max_parallel_image_pulls is not None and max_parallel_image_pulls > 1:
        raise ValueError(
            "invalid configuration: maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls "
            "(--serialize-image-pulls) is set to false"
        )
    return serialize, max_parallel_image_pulls


class ImagePuller:
    """A node kubelet's puller: `serialImagePuller` or `parallelImagePuller` (with or without tokens)."""

    def __init__(self, serialize: bool = True, max_parallel: int | None = None) -> None:
        self.serialize = serialize
        self.max_parallel = max_parallel
        # the serial puller's queue: asyncio.Lock wakes its waiters first come, first served, as the one
        # goroutine takes the channel's requests in order
        self._queue = asyncio.Lock() if serialize else None
        # the parallel puller's tokens (`make(chan struct{}, *maxParallelImagePulls)`); none when unset or < 1
        tokens = not serialize and max_parallel is not None and max_parallel >= 1
        self._tokens = asyncio.Semaphore(max_parallel) if tokens and max_parallel else None

    @property
    def kind(self) -> str:
        if self.serialize:
            return "serial"
        return f"parallel (maxParallelImagePulls {self.max_parallel})" if self._tokens else "parallel"

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for this pull's turn (the serial queue, or a token), hold it while the body pulls."""
        gate = self._queue or self._tokens
        if gate is None:
            yield
            return
        async with gate:
            yield
