"""A container's filesystem as each sandbox of `runtime.py` builds it from its image and mounts, and the
lookup of a command in it (runc's `exec.LookPath`, with runc's error messages).

bwrap and unshare build the root on a tmpfs: the host's userland read-only (`HOST_RO`, `HOST_LINKS`), the
image's provided paths, links and files read-only, then the volumes (`layout`); `container_path` finds the
host path behind a container path there. The oci sandbox mounts the image's layers (`rootfs.py`,
`image_layers`) with the volumes over them (`oci_binds`)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from .cri import ContainerLaunch, StartError
from .rootfs import ImageRoot, container_realpath, image_root, process_dir


def _host_base() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The host userland a `host_base` image gets: read-only binds (host path, container path) of /usr, /etc
    and the top-level /bin, /lib* and /sbin that are folders, and the (path, target) symlinks of the others
    (on merged-/usr systems they point into /usr)."""
    binds = [("/usr", "/usr"), ("/etc", "/etc")]
    links: list[tuple[str, str]] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = f"/{name}"
        if os.path.islink(p):
            links.append((p, os.readlink(p)))
        elif os.path.isdir(p):
            binds.append((p, p))
    return binds, links


HOST_BINDS, HOST_LINKS = _host_base()


def host_layers() -> tuple[list[str], list[tuple[str, str]]]:
    """A `host` image's userland for `rootfs.image_root`: the host folders used whole, and the top-level
    symlinks."""
    return [dst for _, dst in HOST_BINDS], list(HOST_LINKS)


HOST_RO = [(src, dst, True) for src, dst in HOST_BINDS]


def _place_links(
    links: list[tuple[str, str]], ro_dsts: list[str]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Split an image's symlinks into those the sandbox can create on its root tmpfs and, for those inside a
    read-only bound folder, host folders holding just those links, to bind over that folder (the image's
    folder then holds only its listed links). Returns (direct links, extra read-only binds)."""
    direct: list[tuple[str, str]] = []
    grouped: dict[str, list[tuple[str, str]]] = {}
    for path, target in links:
        parent = os.path.dirname(path.rstrip("/")) or "/"
        if parent != "/" and any(under(parent, d) for d in ro_dsts if d.strip("/")):
            grouped.setdefault(parent, []).append((os.path.basename(path.rstrip("/")), target))
        else:
            direct.append((path, target))
    binds: list[tuple[str, str]] = []
    for parent, items in sorted(grouped.items()):
        key = hashlib.sha256(repr(sorted(items)).encode()).hexdigest()[:16]
        folder = process_dir("kruise-local-links-") / key
        if not folder.exists():
            tmp = Path(tempfile.mkdtemp(dir=process_dir("kruise-local-links-")))
            for name, target in items:
                os.symlink(target, tmp / name)
            with contextlib.suppress(OSError):  # another container made it meanwhile
                os.rename(tmp, folder)
        binds.append((str(folder), parent))
    return direct, binds


_MAX_SYMLINKS = 40


def container_path(
    path: str, binds: list[tuple[str, str]], links: dict[str, str], hops: int = 0
) -> str | None:
    """The host path behind `path` in a container whose root is a tmpfs with `binds` (host, container) and
    `links` (container path -> target); "" for a folder of the root tmpfs itself; None if it does not exist.
    Symlinks inside the container's view are followed there, as the kernel does for the container."""
    if hops > _MAX_SYMLINKS:
        return None
    parts = [p for p in path.split("/") if p and p != "."]
    cur = ""
    for i, comp in enumerate(parts):
        if comp == "..":
            cur = cur.rsplit("/", 1)[0]
            continue
        cand = f"{cur}/{comp}"
        rest = "/".join(parts[i + 1 :])
        target = links.get(cand)
        host: str | None = None
        if target is None:
            best = _bind_for(cand, binds)
            if best is None:
                if any(under(d, cand) for _, d in binds) or any(under(p, cand) for p in links):
                    cur = cand  # a folder bwrap made on the root tmpfs for a mount point below it
                    continue
                return None
            src, dst = best
            if cand == dst.rstrip("/"):
                host = os.path.realpath(src)  # a bind mount follows its source's symlinks
            else:
                host = os.path.join(src, cand[len(dst.rstrip("/")) + 1 :])
                if os.path.islink(host):
                    target = os.readlink(host)
        if target is not None:
            nxt = target if target.startswith("/") else f"{cur}/{target}"
            return container_path(f"{nxt}/{rest}" if rest else nxt, binds, links, hops + 1)
        if host is None or not os.path.exists(host):
            return None
        cur = cand
    best = _bind_for(cur, binds) if cur else None
    if best is None:
        return ""
    src, dst = best
    return (
        os.path.realpath(src)
        if cur == dst.rstrip("/")
        else os.path.join(src, cur[len(dst.rstrip("/")) + 1 :])
    )


def _bind_for(path: str, binds: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The innermost bind (host, container) that `path` lies in, if any."""
    inside = [b for b in binds if b[1].strip("/") and under(path, b[1])]
    return max(inside, key=lambda b: len(b[1].rstrip("/")), default=None)


RUNC_PREFIX = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: "
)


RUNC_EXEC_PREFIX = "OCI runtime exec failed: exec failed: unable to start container process: "


def check_executable(
    argv0: str, path_env: str, resolve: Callable[[str], str | None], prefix: str = RUNC_PREFIX
) -> None:
    """Look `argv0` up in the container's filesystem as runc does before it execs it (Go's `exec.LookPath`
    with the container's PATH; `resolve` gives the host path behind a container path, "" for a folder of a
    sandbox's own root, None when missing); raise `StartError` with runc's message (`prefix`: create or
    exec) when it cannot be run."""

    def runnable(path: str) -> bool | None:
        host = resolve(path)
        if host is None:
            return None
        return bool(host) and os.path.isfile(host) and os.access(host, os.X_OK)

    if "/" in argv0:
        ok = runnable(argv0 if argv0.startswith("/") else "/" + argv0)
        if ok:
            return
        why = f"stat {argv0}: no such file or directory" if ok is None else "permission denied"
        raise StartError(f'{prefix}exec: "{argv0}": {why}: unknown')
    for folder in path_env.split(":"):
        if folder and runnable(f"{folder.rstrip('/')}/{argv0}"):
            return
    raise StartError(f'{prefix}exec: "{argv0}": executable file not found in $PATH: unknown')


def in_binds(binds: list[tuple[str, str]], links: dict[str, str]) -> Callable[[str], str | None]:
    """`container_path` in a bwrap or unshare sandbox of these binds and links, as a resolver."""
    return lambda path: container_path(path, binds, links)


def under(path: str, top: str) -> bool:
    top = top.rstrip("/")
    return path == top or path.startswith(top + "/") or top == ""


def layout(launch: ContainerLaunch) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """A container's filesystem: its binds (host, container, read-only) in mount order and its symlinks."""
    binds: list[tuple[str, str, bool]] = list(HOST_RO) if launch.host_base else []
    links = list(HOST_LINKS) if launch.host_base else []
    binds += [(p, p, True) for p in launch.host_paths]
    direct, link_binds = _place_links(launch.links, [d for _, d, _ in binds])
    links += direct
    binds += [(src, dst, True) for src, dst in link_binds]
    binds += [(host, path, True) for host, path in launch.files]  # after the folders they may lie in
    for m in sorted(launch.mounts, key=lambda m: m.container_path.rstrip("/").count("/")):
        binds.append((str(m.host_path), m.container_path, m.read_only))
    binds.append((str(launch.termination_host_path), launch.termination_message_path, False))
    return binds, links


def image_layers(launch: ContainerLaunch) -> ImageRoot:
    """The read-only layers of `launch`'s image (`rootfs.image_root`)."""
    host_dirs, host_links = host_layers() if launch.host_base else ([], [])
    files = [(host, path) for host, path in launch.files]
    return image_root(host_dirs, host_links, launch.host_paths, launch.links, files, launch.dirs)


def oci_binds(launch: ContainerLaunch, root: ImageRoot) -> list[tuple[str, str, bool]]:
    """The container's volumes and termination-message file as (host, mount point, read-only), in mount order
    (shallow first), each mount point with its symlinks followed in the container's view (runc's
    `FollowSymlinkInScope`), so that no mount lands outside the container's root."""
    mounts: list[tuple[str, tuple[str, ...]]] = list(root.mounts)
    binds: list[tuple[str, str, bool]] = []
    points = [(str(m.host_path), m.container_path, m.read_only) for m in launch.mounts]
    points.sort(key=lambda m: m[1].rstrip("/").count("/"))
    points.append((str(launch.termination_host_path), launch.termination_message_path, False))
    for src, dst, ro in points:
        point = container_realpath(dst, mounts)
        binds.append((src, point, ro))
        mounts.append((point, (src,)))
    return binds
