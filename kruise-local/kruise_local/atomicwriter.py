"""The kubelet's atomic writer for projected volume files (configMap, downwardAPI).

Reproduces `pkg/volume/util/atomic_writer.go` `AtomicWriter.Write`: the payload goes into a fresh timestamped
folder (`..2026_12_03_11_30_00.123456789`), a `..data_tmp` symlink to it is renamed over `..data` (one atomic
step), each user-visible top-level name is a symlink through `..data` (`key -> ..data/key`), and the previous
timestamped folder and names the payload no longer has are removed. A reader that opens a file sees either the
old or the new content in full, never a partial file. A payload whose files hold the same bytes under the same
paths writes nothing (`shouldWritePayload` compares contents, not modes: the fsGroup ownership change makes a
file's mode differ from its payload's). `set_perms` (the volume's `SetVolumeOwnership`, `volumes.py`) runs on
the whole volume once the new folder is written and before it is swapped in, as the writer's step (7) does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DATA = "..data"
DATA_TMP = "..data_tmp"


def _current(target: Path) -> dict[str, bytes] | None:
    """The files the volume holds now and their contents (None if it was never written by this writer)."""
    data = target / DATA
    if not data.is_symlink():
        return None
    out: dict[str, bytes] = {}
    root = target / os.readlink(data)
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _check_path(rel: str) -> None:
    """A payload path must stay inside the volume and not start with '..' (`validatePath`)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or ".." in parts or parts[0].startswith(".."):
        raise ValueError(f"invalid path {rel!r} in a projected volume payload")


def write_atomically(
    target: Path,
    payload: dict[str, tuple[bytes, int]],
    set_perms: Callable[[Path], None] | None = None,
) -> bool:
    """Make `target` hold exactly `payload` ({relative path: (content, mode)}); returns True if it wrote.
    `set_perms(target)` runs after the new files are written, before they are swapped in."""
    for rel in payload:
        _check_path(rel)
    target.mkdir(parents=True, exist_ok=True)
    old = _current(target)
    if old == {rel: content for rel, (content, _mode) in payload.items()}:
        return False
    old_dir = os.readlink(target / DATA) if (target / DATA).is_symlink() else None
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    ts_dir = Path(tempfile.mkdtemp(prefix=stamp, dir=target))
    ts_dir.chmod(0o755)
    for rel, (content, mode) in payload.items():
        path = ts_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        path.chmod(mode)
    if set_perms is not None:
        set_perms(target)
    tmp_link = target / DATA_TMP
    with contextlib.suppress(FileNotFoundError):
        tmp_link.unlink()
    os.symlink(ts_dir.name, tmp_link)
    os.rename(tmp_link, target / DATA)
    visible = {rel.split("/", 1)[0] for rel in payload}
    for name in visible:
        link = target / name
        if not link.is_symlink():
            if link.is_dir():
                shutil.rmtree(link)
            elif link.exists():
                link.unlink()
            os.symlink(f"{DATA}/{name}", link)
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            if entry.name == old_dir or (entry.name != ts_dir.name and entry.name not in (DATA, DATA_TMP)):
                shutil.rmtree(entry, ignore_errors=True)
        elif entry.name not in visible and entry.is_symlink():
            entry.unlink()
    return True
