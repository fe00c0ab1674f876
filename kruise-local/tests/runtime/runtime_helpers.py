"""What the runtime's tests share (tests/runtime/test_runtime*.py, test_crilog_follow.py): a container launch,
its log lines, whether a process lives, waits bounded against a hang. The `runtime` and `any_runtime`
fixtures are in this folder's conftest.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from kruise_local.cri import ContainerLaunch, Mount
from kruise_local.crilog import read_log
from kruise_local.processes import RunningContainer

ENDS = 60.0
"""Seconds a container is given to end once it was told to (or its command returns): a bound against a hang,
never a measure. On a loaded machine an unshare sandbox's set-up alone (a few dozen mounts) can take seconds
before the container's main process even exists."""


def make_launch(tmp_path: Path, argv: list[str], name: str = "c", **kw: object) -> ContainerLaunch:
    vol = tmp_path / "vol"
    vol.mkdir(exist_ok=True)
    return ContainerLaunch(
        container_id=name,
        argv=argv,
        env=kw.pop("env", {"GREETING": "hello"}),  # type: ignore[arg-type]
        mounts=kw.pop("mounts", [Mount(vol, "/scratch")]),  # type: ignore[arg-type]
        log_path=tmp_path / "logs" / f"{name}.log",
        termination_message_path="/dev/termination-log",
        termination_host_path=tmp_path / f"{name}.termination",
        **kw,  # type: ignore[arg-type]
    )


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def texts(c: RunningContainer) -> list[str]:
    return read_log(c.launch.log_path).decode().splitlines()


def alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


async def wait_for_log(c: RunningContainer, text: str, timeout: float = ENDS) -> None:
    deadline = time.monotonic() + timeout
    while text not in read_log(c.launch.log_path).decode():
        assert time.monotonic() < deadline, f"{text!r} never logged"
        await asyncio.sleep(0.01)


async def until(pred: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Wait until `pred()` is truthy; fail with `what` after `timeout` seconds (a bound, never a measure)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)
