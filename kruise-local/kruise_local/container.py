"""What the kubelet knows of a pod's containers (`pkg/kubelet/container`): the container hash (`helpers.go`
`HashContainer`), one run of a container (an instance: its process, log and exit) and a container's state."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .catalogue import Image
from .processes import RunningContainer


def spec_hash(container: dict[str, Any]) -> str:
    """The kubelet's hash of a container (`pkg/kubelet/container/helpers.go` `HashContainer`): since 1.31 it
    covers only the fields `pickFieldsToHash` keeps, the name and the image, so a running container whose hash
    changed is restarted ("definition changed") and nothing else (resources, env, command) restarts it."""
    picked = {"name": container.get("name", ""), "image": container.get("image", "")}
    return hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class Instance:
    """One run of a container: its process, logs and what it ended with."""

    container_id: str
    image: Image
    spec_hash: str
    log_path: Path
    term_path: Path
    proc: RunningContainer | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    node_finished_at: datetime | None = None  # finished_at on the node's clock when the exit was recorded
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


@dataclass
class ContainerState:
    """What the kubelet knows of one container of a pod."""

    name: str
    restart_count: int = 0
    runs: int = 0
    spec_seen: str = ""
    current: Instance | None = None
    previous: Instance | None = None
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    ready: bool = False
    kill_reason: str = ""
    allocated: dict[str, Any] = field(default_factory=dict)
    restart_for: str = ""
    probe_failed: str = ""  # "livenessProbe" / "startupProbe" whose failure asks for a kill
    started: bool = False  # the startup probe passed (or there is none)
    frozen: dict[str, Any] | None = None
    """from a start until the PLEG's next relist saw it (and while its postStart hook runs): the container's
    status as the sync that started it found it"""
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    shown: Instance | None = None
    """the instance the status manager's status shows (`seen_started`): what the probe workers read"""
