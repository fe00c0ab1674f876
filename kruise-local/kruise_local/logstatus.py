"""Which container instance `pods/log` reads: the one the kubelet's status names
(`pkg/kubelet/kubelet_pods.go` `GetKubeletContainerLogs`, `validateContainerLogStatus`), not the runtime's
newest."""

from __future__ import annotations

from typing import Any

from .errors import ApiError


def log_container_id(status: dict[str, Any] | None, container: str, pod: str, previous: bool) -> str:
    """`validateContainerLogStatus`: the container ID that `status` (one entry of the status manager's
    containerStatuses, or None) names for a log read: with `previous` the last terminated one; else the
    running container's, the terminated one's, the last terminated one's, in that order; else a 400 with the
    kubelet's words (a container the status shows waiting has no log yet, whatever the runtime runs)."""
    if status is None:
        raise ApiError(400, f'container "{container}" in pod "{pod}" is not available')
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    terminated = state.get("terminated")
    if previous:
        if not last.get("containerID"):
            raise ApiError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
        return str(last["containerID"])
    if state.get("running") is not None:
        return str(status.get("containerID") or "")
    if terminated is not None:
        cid = terminated.get("containerID") or last.get("containerID")
        if not cid:
            raise ApiError(400, f'container "{container}" in pod "{pod}" is terminated')
        return str(cid)
    if last:
        if not last.get("containerID"):
            raise ApiError(400, f'container "{container}" in pod "{pod}" is terminated')
        return str(last["containerID"])
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason", "")
        words = {
            "ErrImagePull": "image can't be pulled",
            "ImagePullBackOff": "trying and failing to pull image",
        }.get(reason, reason)
        raise ApiError(400, f'container "{container}" in pod "{pod}" is waiting to start: {words}')
    raise ApiError(400, f'container "{container}" in pod "{pod}" is waiting to start - no logs yet')
