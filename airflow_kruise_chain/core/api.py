"""What the core needs from a Kubernetes client (the provider's `KruiseHook` implements it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from .podview import ChainPod


class ChainApi(Protocol):
    """What the driver needs from a Kubernetes client. The chain pod comes back as a `ChainPod` snapshot
    from every read, watch, patch and resize (the client converts the API's answer, once)."""

    def read_pod(self, name: str, namespace: str) -> ChainPod | None: ...

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod: ...

    def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod: ...

    def delete_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> bool: ...

    def create_kruise(self, plural: str, body: dict[str, Any], namespace: str) -> dict[str, Any]: ...

    def get_kruise(self, plural: str, name: str, namespace: str) -> dict[str, Any] | None: ...

    def delete_kruise(self, plural: str, name: str, namespace: str) -> bool: ...

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]: ...

    def follow_log(
        self, name: str, namespace: str, container: str, *, since_seconds: int | None = None
    ) -> Iterator[str]: ...

    def read_log(
        self,
        name: str,
        namespace: str,
        container: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str: ...
