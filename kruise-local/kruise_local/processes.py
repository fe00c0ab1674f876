"""A running container as the runtime holds it: a sandboxed process tree (its main process, pid 1 of the
container's pid namespace, and its descendants found through `/proc`), its output piped into the CRI log,
its exit code as a shell reports it (128 + signal), signals and graceful stop (SIGTERM, SIGKILL after the
grace period: `kuberuntime_container.go` `killContainer`), its memory (resident pages, each address space
once; an OOM kill past the limit) and its termination message (`terminationMessagePolicy`,
`FallbackToLogsOnError`: the log's last 80 lines, at most 2048 bytes)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import os
import signal as _signal
import struct
import subprocess
import termios
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from .crilog import CriLogWriter, read_log

if TYPE_CHECKING:
    from .cri import ContainerLaunch


class Runtime(Protocol):
    """What a running container keeps of the runtime that started it."""

    sandbox: str


MAX_TERMINATION_MESSAGE = 4096  # kubelet reads at most this much of the termination-message file


FALLBACK_LOG_LINES = 80  # FallbackToLogsOnError: kubelet reads the last 80 lines ...


FALLBACK_LOG_BYTES = 2048  # ... limited to 2048 bytes


MEMORY_POLL_SECONDS = 0.1


_PIPE_DRAIN_SECONDS = 2.0


MAIN_PROCESS_WAIT_SECONDS = 10.0  # bound on the sandbox set-up (mounts) before the main process is exec'd


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


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


def descendants(pid: int) -> list[int]:
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


def _cmdline(pid: int) -> bytes:
    """`pid`'s command line as /proc holds it, each word NUL-terminated (b"" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _statm(pid: int) -> tuple[int, int]:
    """(size, resident) of `pid`'s address space in pages; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            size, resident = f.read().split()[:2]
        return int(size), int(resident)
    except (OSError, ValueError):
        return 0, 0


# kcmp(2) syscall numbers (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64 and riscv64:
# include/uapi/asm-generic/unistd.h) and its KCMP_VM type (include/uapi/linux/kcmp.h).
_KCMP = {"x86_64": 312, "aarch64": 272, "riscv64": 272}.get(os.uname().machine)
_KCMP_VM = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def _same_address_space(a: int, b: int) -> bool:
    """Whether processes `a` and `b` share one address space (kcmp KCMP_VM): a vfork child until its exec,
    a clone(CLONE_VM) process. False where kcmp is missing or refused (they are then counted apart)."""
    return _KCMP is not None and _LIBC.syscall(_KCMP, a, b, _KCMP_VM, 0, 0) == 0


def memory_bytes(pids: list[int]) -> int:
    """The memory of these processes as their cgroup is charged for it: the resident pages of each address
    space once. The kubelet's container_memory_working_set_bytes, which metrics-server serves
    (`pkg/scraper/client/resource/decode.go`), is the cgroup's usage minus inactive_file (cAdvisor
    `container/libcontainer/handler.go` `setMemoryStats`), and a page is charged once however many processes
    map it: a vfork child (glibc's posix_spawn and system(), as awk's system() calls it) shares its parent's
    pages until its exec, and adds none. Processes that merely fork are still counted apart."""
    total = 0
    seen: list[tuple[int, int]] = []  # (pid, size) of each address space counted
    for pid in pids:
        size, resident = _statm(pid)
        candidates = [p for p, s in seen if s == size]
        if any(_same_address_space(pid, p) for p in candidates):
            continue
        if candidates:  # it may have exec'd since it was read: read what it holds now
            size, resident = _statm(pid)
        seen.append((pid, size))
        total += resident * _PAGE_SIZE
    return total


def exit_status(returncode: int) -> int:
    """Kubelet convention: killed by signal N -> 128+N."""
    return 128 - returncode if returncode < 0 else returncode


class _Protocol(asyncio.SubprocessProtocol):
    def __init__(
        self, writer: CriLogWriter, loop: asyncio.AbstractEventLoop, attachments: set[Attachment]
    ) -> None:
        self.writer = writer
        self.attachments = attachments
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.writable = asyncio.Event()
        """the stdin pipe takes more (cleared while its transport's buffer is over its high-water mark)"""
        self.writable.set()
        self.outputs_closed: set[int] = set()
        self.console: asyncio.Future[None] | None = None
        """a `tty: true` container's console: done once its output has ended"""

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self.writer.feed(fd, data)
        for attachment in self.attachments:  # containerd's output WriterGroup: the log and each attach
            attachment.feed(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:  # the stdin pipe closed (by us, or the container's side went)
            self.writable.set()
            return
        self.writer.flush(fd)
        self.outputs_closed.add(fd)
        for attachment in list(self.attachments):  # `ContainerIO.Pipe`: the group closes its writers at EOF
            attachment.output_closed(fd)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class _Console(asyncio.Protocol):
    """The reader of a `tty: true` container's console: its output is the container's stdout."""

    def __init__(self, proto: _Protocol, loop: asyncio.AbstractEventLoop) -> None:
        self.proto = proto
        proto.console = loop.create_future()

    def data_received(self, data: bytes) -> None:
        self.proto.pipe_data_received(1, data)

    def connection_lost(self, exc: Exception | None) -> None:  # EIO once the last slave side is closed
        self.proto.pipe_connection_lost(1, None)
        if self.proto.console is not None and not self.proto.console.done():
            self.proto.console.set_result(None)


class RunningContainer:
    """A started container. `wait()` may be awaited any number of times, concurrently."""

    def __init__(
        self,
        runtime: Runtime,
        launch: ContainerLaunch,
        env: dict[str, str],
        cwd: str | None,
        wrappers: tuple[tuple[str, ...], ...] = (),
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
        self._wrappers = {b"".join(os.fsencode(word) + b"\0" for word in argv) for argv in wrappers}
        """command lines pid 1 has while the sandbox sets up, before it execs the container's command"""
        self._transport: asyncio.SubprocessTransport | None = None
        self._done: asyncio.Task[int] | None = None
        self._monitor: asyncio.Task[None] | None = None
        self._memory_limit = launch.memory_limit_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._attachments: set[Attachment] = set()
        """the attach sessions receiving the container's output (`attach`)"""
        self._proto: _Protocol | None = None
        self._holding: set[Attachment] = set()
        """the attach sessions whose backlog holds the container's output back (`ATTACH_BACKLOG_BYTES`)"""
        self._stdin: asyncio.WriteTransport | None = None
        """the write end of the container's stdin pipe, kept by the runtime (`stdin: true` only)"""
        self._console: int | None = None
        """the master side of a `tty: true` container's console"""
        self._console_reader: asyncio.ReadTransport | None = None

    async def _spawn(self, cmd: list[str]) -> None:
        loop = asyncio.get_running_loop()
        writer = CriLogWriter(self.launch.log_path)
        # containerd's CRI plugin makes a stdin FIFO only for a container whose config asks for stdin
        # (`WithNewFIFOs(..., config.GetTty(), config.GetStdin())`); the others read /dev/null. With `tty`
        # the process gets a console instead (runc's pty: stdin, stdout and stderr on its slave side)
        master: int | None = None
        if self.launch.tty:
            master, slave = os.openpty()
            streams: dict[str, int] = {"stdin": slave, "stdout": slave, "stderr": slave}
        else:
            stdin = subprocess.PIPE if self.launch.stdin else subprocess.DEVNULL
            streams = {"stdin": stdin, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        try:
            transport, proto = await loop.subprocess_exec(
                lambda: _Protocol(writer, loop, self._attachments),
                *cmd,
                **streams,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        except BaseException:
            writer.close()
            if master is not None:
                os.close(master)
            raise
        finally:
            if master is not None:
                os.close(streams["stdin"])  # the console's slave side: the container has its own
        self.started_at = datetime.now(UTC)
        self._transport = transport
        self._proto = proto
        self.pid = transport.get_pid()
        if self._sandbox == "none":
            self._init = self._main = self.pid
        self._loop = loop
        if master is not None:
            self._console = master
        elif self.launch.stdin:
            self._stdin = transport.get_pipe_transport(0)  # type: ignore[assignment]
        try:
            if master is not None:
                # the console's output is the container's stdout (containerd logs and attaches it as such)
                self._console_reader, _ = await loop.connect_read_pipe(
                    lambda: _Console(proto, loop), os.fdopen(os.dup(master), "rb", 0)
                )
            self._done = loop.create_task(self._run(transport, proto, writer))
            self._ensure_monitor()
            if self._sandbox != "none":
                await self._await_main()
        except BaseException:
            await self._discard(transport, proto, writer)
            raise

    async def _discard(
        self, transport: asyncio.SubprocessTransport, proto: _Protocol, writer: CriLogWriter
    ) -> None:
        """Kill and reap a container whose start did not complete (cancelled: its pod worker stopped), its
        pipes closed, as containerd deletes a task whose start failed. Nobody else holds it: left running, it
        outlived the cluster and its transport was closed by the garbage collector after the loop had gone."""
        self.signal(_signal.SIGKILL)
        if self._done is None:
            self._done = asyncio.get_running_loop().create_task(self._run(transport, proto, writer))
        await asyncio.shield(self._done)

    async def _run(
        self, transport: asyncio.SubprocessTransport, proto: _Protocol, writer: CriLogWriter
    ) -> int:
        try:
            await proto.exited
            code = exit_status(transport.get_returncode() or 0)
            exited_at = datetime.now(UTC)
            if self._sandbox == "none":  # emulate the namespace teardown for leftover group members
                with contextlib.suppress(OSError):
                    os.killpg(self.pid, _signal.SIGKILL)
            try:
                drained = asyncio.gather(proto.closed, *([proto.console] if proto.console else []))
                await asyncio.wait_for(asyncio.shield(drained), _PIPE_DRAIN_SECONDS)
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
            for attachment in list(self._attachments):
                attachment.output_closed(1)
                attachment.output_closed(2)
            writer.close()
            transport.close()
            if self._console_reader is not None:
                self._console_reader.close()
            if self._console is not None:
                os.close(self._console)
                self._console = None

    # -- process discovery --

    def _init_pid(self) -> int | None:
        """Host pid of pid 1 of the container's pid namespace (the container's command, once exec'd)."""
        if self._init is None and self.finished_at is None:
            for c in _children(self.pid):
                if _ns_pid(c) == 1:
                    self._init = c
                    break
        return self._init

    def _main_pid(self) -> int | None:
        """Host pid of the container's main process once it runs the container's command: pid 1 of its pid
        namespace, as runc execs it (`libcontainer/standard_init_linux.go`: the init process ends in an exec
        of the process), once it no longer runs one of the sandbox's own set-up commands."""
        if self._main is None and self.finished_at is None:
            init = self._init_pid()
            # an empty command line is a process in the middle of an exec (its new memory has no arguments
            # yet): a set-up command becoming the next, not yet the container's own
            if init is not None and (command := _cmdline(init)) and command not in self._wrappers:
                self._main = init
        return self._main

    async def _await_main(self) -> None:
        """Wait until the main process runs the container's command, as a runtime's StartContainer returns
        only once it does: nothing (an exec probe, a signal) may enter the namespace before it."""
        deadline = time.monotonic() + MAIN_PROCESS_WAIT_SECONDS
        while self._main_pid() is None and self.finished_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.001)

    def _tree(self) -> list[int]:
        """Host pids of the container's processes (the namespace's pid 1 and everything under it)."""
        root = self.pid if self._sandbox == "none" else self._init_pid()
        return [root, *descendants(root)] if root is not None else []

    # -- API --

    def attach(self, stdin: bool, stdout: bool, stderr: bool) -> Attachment:
        """Attach to the container's stdio from now on (`Attachment`)."""
        attachment = Attachment(self, stdin, stdout, stderr)
        if self._proto is not None:
            for fd in self._proto.outputs_closed:
                attachment.output_closed(fd)
        if self.finished_at is not None:
            attachment.output_closed(1)
            attachment.output_closed(2)
        return attachment

    @property
    def has_stdin(self) -> bool:
        """Whether the container has a stdin to write to (`stdin: true`), closed or not."""
        return self._stdin is not None or (self._console is not None and self.launch.stdin)

    async def write_stdin(self, data: bytes) -> None:
        """Write to the container's stdin, waiting while the pipe's buffer is full; dropped once it is closed
        (containerd's copy into a closed stdin fails and ends). With a tty, to its console."""
        if self._console is not None:
            await self._write_console(data)
            return
        pipe, proto = self._stdin, self._proto
        if pipe is None or proto is None or pipe.is_closing():
            return
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            pipe.write(data)
            await proto.writable.wait()

    async def _write_console(self, data: bytes) -> None:
        view = memoryview(data)
        while view and self._console is not None and self.launch.stdin:
            try:
                view = view[os.write(self._console, view) :]
            except BlockingIOError:  # the console's input is full (its reader shares the non-blocking flag)
                await asyncio.sleep(0.01)
            except OSError:
                return

    def resize(self, rows: int, cols: int) -> None:
        """Resize the console (containerd's `task.Resize` on an attach's TerminalSize)."""
        if self._console is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._console, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def _hold_output(self, attachment: Attachment, hold: bool) -> None:
        """Stop (`hold`) or resume reading the container's output pipes for `attachment`'s backlog."""
        held = bool(self._holding)
        if hold:
            self._holding.add(attachment)
        else:
            self._holding.discard(attachment)
        if held == bool(self._holding) or self._transport is None or self._transport.is_closing():
            return
        if self._console_reader is not None:
            with contextlib.suppress(RuntimeError):
                self._console_reader.pause_reading() if hold else self._console_reader.resume_reading()
            return
        for fd in (1, 2):
            pipe = self._transport.get_pipe_transport(fd)
            if pipe is not None and not pipe.is_closing():
                with contextlib.suppress(RuntimeError):
                    pipe.pause_reading() if hold else pipe.resume_reading()  # type: ignore[attr-defined]

    def close_stdin(self) -> None:
        """Close the container's stdin: its process reads the end of input once the pipe is drained
        (`stdinOnce`: containerd's `c.stdin.Close()` and the task's `CloseIO`)."""
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.close()

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
        pids = descendants(main) if main else []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return len(pids)

    def signal(self, sig: int) -> None:
        """Send `sig` to the container. SIGKILL kills the whole process tree (pid namespace / process group);
        other signals go to the main process, as a container runtime does (the namespace dies with it). The
        main process is pid 1 of its namespace: the kernel delivers a signal from outside only if pid 1 has a
        handler for it (SIGKILL and SIGSTOP always; pid_namespaces(7)), so a command with no SIGTERM handler
        ignores the kubelet's SIGTERM and runs until the SIGKILL after the grace period, as on runc."""
        if self.finished_at is not None:
            return
        if sig == _signal.SIGKILL:
            # The spawned process first: its wait status is the one reported, and a SIGKILL queued before its
            # child dies fixes it at "killed by 9" (the kernel's do_group_exit keeps the group exit code) as
            # runc/containerd report the init's wait status (`utils.ExitStatus`: 128 + 9). Killing pid 1 first
            # would leave that status to the waiter above it (ociinit.py `fork_pid1`, which re-raises it).
            init = self._init_pid()
            for pid in (self.pid, init):
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
        """Resident memory of the container's processes, each address space once (`memory_bytes`; bwrap's
        own processes excluded)."""
        return memory_bytes(self._tree())

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


ATTACH_BACKLOG_BYTES = 1024 * 1024
"""An attach session's output not yet sent to its client, past which the container's output pipes are no
longer read until it is half sent: containerd writes the container's output to its log and to each attach in
turn (`cioutil.WriterGroup.Write`), so a slow attach client holds the container's writes back, as here. (The
amount is ours: upstream, the streams' flow-control windows and the pipe's buffer.)"""


class Attachment:
    """One attach to a running container's stdio, as containerd's CRI plugin serves the CRI `Attach`
    (`internal/cri/server/container_attach.go` `attachContainer`, `internal/cri/io/container_io.go`
    `ContainerIO.Attach`):

    - output: the session joins the container's stdout/stderr writer groups, so it gets what the container
      writes from now on, never the log's history; a writer closes when the container's stream ends (or when
      the session is detached), and the session ends once all of its writers closed and its stdin copy
      ended (`wg.Wait()`);
    - stdin: copied into the container's stdin only when the container has one (`c.stdin != nil &&
      opts.Stdin != nil`: `stdin: true`), else ignored. When the client's stdin ends (the v5 close signal, or
      the client going away): with `stdinOnce` and no tty the container's stdin is closed and the outputs
      stay attached until the container ends; otherwise the outputs are detached and the session ends, the
      container's stdin left open for the next attach. An output closing ends the stdin copy too.
    """

    def __init__(self, container: RunningContainer, stdin: bool, stdout: bool, stderr: bool) -> None:
        self._container = container
        self.tty = container.launch.tty
        self._stdin_once = container.launch.stdin_once
        self._stdin = stdin and container.has_stdin
        self._outputs = {fd for fd, wanted in ((1, stdout), (2, stderr and not self.tty)) if wanted}
        self._queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._pending = 0
        """bytes fed and not read yet: over `ATTACH_BACKLOG_BYTES` the container's output waits"""
        self._ended = False
        container._attachments.add(self)
        self._check_end()

    def feed(self, fd: int, data: bytes) -> None:
        if fd in self._outputs:
            self._queue.put_nowait((fd, data))
            self._pending += len(data)
            if self._pending > ATTACH_BACKLOG_BYTES:
                self._container._hold_output(self, True)

    async def read(self) -> tuple[int, bytes] | None:
        """The next output chunk (1 stdout, 2 stderr), or None once the session has ended."""
        chunk = await self._queue.get()
        if chunk is not None:
            self._pending -= len(chunk[1])
            if self._pending <= ATTACH_BACKLOG_BYTES // 2:
                self._container._hold_output(self, False)
        return chunk

    async def write_stdin(self, data: bytes) -> None:
        if self._stdin:
            await self._container.write_stdin(data)

    def resize(self, rows: int, cols: int) -> None:
        """A `TerminalSize` message: the console's size (`handleResizing`); nothing without a tty."""
        self._container.resize(rows, cols)

    def stdin_ended(self) -> None:
        """The client's stdin ended: the copy into the container's stdin returns."""
        if not self._stdin:
            return
        self._stdin = False
        if self._stdin_once and not self.tty:
            self._container.close_stdin()
        else:
            self._outputs.clear()
        self._check_end()

    def output_closed(self, fd: int) -> None:
        """One of the container's output streams ended: its writer closes, which ends the stdin copy."""
        if fd not in self._outputs:
            return
        self._outputs.discard(fd)
        self.stdin_ended()
        self._check_end()

    def detach(self) -> None:
        """The client went: its stdin stream ends (with `stdinOnce`, the container's stdin closes) and its
        writers are dropped."""
        self.stdin_ended()
        self._outputs.clear()
        self._check_end()

    def _check_end(self) -> None:
        if not self._outputs:
            self._container._hold_output(self, False)
        if not self._ended and not self._stdin and not self._outputs:
            self._ended = True
            self._container._attachments.discard(self)
            self._queue.put_nowait(None)
