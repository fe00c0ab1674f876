"""The container's init for the `oci` sandbox (`runtime.py`): what runc's `runc init` does between the new
namespaces and the exec of the container's process, run by the runtime as `python -I -S ociinit.py SPEC` (a
script of its own: it imports nothing of kruise_local, and all it needs is loaded before the pivot).

It is started in new mount and pid namespaces (`unshare --mount --pid`, no `--fork`), forks, and its child is
pid 1 of that pid namespace (`fork_pid1`); the parent waits for it and ends as it ended, as runc's and
containerd's wait status of an init process (`libcontainer/utils` `ExitStatus`, containerd `sys/reaper`
`exitStatus`): an exit code as it is, a signal by dying of the same signal, so the runtime reads 128 + signal,
SIGKILL included (util-linux `unshare --fork` < 2.40 exits 1 when its child dies of SIGKILL, util-linux#2614,
which the runtime reported as the container's exit code). The unshare sandbox runs it as `ociinit.py --proc
DIR -- ARGV` for that fork alone: its pid 1 mounts the namespace's proc on DIR and execs ARGV. An exec into a
container (of any sandbox, kruise-local as root) runs `ociinit.py --exec SPEC` (`enter`): runc's exec.

The pid 1 of the oci sandbox then does as root, from the JSON `SPEC` the runtime built (`rootfs.py`):

1. mounts a tmpfs on `base` (private to this mount namespace: the container's writable layer lives there and
   goes with the namespace, as containerd removes a container's snapshot), then each overlay of the image
   (`lowerdir` the image's read-only folders, `upperdir` and `workdir` fresh on that tmpfs; the root first):
   containerd's overlayfs snapshotter (`snapshots/overlay/overlay.go`) gives each container such an upper
   folder over the image's layers, and each upper folder takes the owner and mode of the folder it covers;
2. mounts `/proc`, a tmpfs `/dev` with the null, zero, full, random, urandom and tty device nodes, `/dev/pts`,
   `/dev/mqueue` (the POSIX message queues of the IPC namespace the container joined: the pod's), `/dev/shm`
   (the pod sandbox's folder `shm`, which every container of the pod shares, as containerd binds its
   sandbox's shm; else a tmpfs of its own) and the `/dev/fd`, `stdin`, `stdout` and `stderr` links (runc's
   default mounts, containerd's default spec, and `setupDevSymlinks`), then the volumes and the
   termination-message file: each mount point is made in the layer when missing (`createIfNotExists`), a
   read-only one is remounted so (`prepareRootfs`, `mountToRootfs`);
3. with `readonly` (`readOnlyRootFilesystem`) remounts the image's overlays read-only (`finalizeRootfs`
   `setReadonly`: the volumes, `/dev` and `/proc` stay as they are);
4. pivots into the root and detaches the old one (`pivotRoot`: `pivot_root(".", ".")`, no folder left in
   the root); umask 0022;
5. drops every capability not in `caps` from the bounding set, switches to the OCI process user (groups,
   gid, uid; the permitted set kept), makes `caps` its effective and permitted sets, sets no_new_privs when
   asked (`allowPrivilegeEscalation: false`), and execs the command with every signal at its default
   disposition (`finalizeNamespace`, `setupUser`, `ApplyCaps`, `standard_init_linux.go`). The process execs
   with the container's capabilities, as under runc (the kernel's exec-time checks see them); after the exec
   root keeps them and a non-root process has none; a set-user-ID root program run later gets at most the
   bounding set, and nothing with no_new_privs.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import stat
import sys
import warnings  # noqa: F401 (os.execvp imports it: it must be loaded before the pivot)

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_SLAVE = 32, 4096, 16384, 1 << 18, 1 << 19
MNT_DETACH = 2
CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
PR_SET_PDEATHSIG, PR_SET_KEEPCAPS, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 8, 24, 38
CAPABILITY_VERSION_3 = 0x20080522
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
"""runc's default devices (`specconv.AllowedDevices`): character devices, mode 0666, root's"""
LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"))
LINKS += (("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"))
LIBC = ctypes.CDLL(None, use_errno=True)


def fail(what: str, errno: int | None = None) -> None:
    """End the container's start: its error on stderr (the container's log), exit 128 (runc's start error)."""
    why = f": {os.strerror(errno)}" if errno else ""
    sys.stderr.write(f"kruise-local oci init: {what}{why}\n")
    sys.stderr.flush()
    os._exit(128)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if LIBC.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        fail(f"mount {fstype or 'bind'} {source} on {target}", ctypes.get_errno())


def prctl(option: int, arg: int) -> None:
    if LIBC.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        fail(f"prctl {option}", ctypes.get_errno())


def capset(caps: set[int]) -> None:
    """The effective, permitted and inheritable sets: `caps`, nothing, and nothing inheritable or ambient
    (runc's `ApplyCaps` with containerd's spec, which names no inheritable set)."""
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    for cap in caps:
        word = 3 * (cap // 32)
        data[word] |= 1 << (cap % 32)  # effective
        data[word + 1] |= 1 << (cap % 32)  # permitted
    if LIBC.capset(header, data) != 0:
        fail("capset", ctypes.get_errno())


def make_point(path: str, folder: bool) -> None:
    """runc's createIfNotExists: a folder, or an empty file (its parents folders), where nothing is."""
    if os.path.lexists(path):
        return
    if folder:
        os.makedirs(path, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        with open(path, "ab"):
            pass


def layers(spec: dict, root: str) -> None:
    base = spec["base"]
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
    for i, (target, lowers) in enumerate(spec["overlays"]):
        upper, work = f"{base}/upper{i}", f"{base}/work{i}"
        os.mkdir(work, 0o700)
        os.mkdir(upper)
        top = os.stat(lowers[0])
        os.chown(upper, top.st_uid, top.st_gid)
        os.chmod(upper, top.st_mode & 0o7777)
        point = root + target.rstrip("/")
        if target == "/":
            os.mkdir(root, 0o755)
        data = f"lowerdir={':'.join(lowers)},upperdir={upper},workdir={work}"
        mount("overlay", point, "overlay", 0, data)


def devices(root: str, shm: str | None) -> None:
    dev = f"{root}/dev"
    mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=0755,size=65536k")
    for name, (major, minor) in DEVICES.items():  # runc createDeviceNode: mknod (a bind in a user ns)
        os.mknod(f"{dev}/{name}", stat.S_IFCHR | 0o666, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", 0o666)
    for name in ("pts", "shm", "mqueue"):
        os.mkdir(f"{dev}/{name}", 0o755)
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    mount("mqueue", f"{dev}/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # the pod's IPC namespace's
    if shm:  # the pod sandbox's, shared by the pod's containers for its life
        mount(shm, f"{dev}/shm", None, MS_BIND)
        mount(None, f"{dev}/shm", None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    else:
        mount("shm", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k")
    for link, target in LINKS:
        os.symlink(target, f"{dev}/{link}")


def pivot(root: str) -> None:
    """runc's pivotRoot: pivot_root(".", ".") in the new root, then detach the old one stacked on it."""
    old = os.open("/", os.O_DIRECTORY | os.O_RDONLY)
    new = os.open(root, os.O_DIRECTORY | os.O_RDONLY)
    os.fchdir(new)
    if LIBC.syscall(PIVOT_ROOT[os.uname().machine], b".", b".") != 0:
        fail("pivot_root", ctypes.get_errno())
    os.fchdir(old)
    mount(None, ".", None, MS_SLAVE | MS_REC)
    if LIBC.umount2(b".", MNT_DETACH) != 0:
        fail("detach the old root", ctypes.get_errno())
    os.chdir("/")
    os.close(old)
    os.close(new)


def fork_pid1() -> None:
    """Return in a forked child, pid 1 of the pid namespace this process was unshared into, which dies with
    this process (unshare's `--kill-child`); this process waits for it and ends as it did (`exit_as`)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))  # as unshare: the child's alone
    child = os.fork()
    if child == 0:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        return
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    exit_as(status)


def exit_as(status: int) -> None:
    """End this process as the wait `status` says its child ended: its exit code, or its signal."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (sig,))
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


def proc_and_exec(proc: str, argv: list[str]) -> None:
    """The unshare sandbox's pid 1: mount its namespace's proc on `proc` (unshare's `--mount-proc`), then
    exec `argv`."""
    mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        fail(f'exec: "{argv[0]}"', e.errno)


def main(spec: dict) -> None:
    root = f"{spec['base']}/root"
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    layers(spec, root)
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    devices(root, spec.get("shm"))
    for source, target, read_only in spec["binds"]:
        point = root + target
        make_point(point, os.path.isdir(source))
        mount(source, point, None, MS_BIND | MS_REC)
        if read_only:
            mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    workdir = root + spec["workdir"]
    if not os.path.lexists(workdir):
        os.makedirs(workdir, 0o755, exist_ok=True)  # runc makes a missing working dir
    if spec["readonly"]:
        for target, _ in spec["overlays"]:
            mount(None, root + target.rstrip("/"), None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    pivot(root)
    os.umask(0o022)
    keep = set(spec["caps"])
    credentials(keep, keep, spec, last_cap)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # a change of user cleared it: the runtime's death still ends us
    try:
        os.chdir(spec["workdir"])
    except OSError as e:
        fail(f"chdir to cwd ({spec['workdir']!r}) set in config.json failed", e.errno)
    for sig in range(1, signal.NSIG):
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    command_ctype(spec["lc_ctype"])
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        fail(f'exec: "{argv[0]}"', e.errno)


def credentials(caps: set[int], bounding: set[int], spec: dict, last_cap: int) -> None:
    """runc's `finalizeNamespace`, for a container's init and for each exec alike: drop every capability not
    in `bounding` from the bounding set, switch to the OCI process user (groups, gid, uid; the permitted set
    kept: KEEPCAPS), make `caps` the effective and permitted sets, set no_new_privs when asked. The process
    then execs holding the container's capabilities, as under runc: the kernel's exec-time checks see them
    (fs/exec.c `would_dump`: a file it cannot read leaves it not dumpable); a non-root process loses them in
    the exec."""
    for cap in range(last_cap + 1):
        if cap not in bounding:
            prctl(PR_CAPBSET_DROP, cap)
    prctl(PR_SET_KEEPCAPS, 1)
    try:
        os.setgroups(spec["groups"])
    except PermissionError:
        with open("/proc/self/setgroups") as f:  # a user namespace that denies it (bwrap's): as nsenter
            if f.read().strip() != "deny":
                raise
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    prctl(PR_SET_KEEPCAPS, 0)
    capset(caps)
    if spec["no_new_privs"]:
        prctl(PR_SET_NO_NEW_PRIVS, 1)


def command_ctype(value: str | None) -> None:
    """Give the command its own LC_CTYPE (`value`, or none): Python's C locale coercion (PEP 538) set one in
    this process's environment, which the exec passes on."""
    os.environ.pop("LC_CTYPE", None)
    if value is not None:
        os.environ["LC_CTYPE"] = value


def enter(spec: dict) -> None:
    """An exec into a running container (`ociinit.py --exec SPEC`, run by the runtime after `nsenter` joined
    the container's pid, network and IPC namespaces), as runc's exec (`setns_init_linux.go`
    `linuxSetnsInit.Init`) with the container's process spec (containerd's CRI `execInternal`): join the
    mount namespace of the container's process `pid`, its user namespace when it has one of its own, its
    root and working folder (as `nsenter -m -U -r -w`), then `credentials` with the container's bounding set
    and capabilities, and exec the command. Errors as nsenter's: exit 126, or 127 when it is not found."""
    pid = spec["pid"]
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    names = ("ns/user",) * spec["userns"] + ("ns/mnt", "root", "cwd")
    try:
        fds = [os.open(f"/proc/{pid}/{p}", os.O_RDONLY) for p in names]  # all first, as nsenter
    except OSError as e:
        fail(f"open the namespaces of {pid}", e.errno)
    user = fds.pop(0) if spec["userns"] else None
    if LIBC.setns(fds[0], CLONE_NEWNS) != 0:
        fail("setns mnt", ctypes.get_errno())
    # the user namespace last, as nsenter enters one that deprivileges (the mount namespace needs the host's)
    if user is not None and LIBC.setns(user, CLONE_NEWUSER) != 0:
        fail("setns user", ctypes.get_errno())
    os.fchdir(fds[1])
    os.chroot(".")
    os.fchdir(fds[2])
    for fd in fds if user is None else [*fds, user]:
        os.close(fd)
    credentials(set(spec["caps"]), set(spec["bounding"]), spec, last_cap)
    command_ctype(spec["lc_ctype"])
    argv = spec["argv"]
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        sys.stderr.write(f"nsenter: failed to execute {argv[0]}: {os.strerror(e.errno or 0)}\n")
        sys.stderr.flush()
        os._exit(127 if e.errno == errno.ENOENT else 126)


if __name__ == "__main__":
    if sys.argv[1] == "--exec":
        enter(json.loads(sys.argv[2]))
    fork_pid1()
    if sys.argv[1] == "--proc":
        proc_and_exec(sys.argv[2], sys.argv[4:])
    else:
        main(json.loads(sys.argv[1]))
