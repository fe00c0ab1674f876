"""Process runtime of the local kubelet: runs "containers" as sandboxed local processes (asyncio).

Each container is one `bwrap` (bubblewrap) exec: a fresh tmpfs root holding the image's filesystem (either
the host's `/usr`, `/etc`, `/bin` and `/lib*`, read-only, or for a scratch-based image nothing but the
`host_paths` and `links` the image provides), a new `/proc`, a minimal `/dev`, a private `/tmp`, the volume
mounts and the termination-message file, in new mount and pid namespaces. The command is looked up in that
filesystem first: a missing or non-executable one fails the start as runc does (`StartError`). Layout inside
the pid namespace:

    pid 1  bwrap's reaper (excluded from RSS)      -- host: child of the `bwrap` process we spawned
    pid 2  the container's main process            -- receives `signal()`/`stop()` signals (SIGTERM etc.)
    ...    its descendants; all die with pid 2 (the namespace is torn down when the main process exits)

The fallback `sandbox="unshare"` (util-linux `unshare`, `--root` for the chroot) builds the same layout with a
tiny `sh` reaper as pid 1. `sandbox="none"` runs the command on the host in its own process group, with the
working dir set and NO mounts: the image's filesystem, volume paths and the termination-message path are not
available there.

Deviation from a real container: the main process is pid 2, not pid 1, so a signal it has no handler for gets
its default action (a real pid 1 ignores e.g. SIGTERM without a handler and waits for SIGKILL).

Network: each pod has a sandbox (`PodSandbox`, `ContainerRuntime.create_sandbox`), a small holder process in a
new network namespace whose loopback is up, as a CRI pod sandbox (the pause container) holds the pod's network
namespace. Every container of the pod joins that namespace (`nsenter --net=/proc/<holder>/ns/net` before
bwrap/unshare), so the containers of one pod reach each other on localhost, and pods are isolated from each
other and from the host: two pods can listen on one port. The namespace has nothing but `lo` (no route out, no
pod-to-pod traffic; the pod IP the kubelet reports is informative). The holder also runs the kubelet's
tcpSocket/httpGet probes from inside the namespace (`PodSandbox.probe_tcp`, `probe_http`). With
`sandbox="none"` the holder stays in the host's network namespace: pods share the host's network (and ports).

Containers are killed if the thread that started them exits (`--die-with-parent`): start them from a
long-lived event loop thread.

Logs go to `log_path` in the CRI format (`<RFC3339 ns> stdout|stderr F|P <text>`); `read_log` and
`follow_log` read them back the way the kubelet serves `pods/log`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import os
import shutil
import signal as _signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "ContainerLaunch",
    "ContainerRuntime",
    "Mount",
    "PodSandbox",
    "RunningContainer",
    "RuntimeUnavailable",
    "StartError",
    "follow_log",
    "read_log",
]

MAX_LOG_LINE = 16 * 1024  # containerd splits longer lines into P(artial) records
MAX_TERMINATION_MESSAGE = 4096  # kubelet reads at most this much of the termination-message file
FALLBACK_LOG_LINES = 80  # FallbackToLogsOnError: kubelet reads the last 80 lines ...
FALLBACK_LOG_BYTES = 2048  # ... limited to 2048 bytes
FOLLOW_READ_BYTES = 64 * 1024
"""A followed log is read this much at a time: the kubelet streams a log record by record (logs.go `ReadLogs`,
a bufio reader over the file), never the whole backlog at once."""
MEMORY_POLL_SECONDS = 0.1
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PIPE_DRAIN_SECONDS = 2.0
MAIN_PROCESS_WAIT_SECONDS = 10.0  # bound on the sandbox set-up (mounts) before the main process is forked
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class RuntimeUnavailable(RuntimeError):
    """No usable sandbox method on this machine (the message says how to fix it)."""


class StartError(RuntimeError):
    """The container's process could not be started (the message is the runtime's, as the kubelet shows it
    in `lastState.terminated.message` with reason StartError and exit code 128)."""


@dataclass
class Mount:
    """A host folder (or file) bound into the container."""

    host_path: Path
    container_path: str
    read_only: bool = False


@dataclass
class ContainerLaunch:
    """Everything the runtime needs to start one container."""

    container_id: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[Mount]
    log_path: Path
    termination_message_path: str
    termination_host_path: Path
    working_dir: str | None = None
    host_paths: list[str] = field(default_factory=list)  # bound read-only at the same path
    memory_limit_bytes: int | None = None
    host_base: bool = True  # the root starts from the host's userland; False: empty (scratch)
    links: list[tuple[str, str]] = field(default_factory=list)  # (path, target) symlinks of the image
    pod_sandbox: PodSandbox | None = None  # the pod's network namespace to join (None: the runtime's own)


# ----------------------------------------------------------------------------------------------------
# /proc helpers


def _children(pid: int) -> list[int]:
    """Direct children of `pid` (all its threads), via /proc/<pid>/task/*/children or a /proc scan."""
    if _HAS_PROC_CHILDREN:
        out: list[int] = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                pass
        return out
    return [p for p, pp in _ppid_table().items() if pp == pid]


def _ppid_table() -> dict[int, int]:
    table: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        table[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return table


_HAS_PROC_CHILDREN = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _descendants(pid: int) -> list[int]:
    """All descendants of `pid` (not `pid` itself)."""
    out: list[int] = []
    todo = _children(pid)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def _ns_pid(pid: int) -> int | None:
    """The pid of `pid` inside its innermost pid namespace (last field of `NSpid`)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _exit_code(returncode: int) -> int:
    """Kubelet convention: killed by signal N -> 128+N."""
    return 128 - returncode if returncode < 0 else returncode


# ----------------------------------------------------------------------------------------------------
# CRI log format

_ts_cache: tuple[int, str] = (-1, "")


def _now_ts() -> bytes:
    """Current UTC time as `2026-12-02T18:20:01.123456789Z` (fixed nanosecond width, as containerd writes)."""
    global _ts_cache
    ns = time.time_ns()
    sec, frac = divmod(ns, 1_000_000_000)
    if _ts_cache[0] != sec:
        _ts_cache = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{_ts_cache[1]}.{frac:09d}Z".encode()


class _CriLogWriter:
    """Appends stdout/stderr chunks to a CRI log file, one record per line, as they arrive."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self._partial: dict[int, bytes] = {1: b"", 2: b""}

    @staticmethod
    def _records(out: list[bytes], ts: bytes, stream: bytes, line: bytes) -> None:
        while len(line) > MAX_LOG_LINE:
            out.append(b"%s %s P %s\n" % (ts, stream, line[:MAX_LOG_LINE]))
            line = line[MAX_LOG_LINE:]
        out.append(b"%s %s F %s\n" % (ts, stream, line))

    def feed(self, fd: int, data: bytes) -> None:
        stream = b"stdout" if fd == 1 else b"stderr"
        buf = self._partial.get(fd, b"") + data
        out: list[bytes] = []
        ts = _now_ts()
        start = 0
        while (nl := buf.find(b"\n", start)) != -1:
            self._records(out, ts, stream, buf[start:nl])
            start = nl + 1
        rest = buf[start:]
        while len(rest) > MAX_LOG_LINE:
            out.append(b"%s %s P %s\n" % (ts, stream, rest[:MAX_LOG_LINE]))
            rest = rest[MAX_LOG_LINE:]
        self._partial[fd] = rest
        if out:
            self._write(b"".join(out))

    def flush(self, fd: int) -> None:
        """End of a stream: an unterminated last line becomes a full record (as containerd does at EOF)."""
        rest = self._partial.get(fd, b"")
        self._partial[fd] = b""
        if rest:
            out: list[bytes] = []
            self._records(out, _now_ts(), b"stdout" if fd == 1 else b"stderr", rest)
            self._write(b"".join(out))

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            return
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def close(self) -> None:
        for fd in (1, 2):
            self.flush(fd)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _fixed_ts(dt: datetime) -> bytes:
    """`dt` in the fixed-width log timestamp format (naive datetimes are taken as UTC)."""
    dt = dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f000Z").encode()


def _rfc3339nano(ts: bytes) -> bytes:
    """Go's RFC3339Nano rendering (trailing zeros of the fraction dropped) of a fixed-width timestamp."""
    head, _, frac = ts[:-1].partition(b".")
    frac = frac.rstrip(b"0")
    return head + (b"." + frac if frac else b"") + b"Z"


def _format_record(line: bytes, since: bytes | None, timestamps: bool) -> bytes | None:
    """One CRI record (without its newline) -> the bytes `pods/log` returns for it, or None to skip it."""
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    ts, _stream, tag = parts[0], parts[1], parts[2]
    text = parts[3] if len(parts) == 4 else b""
    if since is not None and ts < since:
        return None
    if not tag.startswith(b"P"):
        text += b"\n"
    return _rfc3339nano(ts) + b" " + text if timestamps else text


def _tail_offset(f: BinaryIO, size: int, n: int) -> int:
    """Offset where the last `n` lines of an open file of length `size` start (the kubelet's tail logic)."""
    if n < 0:
        return 0
    block = 64 * 1024
    pos = size
    count = 0
    while pos > 0:
        start = max(0, pos - block)
        f.seek(start)
        chunk = f.read(pos - start)
        idx = len(chunk)
        while (idx := chunk.rfind(b"\n", 0, idx)) != -1:
            count += 1
            if count == n + 1:  # the (n+1)-th newline from the end precedes the last n lines
                return start + idx + 1
        pos = start
    return 0


def read_log(
    path: Path | str,
    *,
    since_time: datetime | None = None,
    timestamps: bool = False,
    tail_lines: int | None = None,
    limit_bytes: int | None = None,
) -> bytes:
    """The container log as `pods/log` returns it (no follow). Missing file -> b"".

    As the kubelet: `tail_lines` picks the last N records first, then `since_time` drops older records;
    `limit_bytes` cuts the output (even mid-line); `timestamps` prefixes each record with its RFC3339Nano
    time.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return b""
    with f:
        size = os.fstat(f.fileno()).st_size
        offset = _tail_offset(f, size, tail_lines) if tail_lines is not None else 0
        f.seek(offset)
        data = f.read(size - offset)
    since = _fixed_ts(since_time) if since_time is not None else None
    out: list[bytes] = []
    total = 0
    lines = data.split(b"\n")
    for line in lines[:-1]:  # the last element is an incomplete line (or empty)
        rec = _format_record(line, since, timestamps)
        if rec is None:
            continue
        out.append(rec)
        total += len(rec)
        if limit_bytes is not None and total >= limit_bytes:
            break
    result = b"".join(out)
    return result[:limit_bytes] if limit_bytes is not None else result


async def follow_log(
    path: Path | str,
    *,
    since_time: datetime | None = None,
    timestamps: bool = False,
    tail_lines: int | None = None,
    is_running: Callable[[], bool],
    poll: float = 0.05,
) -> AsyncIterator[bytes]:
    """Yield the log's matching records, then new ones as they are appended; end once `is_running()` is false
    and the file is drained."""
    since = _fixed_ts(since_time) if since_time is not None else None
    while True:
        try:
            f = open(path, "rb")
            break
        except FileNotFoundError:
            if not is_running():
                return
            await asyncio.sleep(poll)
    with f:
        if tail_lines is not None:
            f.seek(_tail_offset(f, os.fstat(f.fileno()).st_size, tail_lines))
        buf = b""
        while True:
            running = is_running()
            chunk = f.read(FOLLOW_READ_BYTES)
            if chunk:
                buf += chunk
                nl = buf.rfind(b"\n")
                if nl == -1:
                    continue
                complete, buf = buf[:nl], buf[nl + 1 :]
                out = [r for line in complete.split(b"\n") if (r := _format_record(line, since, timestamps))]
                if out:
                    yield b"".join(out)
                continue
            if not running:
                return
            await asyncio.sleep(poll)


# ----------------------------------------------------------------------------------------------------
# Sandboxes


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


_HOST_BINDS, _HOST_LINKS = _host_base()
_HOST_RO = [(src, dst, True) for src, dst in _HOST_BINDS]
_LINK_DIRS: list[str] = []


def _link_dir() -> Path:
    """A private host folder for the link folders `_place_links` builds (one per process)."""
    if not _LINK_DIRS:
        _LINK_DIRS.append(tempfile.mkdtemp(prefix="kruise-local-links-"))
        atexit.register(lambda: shutil.rmtree(_LINK_DIRS[0], ignore_errors=True))
    return Path(_LINK_DIRS[0])


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
        if parent != "/" and any(_under(parent, d) for d in ro_dsts if d.strip("/")):
            grouped.setdefault(parent, []).append((os.path.basename(path.rstrip("/")), target))
        else:
            direct.append((path, target))
    binds: list[tuple[str, str]] = []
    for parent, items in sorted(grouped.items()):
        key = hashlib.sha256(repr(sorted(items)).encode()).hexdigest()[:16]
        folder = _link_dir() / key
        if not folder.exists():
            tmp = Path(tempfile.mkdtemp(dir=_link_dir()))
            for name, target in items:
                os.symlink(target, tmp / name)
            with contextlib.suppress(OSError):  # another container made it meanwhile
                os.rename(tmp, folder)
        binds.append((str(folder), parent))
    return direct, binds


_MAX_SYMLINKS = 40


def _container_path(
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
                if any(_under(d, cand) for _, d in binds) or any(_under(p, cand) for p in links):
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
            return _container_path(f"{nxt}/{rest}" if rest else nxt, binds, links, hops + 1)
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
    inside = [b for b in binds if b[1].strip("/") and _under(path, b[1])]
    return max(inside, key=lambda b: len(b[1].rstrip("/")), default=None)


_RUNC_PREFIX = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create "
    "failed: unable to start container process: "
)


def _check_executable(argv0: str, path_env: str, binds: list[tuple[str, str]], links: dict[str, str]) -> None:
    """Look `argv0` up in the container's filesystem as runc does before it execs it (Go's `exec.LookPath`
    with the container's PATH); raise `StartError` with runc's message when it cannot be run."""

    def runnable(path: str) -> bool | None:
        host = _container_path(path, binds, links)
        if host is None:
            return None
        return bool(host) and os.path.isfile(host) and os.access(host, os.X_OK)

    if "/" in argv0:
        ok = runnable(argv0 if argv0.startswith("/") else "/" + argv0)
        if ok:
            return
        why = f"stat {argv0}: no such file or directory" if ok is None else "permission denied"
        raise StartError(f'{_RUNC_PREFIX}exec: "{argv0}": {why}: unknown')
    for folder in path_env.split(":"):
        if folder and runnable(f"{folder.rstrip('/')}/{argv0}"):
            return
    raise StartError(f'{_RUNC_PREFIX}exec: "{argv0}": executable file not found in $PATH: unknown')


# The unshare fallback. Outer `unshare --mount` runs this script: build the root on a private tmpfs, then
# exec an inner `unshare --pid --fork --mount-proc` whose child (pid 1, a reaper `sh`) forks the chroot'ed
# command as pid 2 and exits with its status (which tears the namespace down).
_UNSHARE_SCRIPT = r"""
set -e
cpath=$PATH; base=$1; wd=$2; unshare_bin=$3; shift 3
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t tmpfs -o mode=0755 none "$base"
r=$base/root
mkdir -p "$r/proc" "$r/dev" "$r/tmp" "$r/root"
mount -t tmpfs -o mode=1777 none "$r/tmp"
mount -t tmpfs -o mode=0755 none "$r/dev"
for n in null zero full random urandom tty; do touch "$r/dev/$n"; mount --bind "/dev/$n" "$r/dev/$n"; done
mkdir -p "$r/dev/shm" "$r/dev/pts"; mount -t tmpfs -o mode=1777 none "$r/dev/shm"
ln -s /proc/self/fd "$r/dev/fd"; ln -s /proc/self/fd/0 "$r/dev/stdin"
ln -s /proc/self/fd/1 "$r/dev/stdout"; ln -s /proc/self/fd/2 "$r/dev/stderr"
while [ "$1" != "--" ]; do
  kind=$1; src=$2; dst=$r$3; shift 3
  if [ "$kind" = ln ]; then mkdir -p "$(dirname "$dst")"; ln -s "$src" "$dst"; continue; fi
  if [ -d "$src" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")"; [ -e "$dst" ] || touch "$dst"; fi
  mount --rbind "$src" "$dst"
  if [ "$kind" = ro ]; then mount -o remount,bind,ro "$dst"; fi
done
shift
[ -d "$r$wd" ] || mkdir -p "$r$wd" 2>/dev/null || true
export PATH="$cpath"
exec "$unshare_bin" --pid --fork --kill-child --mount-proc="$r/proc" -- /bin/sh -c '"$@" & wait $!' sh "$@"
"""


def _probe(cmd: list[str]) -> str | None:
    """Run a sandbox smoke test; None if it works, else its error output."""
    try:
        res = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if res.returncode == 0:
        return None
    return (res.stderr or res.stdout).decode(errors="replace").strip() or f"exit code {res.returncode}"


_probe_cache: dict[str, str | None] = {}
_base_dir: list[str] = []


def _default_signals_prefix(env: str | None) -> list[str]:
    """`env --default-signal --` (coreutils >= 8.31) where it works, else nothing.

    A container runtime starts a container's process with every signal at its default action. A process
    inherits *ignored* signals across exec, and a shell started in the background (`kruise-local up &`, CI
    scripts) ignores SIGINT and SIGQUIT, which a POSIX shell then cannot even trap. The prefix resets them
    before the container's command runs; it execs the command, so the main process keeps its pid.
    """
    if env is None:
        return []
    if "default_signals" not in _probe_cache:
        _probe_cache["default_signals"] = _probe([env, "--default-signal", "--", "true"])
    return [env, "--default-signal", "--"] if _probe_cache["default_signals"] is None else []


def _unshare_base_dir() -> str:
    """An empty host dir the unshare sandbox mounts its private root tmpfs on (one per process)."""
    if not _base_dir:
        _base_dir.append(tempfile.mkdtemp(prefix="kruise-local-root-"))
        atexit.register(lambda: shutil.rmtree(_base_dir[0], ignore_errors=True))
    return _base_dir[0]


def _under(path: str, top: str) -> bool:
    top = top.rstrip("/")
    return path == top or path.startswith(top + "/") or top == ""


# The pod sandbox's holder process (`python -I -S -c`): brings `lo` up in its new network namespace (argv[1]
# "lo"; SIOCGIFFLAGS/SIOCSIFFLAGS, as `ip link set lo up`), says "ready", then runs the probes the runtime
# sends it, one JSON line each, from inside the namespace, and answers one JSON line each. It exits at EOF on
# stdin (the runtime closed the sandbox or died).
_HOLDER_SCRIPT = r"""
import fcntl, json, socket, struct, sys, threading
if sys.argv[1] == "lo":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
    s.close()
lock = threading.Lock()
def reply(rid, ok, msg):
    with lock:
        sys.stdout.write(json.dumps([rid, ok, msg]) + "\n")
        sys.stdout.flush()
def tcp(host, port, timeout):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True, ""
    except OSError as e:
        return False, f"dial tcp {host}:{port}: connect: {str(e.strerror or e).lower()}"
def http_get(host, port, timeout, path, scheme, headers):
    import http.client, ssl  # only when needed: the holder of a pod without HTTP probes stays small
    from urllib.parse import urlsplit
    url = f"{scheme.lower()}://{host}:{port}{path}"
    for _ in range(11):
        u = urlsplit(url)
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout,
                                               context=ssl._create_unverified_context())
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        try:
            target = (u.path or "/") + ("?" + u.query if u.query else "")
            conn.putrequest("GET", target, skip_host="Host" in headers, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            res = conn.getresponse()
            body = res.read(10 * 1024).decode(errors="replace")
        except OSError as e:
            why = str(e.strerror or e).lower()
            return False, f'Get "{url}": dial tcp {u.hostname}:{u.port}: connect: {why}'
        except http.client.HTTPException as e:
            return False, f'Get "{url}": {type(e).__name__}: {e}'
        finally:
            conn.close()
        loc = res.getheader("Location")
        if res.status in (301, 302, 303, 307, 308) and loc:
            nxt = urlsplit(loc)
            if nxt.hostname in (None, u.hostname):
                url = f"{nxt.scheme or u.scheme}://{u.hostname}:{nxt.port or u.port}{nxt.path or '/'}"
                url += "?" + nxt.query if nxt.query else ""
                continue
        if 200 <= res.status < 400:
            return True, body if res.status < 300 else f"Probe terminated redirects, Response body: {body}"
        return False, f"HTTP probe failed with statuscode: {res.status}"
    return False, f'Get "{url}": stopped after 10 redirects'
def run(req):
    rid, kind, host, port, timeout = req[:5]
    try:
        ok, msg = tcp(host, port, timeout) if kind == "tcp" else http_get(host, port, timeout, *req[5:])
    except Exception as e:
        ok, msg = False, f"{type(e).__name__}: {e}"
    reply(rid, ok, msg)
print("ready", flush=True)
for line in sys.stdin:
    threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()
"""
SANDBOX_WAIT_SECONDS = 20.0


class PodSandbox:
    """A pod's network namespace, held by a small process for the pod's lifetime (the CRI pod sandbox):
    every container of the pod joins it, and probes connect from inside it."""

    def __init__(self, proc: asyncio.subprocess.Process, isolated: bool) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.isolated = isolated  # False: the host's network namespace (sandbox="none")
        self._next = 0
        self._waiting: dict[int, asyncio.Future[tuple[bool, str]]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def net_ns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    def other_userns(self) -> bool:
        """Whether the namespace belongs to a user namespace other than ours (a rootless sandbox)."""
        try:
            return os.stat(f"/proc/{self.pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino
        except OSError:
            return False

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            with contextlib.suppress(ValueError, TypeError):
                rid, ok, msg = json.loads(line)
                fut = self._waiting.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result((bool(ok), str(msg)))
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result((False, "pod sandbox is gone"))
        self._waiting.clear()

    async def _ask(self, request: list[object], timeout: float) -> tuple[bool, str]:
        if self._proc.returncode is not None or self._proc.stdin is None or self._reader.done():
            return False, "pod sandbox is gone"
        self._next += 1
        rid = self._next
        fut: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            self._proc.stdin.write(json.dumps([rid, *request]).encode() + b"\n")
            await self._proc.stdin.drain()
            return await asyncio.wait_for(fut, timeout + 5.0)  # the holder enforces `timeout` itself
        except (OSError, TimeoutError):
            return False, f"probe timed out after {timeout}s"
        finally:
            self._waiting.pop(rid, None)

    async def probe_tcp(self, port: int, timeout: float, host: str = "127.0.0.1") -> tuple[bool, str]:
        """A tcpSocket probe from inside the namespace (`pkg/probe/tcp/tcp.go` `DoTCPProbe`: success iff a
        connection opens within `timeout`). Returns (success, message)."""
        return await self._ask(["tcp", host, port, timeout], timeout)

    async def probe_http(
        self,
        port: int,
        path: str,
        timeout: float,
        *,
        scheme: str = "HTTP",
        headers: dict[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> tuple[bool, str]:
        """An httpGet probe from inside the namespace (`pkg/probe/http/http.go` `DoHTTPProbe`): GET, redirects
        to the same host followed (at most 10), at most 10 KiB of body read; status 200-399 passes (a 3xx
        left unfollowed passes with "Probe terminated redirects"), anything else or no answer fails.
        Certificates are not verified (the kubelet's InsecureSkipVerify). Returns (success, message)."""
        return await self._ask(["http", host, port, timeout, path or "/", scheme, headers or {}], timeout)

    async def close(self) -> None:
        """Kill the holder; the namespace goes once the last container in it has exited."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        await self._proc.wait()
        self._reader.cancel()


class ContainerRuntime:
    """Starts containers as sandboxed local processes.

    `sandbox`: "bwrap" (bubblewrap), "unshare" (util-linux unshare), "none" (host, no mounts) or
    "auto" (bwrap, then unshare). Raises `RuntimeUnavailable` when the requested method does not work here.
    """

    def __init__(self, sandbox: str = "auto") -> None:
        if sandbox not in ("auto", "bwrap", "unshare", "none"):
            raise ValueError(f"sandbox must be auto, bwrap, unshare or none, not {sandbox!r}")
        self._bwrap = shutil.which("bwrap")
        self._unshare = shutil.which("unshare")
        self._setpriv = shutil.which("setpriv")
        self._nsenter = shutil.which("nsenter")
        self._env = shutil.which("env")
        self._root = os.geteuid() == 0
        self._default_signals = _default_signals_prefix(self._env)
        if sandbox == "none":
            self.sandbox = "none"
            return
        errors: list[str] = []
        for kind in ("bwrap", "unshare") if sandbox == "auto" else (sandbox,):
            err = self._check(kind)
            if err is None:
                self.sandbox = kind
                return
            errors.append(f"{kind}: {err}")
        raise RuntimeUnavailable(
            "no way to run local containers in their own mount and pid namespaces on this machine ("
            + "; ".join(errors)
            + "). Fix: install bubblewrap (`apt-get install bubblewrap`, it provides `bwrap`), and when not "
            "running as root make sure unprivileged user namespaces are enabled "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0; on Ubuntu 24.04+ "
            "also kernel.apparmor_restrict_unprivileged_userns=0). Or pass sandbox='none' to run containers "
            "directly on the host without volume mounts."
        )

    def _check(self, kind: str) -> str | None:
        if kind in _probe_cache:
            return _probe_cache[kind]
        if kind == "bwrap":
            if not self._bwrap:
                err: str | None = "`bwrap` not found"
            else:
                err = _probe(self._bwrap_cmd(_HOST_RO, None, ["true"], _HOST_LINKS))
        else:
            err = (
                "unshare not found"
                if not self._unshare
                else _probe(self._unshare_cmd(_HOST_RO, None, ["true"], _HOST_LINKS))
            )
        _probe_cache[kind] = err
        return err

    # -- command lines --

    def _bwrap_cmd(
        self,
        binds: list[tuple[str, str, bool]],
        wd: str | None,
        argv: list[str],
        links: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> list[str]:
        cmd = [*self._default_signals, self._bwrap or "bwrap"]
        for path, target in links:
            cmd += ["--symlink", target, path]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/root"]
        for src, dst, ro in binds:
            cmd += ["--ro-bind" if ro else "--bind", src, dst]
        wd = wd or "/"
        if not any(_under(wd, p) for p in ("/proc", "/dev", *(d for _, d, _ in binds if d.strip("/")))):
            cmd += ["--dir", wd]  # a missing working dir on the root tmpfs is created, as runc does
        cmd += ["--chdir", wd, "--die-with-parent", "--unshare-pid", "--", *argv]
        return cmd

    def _unshare_cmd(
        self,
        binds: list[tuple[str, str, bool]],
        wd: str | None,
        argv: list[str],
        links: list[tuple[str, str]] = (),  # type: ignore[assignment]
    ) -> list[str]:
        cmd: list[str] = []
        if self._setpriv:
            cmd += [self._setpriv, "--pdeathsig", "KILL"]
        cmd += [self._unshare or "unshare", "--mount", "--propagation", "private"]
        if not self._root:
            cmd += ["--user", "--map-root-user"]
        base = _unshare_base_dir()
        cmd += ["--", "/bin/sh", "-c", _UNSHARE_SCRIPT, "sh", base, wd or "/", self._unshare or "unshare"]
        for path, target in links:
            cmd += ["ln", target, path]
        for src, dst, ro in binds:
            cmd += ["ro" if ro else "rw", src, dst]
        # the reaper runs the command in the background, which ignores SIGINT/SIGQUIT: reset them (on the
        # host side, so that the image needs no `env`), then enter the root
        unshare = self._unshare or "unshare"
        inner = [unshare, f"--root={base}/root", f"--wd={wd or '/'}", "--", *argv]
        return [*cmd, "--", *self._default_signals, *inner]

    # -- API --

    async def create_sandbox(self, host_network: bool = False) -> PodSandbox:
        """Start a pod sandbox: a new network namespace with `lo` up (`unshare --net`, plus `--user
        --map-root-user` when not root), or the host's network with `host_network` or `sandbox="none"`."""
        argv = [sys.executable, "-I", "-S", "-c", _HOLDER_SCRIPT]
        isolated = self.sandbox != "none" and not host_network
        if isolated:
            if not self._unshare or not self._nsenter:
                raise RuntimeUnavailable(
                    "util-linux `unshare` and `nsenter` are needed for pod network namespaces"
                )
            prefix = (
                [self._unshare, "--net"]
                if self._root
                else [self._unshare, "--user", "--map-root-user", "--net"]
            )
            argv = [*prefix, "--", *argv, "lo"]
        else:
            argv.append("host")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert proc.stdout is not None and proc.stderr is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), SANDBOX_WAIT_SECONDS)
        except TimeoutError:
            line = b""
        except asyncio.CancelledError:  # the pod went away meanwhile: leave no holder behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise
        if line.strip() != b"ready":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            err = (await proc.stderr.read()).decode(errors="replace").strip()
            await proc.wait()
            raise RuntimeUnavailable(f"could not create the pod's network namespace: {err or 'no answer'}")
        return PodSandbox(proc, isolated)

    def _join(self, sandbox: PodSandbox | None) -> list[str]:
        """The `nsenter` prefix that puts a container into its pod's network namespace."""
        if sandbox is None or not sandbox.isolated or self.sandbox == "none":
            return []
        assert self._nsenter
        cmd = [self._nsenter, f"--net={sandbox.net_ns}"]
        if sandbox.other_userns():
            cmd[1:1] = [f"--user=/proc/{sandbox.pid}/ns/user", "--preserve-credentials"]
        return [*cmd, "--"]

    async def start(self, launch: ContainerLaunch) -> RunningContainer:
        """Start the container; returns once its process is spawned (output is logged as it arrives)."""
        if not launch.argv:
            raise ValueError("empty argv")
        launch.termination_host_path.parent.mkdir(parents=True, exist_ok=True)
        launch.termination_host_path.write_bytes(b"")
        env = dict(launch.env)
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("HOME", "/root")
        wd = launch.working_dir or "/"
        binds: list[tuple[str, str, bool]] = list(_HOST_RO) if launch.host_base else []
        links = list(_HOST_LINKS) if launch.host_base else []
        binds += [(p, p, True) for p in launch.host_paths]
        direct, link_binds = _place_links(launch.links, [d for _, d, _ in binds])
        links += direct
        binds += [(src, dst, True) for src, dst in link_binds]
        for m in sorted(launch.mounts, key=lambda m: m.container_path.rstrip("/").count("/")):
            binds.append((str(m.host_path), m.container_path, m.read_only))
        binds.append((str(launch.termination_host_path), launch.termination_message_path, False))
        cwd: str | None = None
        if self.sandbox == "none":
            if shutil.which(launch.argv[0], path=env["PATH"]) is None:
                _check_executable(launch.argv[0], env["PATH"], [("/", "/")], {})
            cmd = [*self._default_signals, *launch.argv]
            cwd = wd if os.path.isdir(wd) else None
        else:
            _check_executable(launch.argv[0], env["PATH"], [(s, d) for s, d, _ in binds], dict(links))
            self._ensure_workdir(wd, launch)
            if self.sandbox == "bwrap":
                cmd = self._bwrap_cmd(binds, wd, launch.argv, links)
            else:
                cmd = self._unshare_cmd(binds, wd, launch.argv, links)
            cmd = [*self._join(launch.pod_sandbox), *cmd]
        container = RunningContainer(self, launch, env, cwd)
        await container._spawn(cmd)
        return container

    @staticmethod
    def _ensure_workdir(wd: str, launch: ContainerLaunch) -> None:
        """Like runc, create a missing working dir; on the host side when it lies in a writable volume."""
        for m in sorted(launch.mounts, key=lambda m: -m.container_path.rstrip("/").count("/")):
            cp = m.container_path.rstrip("/") or "/"
            if not m.read_only and (wd == cp or wd.startswith(cp + "/")):
                with contextlib.suppress(OSError):
                    (Path(m.host_path) / wd[len(cp) :].lstrip("/")).mkdir(parents=True, exist_ok=True)
                return

    async def exec(
        self, target: RunningContainer, argv: list[str], timeout: float, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Run `argv` inside `target`'s namespaces (root, cwd, pid, network); returns (exit code, output).

        `env` is added to the container's environment. On timeout the command's process group is killed and
        (-1, "timeout") returned; (-1, "container is not running") when the target has no live process.
        """
        full_env = dict(target._env)
        full_env.update(env or {})
        cwd: str | None = None
        if target._sandbox == "none":
            if target.finished_at is not None:
                return -1, "container is not running"
            cmd = list(argv)
            cwd = target._cwd
        else:
            if not self._nsenter:
                raise RuntimeUnavailable("`nsenter` (util-linux) is needed to exec into local containers")
            pid = target._main_pid()
            if pid is None or target.finished_at is not None:
                return -1, "container is not running"
            cmd = [self._nsenter, "-t", str(pid)]
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
                    cmd += ["-U", "--preserve-credentials"]
            cmd += ["-m", "-n", "-p", "-r", "-w", "--", *argv]  # -n: the pod's network namespace
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as e:
            return 127, f"exec failed: {e}"
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except (TimeoutError, asyncio.CancelledError) as e:
            await asyncio.shield(_kill_exec(proc, nsenter=target._sandbox != "none"))
            if isinstance(e, asyncio.CancelledError):
                raise
            return -1, "timeout"
        return _exit_code(proc.returncode or 0), out.decode(errors="replace")


async def _kill_exec(proc: asyncio.subprocess.Process, nsenter: bool) -> None:
    """Kill an exec'd command's process tree.

    nsenter's children first, so that nsenter (outside the container's pid namespace) reaps them: an orphan of
    nsenter would be reparented to the host's init and, until that reaps it, block the container's teardown.
    """
    if nsenter:
        for pid in _descendants(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, _signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 1.0)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, _signal.SIGKILL)
    await proc.wait()


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(self, writer: _CriLogWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.writer = writer
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.writer.feed(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self.writer.flush(fd)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class RunningContainer:
    """A started container. `wait()` may be awaited any number of times, concurrently."""

    def __init__(
        self, runtime: ContainerRuntime, launch: ContainerLaunch, env: dict[str, str], cwd: str | None
    ):
        self.container_id = launch.container_id
        self.pid = 0  # host pid of the process the runtime spawned (bwrap / unshare / the command)
        self.started_at = datetime.now(UTC)
        self.finished_at: datetime | None = None
        self.exit_code: int | None = None
        self.oom_killed = False
        self.launch = launch
        self._runtime = runtime
        self._sandbox = runtime.sandbox
        self._env = env
        self._cwd = cwd
        self._init: int | None = None
        self._main: int | None = None
        self._transport: asyncio.SubprocessTransport | None = None
        self._done: asyncio.Task[int] | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._memory_limit = launch.memory_limit_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[None]] = set()

    async def _spawn(self, cmd: list[str]) -> None:
        loop = asyncio.get_running_loop()
        writer = _CriLogWriter(self.launch.log_path)
        try:
            transport, proto = await loop.subprocess_exec(
                lambda: _Protocol(writer, loop),
                *cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        except BaseException:
            writer.close()
            raise
        self.started_at = datetime.now(UTC)
        self._transport = transport
        self.pid = transport.get_pid()
        if self._sandbox == "none":
            self._init = self._main = self.pid
        self._loop = loop
        self._done = loop.create_task(self._run(transport, proto, writer))
        self._ensure_monitor()
        if self._sandbox != "none":
            await self._await_main()

    async def _run(
        self, transport: asyncio.SubprocessTransport, proto: _Protocol, writer: _CriLogWriter
    ) -> int:
        try:
            await proto.exited
            code = _exit_code(transport.get_returncode() or 0)
            exited_at = datetime.now(UTC)
            if self._sandbox == "none":  # emulate the namespace teardown for leftover group members
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, _signal.SIGKILL)
            try:
                await asyncio.wait_for(asyncio.shield(proto.closed), _PIPE_DRAIN_SECONDS)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, _signal.SIGKILL)
            if self.oom_killed:
                code = 137
            # set only now that all output is in the log: a follower may stop once `running` is false
            self.exit_code, self.finished_at = code, exited_at
            return code
        finally:
            if self.finished_at is None:
                self.finished_at = datetime.now(UTC)
            if self._monitor is not None:
                self._monitor.cancel()
            for t in list(self._pending):
                t.cancel()
            writer.close()
            transport.close()

    # -- process discovery --

    def _init_pid(self) -> int | None:
        """Host pid of pid 1 of the container's pid namespace (bwrap's / our reaper)."""
        if self._init is None and self.finished_at is None:
            for c in _children(self.pid):
                if _ns_pid(c) == 1:
                    self._init = c
                    break
        return self._init

    def _main_pid(self) -> int | None:
        """Host pid of the container's main process, once it exists: the first process the namespace's pid 1
        forked (pid 2 unless something else joined the namespace first; orphans adopted later come after)."""
        if self._main is None and self.finished_at is None:
            init = self._init_pid()
            if init is not None:
                ranked = sorted((ns, c) for c in _children(init) if (ns := _ns_pid(c)) is not None)
                if ranked:
                    self._main = ranked[0][1]
        return self._main

    async def _await_main(self) -> None:
        """Wait until the main process exists, as a runtime's StartContainer returns only once it does:
        nothing (an exec probe, a signal) may enter the namespace before it."""
        deadline = time.monotonic() + MAIN_PROCESS_WAIT_SECONDS
        while self._main_pid() is None and self.finished_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    def _tree(self) -> list[int]:
        """Host pids of the container's processes (everything under the namespace's pid 1, not pid 1)."""
        if self._sandbox == "none":
            return [self.pid, *_descendants(self.pid)]
        init = self._init_pid()
        return _descendants(init) if init is not None else []

    # -- API --

    async def wait(self) -> int:
        """Exit code (killed by signal N -> 128+N; 137 after an OOM kill)."""
        assert self._done is not None
        return await asyncio.shield(self._done)

    @property
    def running(self) -> bool:
        return self.finished_at is None

    def signal_children(self, sig: int) -> int:
        """Send `sig` to every descendant of the main process (not the main process); returns how many."""
        main = self._main_pid() if self._sandbox != "none" else self.pid
        pids = _descendants(main) if main else []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return len(pids)

    def signal(self, sig: int) -> None:
        """Send `sig` to the container. SIGKILL kills the whole process tree (pid namespace / process group);
        other signals go to the main process, as a container runtime does (the namespace dies with it)."""
        if self.finished_at is not None:
            return
        if sig == _signal.SIGKILL:
            init = self._init_pid()
            for pid in (init, self.pid):
                if pid:
                    with contextlib.suppress(OSError):
                        os.kill(pid, _signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.killpg(self.pid, _signal.SIGKILL)
            return
        main = self._main_pid()
        if main is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(main, sig)
            return
        task = asyncio.get_running_loop().create_task(self._signal_later(sig))  # still setting up
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _signal_later(self, sig: int) -> None:
        while self.finished_at is None:
            main = self._main_pid()
            if main is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(main, sig)
                return
            await asyncio.sleep(0.002)

    async def stop(self, grace_seconds: float) -> int:
        """SIGTERM the main process, SIGKILL the tree after `grace_seconds`; returns the exit code."""
        if self.finished_at is None:
            if grace_seconds > 0:
                self.signal(_signal.SIGTERM)
                try:
                    return await asyncio.wait_for(self.wait(), grace_seconds)
                except TimeoutError:
                    pass
            self.signal(_signal.SIGKILL)
        return await self.wait()

    def rss_bytes(self) -> int:
        """Summed RSS of the container's processes (bwrap's own processes excluded)."""
        return sum(_rss(p) for p in self._tree())

    @property
    def memory_limit_bytes(self) -> int | None:
        """The memory limit enforced now; settable (in-place resize), from any thread."""
        return self._memory_limit

    @memory_limit_bytes.setter
    def memory_limit_bytes(self, value: int | None) -> None:
        self._memory_limit = value
        if self._loop is not None and value is not None:
            self._loop.call_soon_threadsafe(self._ensure_monitor)

    def _ensure_monitor(self) -> None:
        if self._memory_limit is None or self.finished_at is not None:
            return
        if self._monitor is None or self._monitor.done():
            assert self._loop is not None
            self._monitor = self._loop.create_task(self._watch_memory())

    async def _watch_memory(self) -> None:
        """Sample the RSS now and every ~100 ms; over the limit -> SIGKILL the tree, as the OOM killer."""
        while self.finished_at is None and (limit := self._memory_limit) is not None:
            if self.rss_bytes() > limit:
                self.oom_killed = True
                self.signal(_signal.SIGKILL)
                return
            await asyncio.sleep(MEMORY_POLL_SECONDS)

    def termination_message(self, policy: str = "File") -> str:
        """The termination message as the kubelet reports it (File or FallbackToLogsOnError)."""
        try:
            with open(self.launch.termination_host_path, "rb") as f:
                msg = f.read(MAX_TERMINATION_MESSAGE)
        except OSError:
            msg = b""
        if not msg and policy == "FallbackToLogsOnError" and self.exit_code not in (None, 0):
            msg = read_log(
                self.launch.log_path, tail_lines=FALLBACK_LOG_LINES, limit_bytes=FALLBACK_LOG_BYTES
            )
        return msg.decode(errors="replace")
