"""Containers left running by a local cluster or a test that has gone: found by the folder they mount.

A container's main process is pid 1 of a pid namespace of its own; if it outlives whatever started it (a
cluster killed mid-way, a sandbox whose parent-death signal a user switch cleared) it is reparented to init
and lives on with its namespace. Each such process still has a mount from the folder its volumes came from
(the cluster's root, a test's temporary folder): its mount table (`/proc/<pid>/mountinfo`) shows each bind's
source as the file system (`major:minor`) and the path within it, which `containers_using` matches exactly.
`reap` ends those a previous run left (orphans: their parent is init) before a cluster of the same root
starts (`LocalCluster.start`); `kruise_local.testing.leftover_containers` lists them for a session's check.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def _unescape(field: str) -> str:
    """A mountinfo path field (`\\040` for a space, octal escapes)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def _source_of(folder: str) -> tuple[str, str] | None:
    """(major:minor, path within that file system) of `folder`, as a bind of it shows in a mount table."""
    real = os.path.realpath(folder)
    best: tuple[str, str, str] | None = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            root, point, dev = _unescape(fields[3]), _unescape(fields[4]), fields[2]
            if (real == point or real.startswith(point.rstrip("/") + "/")) and (
                best is None or len(point) > len(best[0])
            ):
                best = (point, root, dev)
    if best is None:
        return None
    point, root, dev = best
    return dev, root.rstrip("/") + real[len(point.rstrip("/")) :] or "/"


def containers_using(folder: str | Path) -> dict[int, tuple[int, str]]:
    """Processes that are pid 1 of a pid namespace of their own and mount something from `folder`: pid ->
    (parent pid, the head of the command line)."""
    source = _source_of(str(folder))
    if source is None:
        return {}
    dev, path = source
    found: dict[int, tuple[int, str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, StopIteration, ValueError, IndexError):
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
            nspid = next(line for line in status if line.startswith("NSpid:")).split()[1:]
            if len(nspid) < 2 or nspid[-1] != "1":
                continue
            for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
                fields = line.split()
                root = _unescape(fields[3])
                if fields[2] == dev and (root == path or root.startswith(path.rstrip("/") + "/")):
                    ppid = int(next(x for x in status if x.startswith("PPid:")).split()[1])
                    cmd = repr(Path(f"/proc/{pid}/cmdline").read_bytes()[:60])
                    found[int(pid)] = (ppid, cmd)
                    break
    return found


def reap(folder: str | Path) -> list[int]:
    """Kill the containers a previous run left that mount from `folder` (orphans only: a container with a
    live runtime parent belongs to a cluster that still runs); returns their pids."""
    killed = []
    for pid, (ppid, _) in containers_using(folder).items():
        if ppid == 1:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed
