"""A container's root filesystem in the `oci` sandbox: the image's read-only layers, and the paths in it.

An image is its own files (the catalogue's `files`, `links` and `dirs`, and the host files it `provides`)
and, for a `host` image or a provided folder, a host folder as a whole (the host's /usr, /etc ...). The first
are put once per process in a folder of this process, the image's *tree*; the host folders are used where
they are. A container's root is then overlayfs mounts, made by its init (`ociinit.py`) over a writable upper
folder of its own: `/` over the tree, and each host folder over itself (with the tree's part of it on top,
when the image has links or files in it). So the container sees one filesystem with the image's files, owners
and modes, which it may change as their modes allow, in its own layer; the host's files and the tree are never
written (overlayfs copies a file up before changing it). The one difference from a single overlay: a rename
between two of those folders (`mv /usr/x /root/`) copies (EXDEV), as between two mounts.

`host_path` finds the host file behind a container path in such a layout (the image's, or a running
container's through `/proc/<pid>/root`), following symlinks in the container's view, as runc's
`exec.LookPath` and the kernel see them."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

Mounts = Sequence[tuple[str, Sequence[str]]]
"""A container's filesystem as (container folder, host folders top first): the innermost mount holding a path
decides, and among its folders the first that has the name, as overlayfs looks a name up in its layers."""

MOUNT_POINTS = (("/proc", 0o555), ("/sys", 0o555), ("/dev", 0o755))
"""What runc mounts on in every container (made when an image lacks them)."""

_MAX_SYMLINKS = 40
_DIRS: dict[str, str] = {}


@dataclass(frozen=True)
class ImageRoot:
    """An image's read-only layers: its tree (the lowest layer of `/`) and the host folders overlaid at their
    own paths, each with the host folders under it top first, parents before children."""

    tree: str
    overlays: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def mounts(self) -> list[tuple[str, tuple[str, ...]]]:
        return [("/", (self.tree,)), *self.overlays]


def process_dir(prefix: str, mode: int = 0o700) -> Path:
    """A folder of this process named by `prefix`, made on first use and removed when the process exits."""
    if prefix not in _DIRS:
        _DIRS[prefix] = tempfile.mkdtemp(prefix=prefix)
        os.chmod(_DIRS[prefix], mode)
        atexit.register(shutil.rmtree, _DIRS[prefix], ignore_errors=True)
    return Path(_DIRS[prefix])


def image_root(
    host_dirs: Sequence[str],
    host_links: Sequence[tuple[str, str]],
    host_paths: Sequence[str],
    links: Sequence[tuple[str, str]],
    files: Sequence[tuple[str, str]],
    dirs: Sequence[tuple[str, int, int, int]],
) -> ImageRoot:
    """The layers of an image made of: host folders used whole at their own path (`host_dirs`, the host's
    userland of a `host` image), symlinks (`host_links`, `links`: (path, target)), host paths it provides
    (a folder is used whole, a file or symlink copied into the tree), its own files ((host copy, path) with
    the image's mode) and folders ((path, mode, uid, gid)). Built once per content in this process."""
    content = (host_dirs, host_links, host_paths, links, files, dirs)
    key = hashlib.sha256(repr(tuple(map(tuple, content))).encode()).hexdigest()[:24]
    tree = process_dir("kruise-local-images-") / key
    whole = [*host_dirs] + [p for p in host_paths if os.path.isdir(p) and not os.path.islink(p)]
    whole = sorted(set(whole), key=lambda p: (p.rstrip("/").count("/"), p))
    if not tree.exists():
        tmp = Path(tempfile.mkdtemp(dir=process_dir("kruise-local-images-")))
        os.chmod(tmp, 0o755)
        for path in whole:
            _folder(tmp, path)
        for path in host_paths:
            if path not in whole:
                _copy(path, tmp, path)
        for path, target in (*host_links, *links):
            _link(tmp, path, target)
        for source, path in files:
            _copy(source, tmp, path)
        for path, mode, uid, gid in dirs:
            _folder(tmp, path, (mode, uid, gid))
        for path, mode in MOUNT_POINTS:
            if not os.path.lexists(_at(tmp, path)):
                _folder(tmp, path, (mode, 0, 0))
        try:
            os.rename(tmp, tree)
        except OSError:  # built meanwhile by another container
            shutil.rmtree(tmp, ignore_errors=True)
    overlays = tuple(
        (path, (str(_at(tree, path)), path) if _has_entries(_at(tree, path)) else (path,)) for path in whole
    )
    return ImageRoot(str(tree), overlays)


def _has_entries(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return any(True for _ in entries)


def _at(tree: Path, path: str) -> Path:
    return tree / path.strip("/")


def _folder(tree: Path, path: str, attrs: tuple[int, int, int] | None = None) -> None:
    """Make `path` a folder in the tree and its missing parents: each with the host folder's owner and mode
    where the host has one (so the tree's part of a host folder looks like it), else root's 0755; `attrs`
    (mode, uid, gid) for the last."""
    parts = [p for p in path.split("/") if p]
    for i in range(1, len(parts) + 1):
        here = "/" + "/".join(parts[:i])
        at = _at(tree, here)
        last = i == len(parts)
        if os.path.lexists(at) and not (last and attrs):
            continue
        os.makedirs(at, exist_ok=True)
        if last and attrs:
            mode, uid, gid = attrs
        else:
            try:
                st = os.stat(here)
                mode, uid, gid = st.st_mode & 0o7777, st.st_uid, st.st_gid
            except OSError:
                mode, uid, gid = 0o755, 0, 0
        os.chown(at, uid, gid)
        os.chmod(at, mode)


def _parent(tree: Path, path: str) -> Path:
    _folder(tree, os.path.dirname(path.rstrip("/")) or "/")
    return _at(tree, path)


def _link(tree: Path, path: str, target: str) -> None:
    at = _parent(tree, path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(at)
    os.symlink(target, at)


def _copy(source: str, tree: Path, path: str) -> None:
    """A file (or symlink) of the host into the tree at `path`, with its owner and mode: hard-linked where the
    filesystem allows (overlayfs never writes a lower file), else copied."""
    at = _parent(tree, path)
    if os.path.islink(source):
        _link(tree, path, os.readlink(source))
        return
    with contextlib.suppress(FileNotFoundError):
        os.unlink(at)
    try:
        os.link(source, at)
    except OSError:
        shutil.copy2(source, at)
        st = os.stat(source)
        os.chown(at, st.st_uid, st.st_gid)
        os.chmod(at, st.st_mode & 0o7777)


def host_path(path: str, mounts: Mounts) -> str | None:
    """The host path behind container path `path` in a filesystem of `mounts`, symlinks followed in the
    container's view; None when it does not exist."""
    return _resolve(path, mounts)[1]


def container_realpath(path: str, mounts: Mounts) -> str:
    """`path` in the container's view with its symlinks followed (the part that exists; the rest as given)."""
    return _resolve(path, mounts)[0]


def _resolve(path: str, mounts: Mounts, hops: int = 0) -> tuple[str, str | None]:
    """(`path` with its symlinks followed in the container's view, the host path behind it or None when it
    does not exist: then the part that does not exist is kept as given)."""
    parts = [p for p in path.split("/") if p and p != "."]
    cur = ""
    for i, name in enumerate(parts):
        if name == "..":
            cur = cur.rsplit("/", 1)[0]
            continue
        here = f"{cur}/{name}"
        host = _lookup(here, mounts)
        if host is None:
            return "/".join([here, *parts[i + 1 :]]), None
        if os.path.islink(host):
            if hops >= _MAX_SYMLINKS:
                return "/".join([here, *parts[i + 1 :]]), None
            target = os.readlink(host)
            rest = "/".join(parts[i + 1 :])
            follow = target if target.startswith("/") else f"{cur}/{target}"
            return _resolve(f"{follow}/{rest}" if rest else follow, mounts, hops + 1)
        cur = here
    return cur or "/", _lookup(cur or "/", mounts)


def _lookup(path: str, mounts: Mounts) -> str | None:
    """The host path of `path` (no symlink in its parents) in the innermost mount that holds it."""
    inside = [(t, h) for t, h in mounts if path == t.rstrip("/") or path.startswith(t.rstrip("/") + "/")]
    if path == "/":
        inside = [(t, h) for t, h in mounts if t == "/"]
    if not inside:
        return None
    target, hosts = max(inside, key=lambda m: len(m[0].rstrip("/")))
    rest = path[len(target.rstrip("/")) :].lstrip("/")
    for host in hosts:
        candidate = os.path.join(host, rest) if rest else host
        if os.path.lexists(candidate):
            return candidate
    return None


def passwd_home(uid: int, passwd: str | None) -> str:
    """The home folder of `uid` in an image's `/etc/passwd` (host path; None: the image has none), else "/":
    what runc sets HOME to when the container's env has none (`init_linux.go` `setupUser`, default home
    "/")."""
    if passwd is None:
        return "/"
    try:
        lines = Path(passwd).read_text(errors="replace").splitlines()
    except OSError:
        return "/"
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 6 and fields[2] == str(uid):
            return fields[5] or "/"
    return "/"


def home_of(uid: int, resolve: Callable[[str], str | None]) -> str:
    """`passwd_home` of the image whose paths `resolve` finds on the host."""
    passwd = resolve("/etc/passwd")
    return passwd_home(uid, passwd if passwd and os.path.isfile(passwd) else None)
