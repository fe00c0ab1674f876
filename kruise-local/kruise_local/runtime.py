"""Process runtime of the local kubelet: runs "containers" as sandboxed local processes (asyncio).

As root the default sandbox is `oci`: each container is built as containerd and runc build it (`rootfs.py`,
`ociinit.py`): new mount and pid namespaces (`unshare`) whose pid 1 mounts the image's read-only layers with a
writable layer of the instance's own over them (overlayfs; `readOnlyRootFilesystem` mounts it read-only), a
new `/proc`, a tmpfs `/dev`, the volume mounts and the termination-message file, pivots into that root,
applies the container's capabilities (the bounding set), user and no_new_privs, and execs the command.
Otherwise (`bwrap`, the default without root, and the `unshare` fallback) each container is one `bwrap`
(bubblewrap) exec: a fresh tmpfs root holding the image's filesystem read-only (either the host's `/usr`,
`/etc`, `/bin` and `/lib*`, or for a scratch-based image nothing but the `host_paths` and `links` the image
provides: `imagefs.py`), a new `/proc`, a minimal `/dev`, a private `/tmp`, the volume mounts and the
termination-message file, in new mount and pid namespaces. Either way the command is looked up in that
filesystem first: a missing or non-executable one fails the start as runc does (`StartError`).

The container's command is pid 1 of its new pid namespace, as runc makes it (`libcontainer/
standard_init_linux.go`: the container's init process sets the container up and ends in an exec of the
process; bwrap `--as-pid-1`, no reaper of its own): the kernel's rules for a namespace's init then apply as
they do in a real container (pid_namespaces(7)):

    pid 1  the container's command                 -- host: child of the `bwrap` process we spawned
    ...    its descendants, and orphans of the namespace (reparented to pid 1, which must reap them)

- a signal reaches pid 1 only if it has a handler for it (SIGKILL and SIGSTOP from outside always): a command
  with no SIGTERM handler ignores the kubelet's SIGTERM and stops at the SIGKILL after the grace period;
- pid 1 can signal every other process of its container (`kill -KILL -1` skips only itself);
- when pid 1 exits, the kernel SIGKILLs every other process of the namespace (`zap_pid_ns_processes`): with
  one process per container, nothing the container's command started outlives it.

Capabilities: the container's process gets the sets runc gives it, containerd's default set and the
container's `securityContext` (`capabilities.py`): oci makes them the bounding set before it switches users
and execs, as runc does; bwrap `--cap-drop ALL --cap-add ...` when kruise-local runs as root (bwrap makes them
the ambient set and sets no_new_privs on every process: an exec keeps them and gains none).
Without root, bwrap's sandbox is an unprivileged user namespace whose process has no capability at all. The
`unshare` fallback keeps the runtime's own (every capability, as root).

The fallback `sandbox="unshare"` (util-linux `unshare --pid` and `ociinit.py --proc`'s fork, `--root` for
the chroot) builds the same layout: the forked child execs the command as pid 1. `sandbox="none"` runs the
command on the host in its own process group, with the working dir set and NO mounts: the image's filesystem,
volume paths and the termination-message path are not available there, and the command is not a pid 1.

Network: each pod has a sandbox (`sandbox.py`, `ContainerRuntime.create_sandbox`), a small holder process in a
new network namespace whose loopback is up, as a CRI pod sandbox (the pause container) holds the pod's network
namespace. Every container of the pod joins that namespace (`nsenter --net=/proc/<holder>/ns/net` before
bwrap/unshare), so the containers of one pod reach each other on localhost, and pods are isolated from each
other and from the host: two pods can listen on one port. The namespace has nothing but `lo` (no route out, no
pod-to-pod traffic; the pod IP the kubelet reports is informative). The holder also runs the kubelet's
tcpSocket/httpGet probes from inside the namespace (`PodSandbox.probe_tcp`, `probe_http`). With
`sandbox="none"` the holder stays in the host's network namespace: pods share the host's network (and ports).
The holder also holds the pod's IPC namespace (unless `hostIPC`), which every container joins the same way
(System V objects and POSIX message queues are the pod's, shared by its containers, as under a CRI runtime),
and writes the pod's sysctls in its namespaces (`sysctl_paths`). Each container also gets the pod's
`/etc/hostname` and `/etc/resolv.conf` (`etcfiles.py`, containerd's own mounts).

Containers are killed if the thread that started them exits (`--die-with-parent`): start them from a
long-lived event loop thread.

A started container is a `RunningContainer` (`processes.py`). Logs go to `log_path` in the CRI format
(`<RFC3339 ns> stdout|stderr F|P <text>`); `crilog.py` writes them and reads them back the way the kubelet
serves `pods/log`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal as _signal
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

from .capabilities import ALL_CAPABILITIES, CAPABILITY_NAMES
from .cri import ContainerLaunch, RuntimeUnavailable, StartError
from .etcfiles import runtime_mounts
from .imagefs import (
    HOST_LINKS,
    HOST_RO,
    RUNC_EXEC_PREFIX,
    check_executable,
    host_layers,
    image_layers,
    in_binds,
    layout,
    oci_binds,
    under,
)
from .processes import RunningContainer, descendants, exit_status
from .rootfs import ImageRoot, container_realpath, home_of, host_path, image_root, process_dir
from .sandbox import HOLDER_SCRIPT, SANDBOX_WAIT_SECONDS, PodSandbox, close_pipes
from .users import ProcessUser

T = TypeVar("T")

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_OCI_INIT = str(Path(__file__).with_name("ociinit.py"))


# The unshare fallback. Outer `unshare --mount` runs this script: build the root on a private tmpfs, then
# exec an inner `unshare --pid` into `ociinit.py --proc`, whose forked child (pid 1) mounts proc and execs the
# chroot'ed command (through `unshare --root`): the command is pid 1, and its exit tears the namespace down;
# the waiting parent ends as pid 1 ended (`ociinit.fork_pid1`: 128 + signal, SIGKILL included).
_UNSHARE_SCRIPT = r"""
set -e
cpath=$PATH; base=$1; wd=$2; unshare_bin=$3; python=$4; init=$5; shift 5
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
exec "$unshare_bin" --pid -- "$python" -I -S "$init" --proc "$r/proc" -- "$@"
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


# A non-root container's binds, staged by root for bwrap run as that user (`ContainerRuntime._stage_binds`):
# in a mount namespace of its own, a tmpfs (mode 0711) on a host dir any user can reach, each source
# bind-mounted on an entry of it ("$base/<n>"), then the rest of the command line exec'd. Args: base, mount,
# mkdir, the sources, "--", the command.
_STAGE_SCRIPT = r"""
set -e
base=$1; mount_bin=$2; mkdir_bin=$3; shift 3
"$mount_bin" -t tmpfs -o mode=0711 none "$base"
i=0
while [ "$1" != -- ]; do
  if [ -d "$1" ]; then "$mkdir_bin" "$base/$i"; else : > "$base/$i"; fi
  "$mount_bin" --bind "$1" "$base/$i"
  i=$((i + 1)); shift
done
shift
exec "$@"
"""


def _stage_base_dir() -> str:
    """An empty host dir, reachable by every user, that non-root containers' binds are staged on (one per
    process; each container mounts its own tmpfs on it in a mount namespace of its own)."""
    return str(process_dir("kruise-local-binds-", 0o711))


def _unshare_base_dir() -> str:
    """An empty host dir the unshare and oci sandboxes mount their private root tmpfs on (one per process)."""
    return str(process_dir("kruise-local-root-"))


_IPC_SYSCTLS = frozenset(
    {"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni", "kernel.sem", "kernel.shmall", "kernel.shmmax"}
    | {"kernel.shmmni", "kernel.shm_rmid_forced"}
)


def sysctl_paths(sysctls: dict[str, str], own_net: bool, own_ipc: bool) -> dict[str, str]:
    """The `/proc/sys` file and value of each of a pod's sysctls, after runc's check of them
    (`libcontainer/configs/validate/validator.go` `sysctl`: the IPC ones and `fs.mqueue.*` need an IPC
    namespace of the pod's own, `net.*` a network namespace of its own, nothing else is namespaced here
    (no UTS namespace); a name whose first separator is '/' has its '.' and '/' swapped first,
    `convertSysctlVariableToDotsSeparator`). Raises RuntimeUnavailable with runc's error."""
    paths = {}
    for raw, value in sysctls.items():
        slash, dot = raw.find("/"), raw.find(".")
        name = raw.translate(str.maketrans("./", "/.")) if slash != -1 and (dot == -1 or slash < dot) else raw
        if name in _IPC_SYSCTLS or name.startswith("fs.mqueue."):
            if not own_ipc:
                raise RuntimeUnavailable(f"sysctl {name!r} is not allowed in the hosts ipc namespace")
        elif name.startswith("net."):
            if not own_net:
                raise RuntimeUnavailable(f"sysctl {name!r} not allowed in host network namespace")
        else:
            raise RuntimeUnavailable(f"sysctl {name!r} is not in a separate kernel namespace")
        paths["/proc/sys/" + name.translate(str.maketrans("./", "/."))] = value
    return paths


class ContainerRuntime:
    """Starts containers as sandboxed local processes.

    `sandbox`: "oci" (as root: runc's container set-up, `ociinit.py`), "bwrap" (bubblewrap), "unshare"
    (util-linux unshare), "none" (host, no mounts) or "auto" (oci as root, then bwrap, then unshare). Raises
    `RuntimeUnavailable` when the requested method does not work here.
    """

    def __init__(self, sandbox: str = "auto") -> None:
        if sandbox not in ("auto", "oci", "bwrap", "unshare", "none"):
            raise ValueError(f"sandbox must be auto, oci, bwrap, unshare or none, not {sandbox!r}")
        self._bwrap = shutil.which("bwrap")
        self._unshare = shutil.which("unshare")
        self._setpriv = shutil.which("setpriv")
        self._nsenter = shutil.which("nsenter")
        self._env = shutil.which("env")
        self._root = os.geteuid() == 0
        self._default_signals = _default_signals_prefix(self._env)
        self._unfinished: set[asyncio.Future[Any]] = set()
        """kills (and exec starts for clients that went) under way: `settle` waits for them"""
        if sandbox == "none":
            self.sandbox = "none"
            return
        errors: list[str] = []
        kinds = ("oci", "bwrap", "unshare") if self._root else ("bwrap", "unshare")
        for kind in kinds if sandbox == "auto" else (sandbox,):
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

    @property
    def layered(self) -> bool:
        """Whether each container gets a writable layer over its image (else the image is read-only and
        `/tmp` a fresh tmpfs per start): the oci sandbox only."""
        return self.sandbox == "oci"

    @property
    def models_privilege_escalation(self) -> bool:
        """Whether a set-user-ID program can escalate when `allowPrivilegeEscalation` allows it (bwrap sets
        no_new_privs on every process; unshare keeps the runtime's every capability): the oci sandbox only."""
        return self.sandbox == "oci"

    def _check(self, kind: str) -> str | None:
        if kind in _probe_cache:
            return _probe_cache[kind]
        if kind == "oci":
            err: str | None = None
            if not self._root:
                err = "needs kruise-local to run as root"
            elif not (self._unshare and self._setpriv):
                err = "util-linux `unshare` and `setpriv` not found"
            else:
                host = image_root(*host_layers(), (), (), (), ())
                probe = ContainerLaunch("probe", ["true"], {}, [], Path(os.devnull), "", Path(os.devnull))
                err = _probe(self._oci_cmd(probe, host, "/", [])[0])
        elif kind == "bwrap":
            if not self._bwrap:
                err = "`bwrap` not found"
            else:
                err = _probe(self._bwrap_cmd(HOST_RO, None, ["true"], HOST_LINKS))
        else:
            err = (
                "unshare not found"
                if not self._unshare
                else _probe(self._unshare_cmd(HOST_RO, None, ["true"], HOST_LINKS))
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
        capabilities: tuple[str, ...] | None = None,
        unprivileged: bool = False,
    ) -> list[str]:
        cmd = [*self._default_signals, self._bwrap or "bwrap"]
        if capabilities is not None and self._root and not unprivileged:
            # the container's capability set, as runc sets it (`capabilities.py`); without root, bwrap's
            # sandbox is an unprivileged user namespace whose process has no capability at all
            cmd += ["--cap-drop", "ALL"]
            for cap in capabilities:
                cmd += ["--cap-add", cap]
        for path, target in links:
            cmd += ["--symlink", target, path]
        cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/root"]
        for src, dst, ro in binds:
            cmd += ["--ro-bind" if ro else "--bind", src, dst]
        wd = wd or "/"
        if not any(under(wd, p) for p in ("/proc", "/dev", *(d for _, d, _ in binds if d.strip("/")))):
            cmd += ["--dir", wd]  # a missing working dir on the root tmpfs is created, as runc does
        cmd += ["--chdir", wd, "--die-with-parent", "--unshare-pid", "--as-pid-1", "--", *argv]
        return cmd

    def _oci_cmd(
        self, launch: ContainerLaunch, root: ImageRoot, wd: str, binds: list[tuple[str, str, bool]]
    ) -> tuple[list[str], tuple[tuple[str, ...], ...]]:
        """The oci sandbox's command line and the command lines its pid 1 has before the container's command:
        new mount and pid namespaces (`unshare`, the runtime's death kills them: `setpriv --pdeathsig`, and
        `ociinit.py`'s own fork, its pid 1: the layers, mounts, pivot, user, exec)."""
        caps = launch.capabilities if launch.capabilities is not None else ALL_CAPABILITIES
        spec = {
            "base": _unshare_base_dir(),
            "overlays": [[target, list(lowers)] for target, lowers in root.mounts],
            "binds": [[src, dst, ro] for src, dst, ro in binds],
            "readonly": launch.read_only_root,
            "workdir": wd,
            "caps": [CAPABILITY_NAMES.index(c.removeprefix("CAP_")) for c in caps],
            "uid": launch.user.uid,
            "gid": launch.user.gid,
            "groups": list(launch.user.groups),
            "no_new_privs": launch.no_new_privs,
            "shm": str(launch.pod_sandbox.shm) if launch.pod_sandbox and launch.pod_sandbox.shm else None,
            "argv": launch.argv,
            "lc_ctype": launch.env.get("LC_CTYPE"),
        }
        init = (sys.executable, "-I", "-S", _OCI_INIT, json.dumps(spec, separators=(",", ":")))
        unshare = (self._unshare or "unshare", "--mount", "--propagation", "private", "--pid", "--")
        return [self._setpriv or "setpriv", "--pdeathsig", "KILL", *unshare, *init], (init,)

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
        cmd += [sys.executable, _OCI_INIT]
        for path, target in links:
            cmd += ["ln", target, path]
        for src, dst, ro in binds:
            cmd += ["ro" if ro else "rw", src, dst]
        # signals at their defaults (on the host side, so that the image needs no `env`), then enter the root
        unshare = self._unshare or "unshare"
        inner = [unshare, f"--root={base}/root", f"--wd={wd or '/'}", "--", *argv]
        return [*cmd, "--", *self._default_signals, *inner]

    def _unshare_wrappers(self, argv: list[str], wd: str | None) -> tuple[tuple[str, ...], ...]:
        """The command lines pid 1 of an unshare sandbox runs before the container's command: the forked
        `ociinit.py --proc`, then `env --default-signal` (where used), then `unshare --root`."""
        unshare = self._unshare or "unshare"
        base = _unshare_base_dir()
        inner = (unshare, f"--root={base}/root", f"--wd={wd or '/'}", "--", *argv)
        rest = (*self._default_signals, *inner)
        forked = (sys.executable, "-I", "-S", _OCI_INIT, "--proc", f"{base}/root/proc", "--", *rest)
        return (forked, rest, inner)

    # -- API --

    async def settle(self, timeout: float = 5.0) -> None:
        """Wait up to `timeout` seconds for the kills under way (the cluster stops): each process is reaped
        and its pipes closed while the loop still runs. Left pending, the closed loop's garbage was collected
        later ('Event loop is closed', 'Task was destroyed but it is pending')."""
        if self._unfinished:
            await asyncio.wait(set(self._unfinished), timeout=timeout)

    def _keep(self, fut: asyncio.Future[T]) -> asyncio.Future[T]:
        self._unfinished.add(fut)
        fut.add_done_callback(self._unfinished.discard)
        return fut

    def _kill_soon(self, proc: asyncio.subprocess.Process, nsenter: bool) -> asyncio.Future[None]:
        """Kill `proc`'s tree in a task of its own: it goes on if the caller is cancelled; `settle` waits."""
        return self._keep(asyncio.ensure_future(_kill_exec(proc, nsenter)))

    def _abandon(
        self, starting: asyncio.Future[asyncio.subprocess.Process], master: int | None, nsenter: bool
    ) -> None:
        """Release an exec started for a client that went while it started: its terminal, its process tree."""
        if master is not None:
            os.close(master)
        if starting.cancelled() or starting.exception() is not None:
            return
        proc = starting.result()
        if proc.stdin is not None:
            proc.stdin.close()
        self._kill_soon(proc, nsenter)

    async def create_sandbox(
        self,
        host_network: bool = False,
        shm: Path | None = None,
        files: dict[str, Path] | None = None,
        host_ipc: bool = False,
        sysctls: dict[str, str] | None = None,
    ) -> PodSandbox:
        """Start a pod sandbox: a holder in a new network namespace with `lo` up (unless `host_network`) and a
        new IPC namespace (unless `host_ipc`), which every container of the pod joins (`unshare --net --ipc`,
        plus `--user --map-root-user` when not root; with `sandbox="none"`, the host's). `shm`: the folder the
        oci sandbox mounts as every container's /dev/shm, made here (containerd's sandbox shm, which the pod's
        containers share for its life: `container_create_linux.go`). `files`: the pod's `/etc/hostname` and
        `/etc/resolv.conf` (`etcfiles.sandbox_files`), which every container mounts. `sysctls`: the pod's
        (`securityContext.sysctls`), written in its namespaces as runc writes them (`sysctl_paths`)."""
        argv = [sys.executable, "-I", "-S", "-c", HOLDER_SCRIPT]
        isolated = self.sandbox != "none" and not host_network
        own_ipc = self.sandbox != "none" and not host_ipc
        paths = sysctl_paths(sysctls or {}, isolated, own_ipc) if self.sandbox != "none" else {}
        spaces = [*(["--net"] if isolated else []), *(["--ipc"] if own_ipc else [])]
        if spaces:
            if not self._unshare or not self._nsenter:
                raise RuntimeUnavailable(
                    "util-linux `unshare` and `nsenter` are needed for pod network namespaces"
                )
            user = [] if self._root else ["--user", "--map-root-user"]
            argv = [self._unshare, *user, *spaces, "--", *argv]
        argv += ["lo" if isolated else "host", json.dumps(paths)]
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
            await asyncio.shield(self._kill_soon(proc, nsenter=False))
            raise
        if line.strip() != b"ready":
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            err = (await proc.stderr.read()).decode(errors="replace").strip()
            await proc.wait()
            close_pipes(proc)
            raise RuntimeUnavailable(f"could not create the pod's sandbox: {err or 'no answer'}")
        if shm is not None and self.sandbox == "oci":
            shm.mkdir(parents=True, exist_ok=True)
            shm.chmod(0o1777)
        return PodSandbox(proc, isolated, shm if self.sandbox == "oci" else None, files, own_ipc)

    def _join(self, sandbox: PodSandbox | None) -> list[str]:
        """The `nsenter` prefix that puts a container into its pod's network and IPC namespaces."""
        if sandbox is None or self.sandbox == "none":
            return []
        spaces = [f"--net={sandbox.net_ns}"] if sandbox.isolated else []
        spaces += [f"--ipc={sandbox.ipc_ns}"] if sandbox.own_ipc else []
        if not spaces:
            return []
        assert self._nsenter
        cmd = [self._nsenter, *spaces]
        if sandbox.other_userns():
            cmd[1:1] = [f"--user=/proc/{sandbox.pid}/ns/user", "--preserve-credentials"]
        return [*cmd, "--"]

    async def start(self, launch: ContainerLaunch) -> RunningContainer:
        """Start the container; returns once its process is spawned (output is logged as it arrives)."""
        if not launch.argv:
            raise ValueError("empty argv")
        sandbox = launch.pod_sandbox
        if sandbox is not None and sandbox.files and self.sandbox != "none":  # containerd's own mounts
            etc = runtime_mounts(sandbox.files, launch.mounts, launch.read_only_root)
            launch = dataclasses.replace(launch, mounts=[*launch.mounts, *etc])
        launch.termination_host_path.parent.mkdir(parents=True, exist_ok=True)
        launch.termination_host_path.write_bytes(b"")
        # kuberuntime_container.go makeMounts: the termination message file is made mode 0666 (whatever the
        # umask), so that a container of any user can write it
        launch.termination_host_path.chmod(0o666)
        env = dict(launch.env)
        env.setdefault("PATH", DEFAULT_PATH)
        wd = launch.working_dir or "/"
        binds, links = layout(launch)
        cwd: str | None = None
        wrappers: tuple[tuple[str, ...], ...] = ()
        if self.sandbox == "none":
            env.setdefault("HOME", home_of(launch.user.uid, lambda p: p if os.path.lexists(p) else None))
            if shutil.which(launch.argv[0], path=env["PATH"]) is None:
                check_executable(launch.argv[0], env["PATH"], in_binds([("/", "/")], {}))
            cmd = [*self._default_signals, *launch.argv]
            cwd = wd if os.path.isdir(wd) else None
        elif self.sandbox == "oci":
            root = image_layers(launch)
            volumes = oci_binds(launch, root)
            mounts = [*root.mounts, *((dst, (src,)) for src, dst, _ in volumes)]
            env.setdefault("HOME", home_of(launch.user.uid, lambda p: host_path(p, mounts)))
            check_executable(launch.argv[0], env["PATH"], lambda p: host_path(p, mounts))
            workdir = container_realpath(wd, mounts)
            cmd, wrappers = self._oci_cmd(launch, root, workdir, volumes)
            cmd = [*self._join(launch.pod_sandbox), *cmd]
        else:
            resolve = in_binds([(s, d) for s, d, _ in binds], dict(links))
            env.setdefault("HOME", home_of(launch.user.uid, resolve))
            check_executable(launch.argv[0], env["PATH"], resolve)
            self._ensure_workdir(wd, launch)
            switch = self._user_switch(launch.user)
            if self.sandbox == "bwrap":
                unprivileged = launch.user.uid != 0 and bool(switch)
                staged = self._stage_binds(binds) if unprivileged else ([], binds)
                cmd = self._bwrap_cmd(staged[1], wd, launch.argv, links, launch.capabilities, unprivileged)
                wrappers = (tuple(cmd[len(self._default_signals) :]),)  # bwrap's child until its exec
                n = len(self._default_signals)
                cmd = [*cmd[:n], *staged[0], *switch, *cmd[n:]]
            else:
                cmd = self._unshare_cmd(binds, wd, launch.argv, links)
                wrappers = self._unshare_wrappers(launch.argv, wd)
            cmd = [*self._join(launch.pod_sandbox), *cmd]
        container = RunningContainer(self, launch, env, cwd, wrappers)
        await container._spawn(cmd)
        return container

    def _stage_binds(
        self, binds: list[tuple[str, str, bool]]
    ) -> tuple[list[str], list[tuple[str, str, bool]]]:
        """For bwrap run as a non-root user, which must reach each bind's source itself (the kubelet's
        folders need not be searchable by it): the command prefix that stages them as root (`_STAGE_SCRIPT`,
        as runc mounts a container's volumes before it switches users) and the binds from the staged
        copies."""
        unshare, mount, mkdir = (shutil.which(b) for b in ("unshare", "mount", "mkdir"))
        if not (unshare and mount and mkdir):
            raise RuntimeUnavailable("util-linux `unshare` and `mount` are needed for a non-root container")
        base = _stage_base_dir()
        prefix = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _STAGE_SCRIPT, "sh"]
        prefix += [base, mount, mkdir, *(src for src, _, _ in binds), "--"]
        return prefix, [(f"{base}/{i}", dst, ro) for i, (_, dst, ro) in enumerate(binds)]

    def _user_switch(self, user: ProcessUser) -> list[str]:
        """The `setpriv` that makes the container's process run as its OCI process user (`users.py`), before
        bwrap: runc switches to that user once the container is set up and then execs the command, so a
        process that is not root holds no capability (bwrap, started as that user, builds the container in
        a user namespace of its own with none: the user's uid and gid are mapped to themselves, the files of
        other users show as the overflow uid, `nobody`). Root with other groups keeps root and its
        capabilities. Empty for root with group 0, and when kruise-local does not run as root (its sandbox is
        the invoking user's, whatever the pod says)."""
        if user.is_default or not self._root or self.sandbox != "bwrap":
            return []
        if not self._setpriv:
            raise RuntimeUnavailable(
                "util-linux `setpriv` is needed to run a container as its securityContext's user"
            )
        groups = ["--groups", ",".join(map(str, user.groups))] if user.groups else ["--clear-groups"]
        switch = [self._setpriv, "--regid", str(user.gid), *groups]
        if user.uid:
            switch += ["--reuid", str(user.uid), "--inh-caps=-all"]
        return [*switch, "--"]

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
        cmd = self._exec_cmd(target, argv, full_env)
        if cmd is None:
            return -1, "container is not running"
        cwd = target._cwd if target._sandbox == "none" else None
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
            await asyncio.shield(self._kill_soon(proc, nsenter=target._sandbox != "none"))
            if isinstance(e, asyncio.CancelledError):
                raise
            return -1, "timeout"
        return exit_status(proc.returncode or 0), out.decode(errors="replace")

    def _exec_cmd(self, target: RunningContainer, argv: list[str], env: dict[str, str]) -> list[str] | None:
        """The command line that runs `argv` in `target`'s namespaces (pid, network and IPC: `nsenter`; mount
        with its root and cwd, and its user namespace: `ociinit.py --exec`) with the container's credentials
        (`_exec_credentials`), as runc's exec joins a container and takes its process spec; None when it has
        no live process. `env` is the command's: its LC_CTYPE goes along (Python's locale coercion sets one
        in the environment ociinit passes on)."""
        if target._sandbox == "none":
            return None if target.finished_at is not None else list(argv)
        if not self._nsenter:
            raise RuntimeUnavailable("`nsenter` (util-linux) is needed to exec into local containers")
        pid = target._main_pid()
        if pid is None or target.finished_at is not None:
            return None
        cmd = [self._nsenter, "-t", str(pid)]
        try:
            own_userns = os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino
        except OSError:
            return None
        if own_userns and not self._root:
            # kruise-local not root: its sandbox's process is the invoking user's, with no capability to model
            return [*cmd, "-U", "--preserve-credentials", "-m", "-n", "-i", "-p", "-r", "-w", "--", *argv]
        spec = self._exec_credentials(target, pid)
        if spec is None:
            return None
        # own_userns: bwrap run as the container's non-root user; ociinit joins that user namespace itself
        spec |= {"userns": own_userns, "argv": argv, "lc_ctype": env.get("LC_CTYPE")}
        init = [sys.executable, "-I", "-S", _OCI_INIT, "--exec", json.dumps(spec)]
        return [*cmd, "-n", "-i", "-p", "--", *init]  # -n, -i: the pod's network and IPC

    def _exec_credentials(self, target: RunningContainer, pid: int) -> dict[str, Any] | None:
        """What `ociinit.py --exec` gives the exec'd process, as runc's exec takes the container's process
        spec (containerd `container_execsync.go` `execInternal`: `pspec := spec.Process`; runc
        `setns_init_linux.go` `linuxSetnsInit.Init` -> `init_linux.go` `finalizeNamespace`): the container's
        bounding set and no_new_privs (read from its process, whatever sandbox made it), its capabilities
        (the oci and bwrap sandboxes set the security context's; unshare keeps every one) and its user. None
        when the process is gone."""
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        bounding = int(fields["CapBnd"], 16)
        launch = target.launch
        named = launch.capabilities if launch.capabilities is not None else ALL_CAPABILITIES
        if self.sandbox == "unshare":  # root, every capability: it switches no user and drops nothing
            named, user = ALL_CAPABILITIES, ProcessUser()
        else:
            user = launch.user
        caps = [CAPABILITY_NAMES.index(c.removeprefix("CAP_")) for c in named]
        return {
            "pid": pid,
            "caps": [c for c in caps if bounding >> c & 1],
            "bounding": [c for c in range(64) if bounding >> c & 1],
            "uid": user.uid,
            "gid": user.gid,
            "groups": list(user.groups),
            "no_new_privs": fields.get("NoNewPrivs", "0").strip() == "1",
        }

    async def spawn_exec(self, target: RunningContainer, argv: list[str], tty: bool) -> StreamingExec:
        """Start `argv` in `target` with the container's environment and pipes (a terminal with `tty`), as
        the CRI's streaming `Exec` does; raises `StartError` with runc's message when `argv[0]` cannot be run
        there, `ProcessLookupError` when the container has no live process."""
        if not argv:
            raise StartError(f'{RUNC_EXEC_PREFIX}exec: "": executable file not found in $PATH: unknown')
        main = target._main_pid() if target._sandbox != "none" else None
        if main is not None and not _lives(main):  # its exit not recorded yet: runc finds it Stopped
            raise StartError(RUNC_EXEC_STOPPED)
        path_env = target._env.get("PATH", DEFAULT_PATH)
        if target._sandbox == "none":
            check_executable(argv[0], path_env, in_binds([("/", "/")], {}), RUNC_EXEC_PREFIX)
        elif target._sandbox == "oci":  # the container's own filesystem as it is now, its layer included
            live = [("/", (f"/proc/{target._main_pid()}/root",))]
            check_executable(argv[0], path_env, lambda p: host_path(p, live), RUNC_EXEC_PREFIX)
        else:
            binds, links = layout(target.launch)
            resolve = in_binds([(s, d) for s, d, _ in binds], dict(links))
            check_executable(argv[0], path_env, resolve, RUNC_EXEC_PREFIX)
        cmd = self._exec_cmd(target, argv, target._env)
        if cmd is None:
            raise ProcessLookupError(target.container_id)
        master: int | None = None
        if tty:
            master, slave = os.openpty()
            streams: dict[str, Any] = {"stdin": slave, "stdout": slave, "stderr": slave}
        else:
            streams = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        nsenter = target._sandbox != "none"

        async def start() -> asyncio.subprocess.Process:
            try:
                return await asyncio.create_subprocess_exec(
                    *cmd,
                    **streams,
                    env=target._env,
                    cwd=target._cwd if target._sandbox == "none" else None,
                    start_new_session=True,
                )
            finally:
                if master is not None:
                    os.close(streams["stdin"])  # the terminal's slave side: the command has its own

        starting = asyncio.ensure_future(start())
        try:
            proc = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # the client went while the command starts. Cancelled, asyncio's start kills nsenter alone (its
            # child, the command, orphaned in the container) and then waits for good on pipes that never
            # connected (CPython 3.11 `_make_subprocess_transport`): let it start, then kill its tree.
            self._keep(starting).add_done_callback(lambda f: self._abandon(f, master, nsenter))
            raise
        except OSError as e:
            if master is not None:
                os.close(master)
            raise StartError(f"{RUNC_EXEC_PREFIX}{e}: unknown") from e
        return StreamingExec(proc, master, nsenter=nsenter)


RUNC_EXEC_STOPPED = "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown"
"""runc's exec into a container whose init process is gone (`exec.go` `execProcess`: the container's
`Status()` is Stopped once its init pid is dead or a zombie), as containerd's shim passes it on: what an exec
meets between a container's end and the runtime's record of it (then the kubelet refuses: not found)"""


def _lives(pid: int) -> bool:
    """Whether `pid` exists and is neither a zombie nor dead (runc's `runType`, from /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


class StreamingExec:
    """One streaming exec's process: its pipes (or terminal), its exit code and its kill."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int | None, nsenter: bool) -> None:
        self.proc = proc
        self.master = master
        """the terminal's master side with a tty (None: pipes)"""
        self._nsenter = nsenter

    async def wait(self) -> int:
        """The command's exit code (128 + n when a signal ended it)."""
        return exit_status(await self.proc.wait())

    async def kill(self) -> None:
        """Kill the command's process tree (its client went away) and close its pipes."""
        if self.proc.returncode is None:
            await _kill_exec(self.proc, self._nsenter)
        close_pipes(self.proc)


async def _kill_exec(proc: asyncio.subprocess.Process, nsenter: bool) -> None:
    """Kill an exec'd command's (or a sandbox holder's) process tree, reap it and close its pipes.

    nsenter's children first, so that nsenter (outside the container's pid namespace) reaps them: an orphan of
    nsenter would be reparented to the host's init and, until that reaps it, block the container's teardown.
    """
    if nsenter:
        for pid in descendants(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, _signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 1.0)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, _signal.SIGKILL)
    await proc.wait()
    close_pipes(proc)
