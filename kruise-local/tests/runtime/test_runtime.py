"""Tests of the local process runtime (sandboxed "containers", CRI logs, signals, memory limit, exec); its pod
sandboxes are in test_runtime_sandboxes.py, the CRI log follow in test_crilog_follow.py."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kruise_local.cri import Mount, StartError
from kruise_local.crilog import follow_log, read_log
from kruise_local.runtime import ContainerRuntime
from kruise_local.testing import is_static_elf
from runtime_helpers import ENDS, alive, make_launch, sh, texts, wait_for_log

CRI_LINE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (stdout|stderr) [FP] ")


# basics


@pytest.mark.asyncio
async def test_volume_env_workdir_exit_code(any_runtime: ContainerRuntime, tmp_path: Path) -> None:
    (tmp_path / "vol").mkdir()
    (tmp_path / "vol" / "in.txt").write_text("from-host\n")
    c = await any_runtime.start(
        make_launch(
            tmp_path,
            sh("cat /scratch/in.txt; echo $GREETING; pwd; echo out > /scratch/out.txt; exit 3"),
            working_dir="/scratch/work",
        )
    )
    assert c.pid > 0 and c.started_at.tzinfo is not None
    assert await c.wait() == 3
    assert c.exit_code == 3 and c.finished_at is not None and c.finished_at >= c.started_at
    assert texts(c) == ["from-host", "hello", "/scratch/work"]
    assert (tmp_path / "vol" / "out.txt").read_text() == "out\n"
    assert (tmp_path / "vol" / "work").is_dir()


@pytest.mark.asyncio
async def test_sandbox_isolation_and_host_paths(runtime: ContainerRuntime, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    launch = make_launch(
        tmp_path,
        sh("echo $$; ls /work 2>/dev/null || echo no-work; touch /data/x 2>&- || echo ro; ls -d $PY; pwd"),
        env={"PY": sys.base_prefix},
        mounts=[Mount(ro, "/data", read_only=True)],
        host_paths=[sys.base_prefix],
        working_dir="/app/sub",
    )
    c = await runtime.start(launch)
    assert await c.wait() == 0
    assert texts(c) == [
        "1",
        "no-work",
        "ro",
        sys.base_prefix,
        "/app/sub",
    ]  # the container's command is pid 1 of its own namespace


@pytest.mark.asyncio
async def test_wait_is_idempotent_and_concurrent(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("sleep 0.2; exit 5")))
    assert await asyncio.gather(*(c.wait() for _ in range(10))) == [5] * 10
    assert await c.wait() == 5


@pytest.mark.asyncio
async def test_missing_command_fails_to_start(runtime: ContainerRuntime, tmp_path: Path) -> None:
    """runc looks the command up before it starts the process: a missing one is a start error with its
    message, and nothing runs."""
    with pytest.raises(StartError, match=r'exec: "/no/such/binary": stat /no/such/binary: no such file'):
        await runtime.start(make_launch(tmp_path, ["/no/such/binary"]))
    with pytest.raises(StartError, match=r'exec: "no-such-tool": executable file not found in \$PATH'):
        await runtime.start(make_launch(tmp_path, ["no-such-tool"]))


@pytest.mark.asyncio
async def test_scratch_root_has_only_what_the_image_provides(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """A scratch-based image (distroless) has no /bin/sh; a static binary copied into a volume runs there, and
    the image's links exist."""
    busybox = shutil.which("busybox")
    if busybox is None or not is_static_elf(busybox):
        pytest.fail("needs a static busybox: Debian package busybox-static (./dev.sh installs it)")
    with pytest.raises(StartError, match=r'exec: "sh": executable file not found in \$PATH'):
        await any_runtime.start(make_launch(tmp_path, sh("true"), host_base=False))
    shutil.copy(busybox, tmp_path / "vol" / "busybox")
    launch = make_launch(
        tmp_path,
        ["/scratch/busybox", "sh", "-c", "ls /bin /usr 2>&1; readlink /lib64; echo ok"],
        host_base=False,
        links=[("/lib64", "usr/lib64")],
    )
    c = await any_runtime.start(launch)
    assert await c.wait() == 0
    out = texts(c)
    assert out[-2:] == ["usr/lib64", "ok"]
    assert any("/bin" in line and "No such file" in line for line in out)


@pytest.mark.asyncio
async def test_links_inside_a_bound_folder(runtime: ContainerRuntime, tmp_path: Path) -> None:
    """An image's link inside the host userland (python:3.11-slim's /usr/local/bin/python) works: that folder
    then holds the image's links only."""
    launch = make_launch(
        tmp_path,
        ["python", "-c", "print('py ok')"],
        links=[("/usr/local/bin/python", os.path.realpath(sys.executable))],
        host_paths=[sys.base_prefix],
    )
    c = await runtime.start(launch)
    assert await c.wait() == 0
    assert texts(c) == ["py ok"]


def test_bad_sandbox_name() -> None:
    with pytest.raises(ValueError):
        ContainerRuntime("docker")


@pytest.mark.asyncio
async def test_sandbox_none_runs_on_host(tmp_path: Path) -> None:
    rt = ContainerRuntime("none")
    c = await rt.start(make_launch(tmp_path, sh("pwd; echo $GREETING"), working_dir=str(tmp_path), mounts=[]))
    assert await c.wait() == 0
    assert texts(c) == [str(tmp_path), "hello"]
    c = await rt.start(
        make_launch(tmp_path, sh("echo ready; sleep 30"), "n2", working_dir=str(tmp_path), mounts=[])
    )
    await wait_for_log(c, "ready")
    assert await rt.exec(c, sh("pwd; echo $GREETING"), 5) == (0, f"{tmp_path}\nhello\n")
    assert await rt.exec(c, ["sleep", "31.5"], 0.3) == (-1, "timeout")
    assert 100 * 1024 < c.rss_bytes() < 64 << 20
    assert await c.stop(2) == 143


# signals


@pytest.mark.asyncio
async def test_signal_gives_128_plus_n(any_runtime: ContainerRuntime, tmp_path: Path) -> None:
    script = 'trap "echo got-usr1; exit 3" USR1; echo up; while :; do sleep 0.05; done'
    c = await any_runtime.start(make_launch(tmp_path, sh(script)))
    await wait_for_log(c, "up")  # its handler is set
    c.signal(signal.SIGUSR1)
    assert await asyncio.wait_for(c.wait(), ENDS) == 3
    c = await any_runtime.start(make_launch(tmp_path, sh("echo up; sleep 30"), name="c2"))
    await wait_for_log(c, "up")
    c.signal(signal.SIGKILL)
    assert await asyncio.wait_for(c.wait(), ENDS) == 137
    assert not c.oom_killed


@pytest.mark.asyncio
async def test_the_command_is_pid_1_and_ignores_signals_it_has_no_handler_for(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """runc execs the container's command as pid 1 of a new pid namespace; the kernel delivers a signal from
    outside to a namespace's init only if it has a handler for it (SIGKILL always: pid_namespaces(7)). A
    shell with no SIGTERM trap ignores the kubelet's SIGTERM and stops at the SIGKILL after the grace."""
    c = await any_runtime.start(make_launch(tmp_path, sh("echo pid=$$; while :; do sleep 0.05; done")))
    await wait_for_log(c, "pid=1")
    c.signal(signal.SIGTERM)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(c.wait(), 1.0)  # ignored: still running
    assert await c.stop(grace_seconds=0.5) == 137
    assert texts(c) == ["pid=1"]


@pytest.mark.asyncio
async def test_pid_1_can_kill_every_other_process_of_its_container(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """`kill -KILL -1` from a namespace's init signals every process of the namespace but itself (kill(2)):
    a container's command can end all it started, and goes on."""
    script = (
        "sleep 300 & (sleep 301 &); (setsid sleep 302 &); sleep 0.2; "
        "kill -KILL -1; sleep 0.5; ls -d /proc/[0-9]*; echo done; sleep 30"
    )
    c = await any_runtime.start(make_launch(tmp_path, sh(script)))
    await wait_for_log(c, "done")
    alive_in_container = [line for line in texts(c) if line.startswith("/proc/")]
    assert alive_in_container[0] == "/proc/1"
    assert len(alive_in_container) <= 2  # pid 1, and the `ls` that listed them
    assert c.running
    c.signal(signal.SIGKILL)
    assert await asyncio.wait_for(c.wait(), ENDS) == 137


@pytest.mark.asyncio
async def test_sigkill_gives_137_when_the_wrapper_sees_its_child_die_first(
    any_runtime: ContainerRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst scheduling of a kill, forced: after the namespace's pid 1 is SIGKILLed, the process the
    runtime spawned (bwrap / unshare) gets to react to its child's death before anything else is sent.
    util-linux unshare < 2.40 then exits 1 ("sigprocmask unblock failed", util-linux#2614) instead of dying
    of SIGKILL; the container must still report 137 (128 + SIGKILL), as runc/containerd do."""
    c = await any_runtime.start(make_launch(tmp_path, sh("echo up; sleep 30")))
    await wait_for_log(c, "up")
    init, spawned = c._init_pid(), c.pid
    assert init is not None
    real_kill = os.kill

    def kill_then_let_the_wrapper_react(pid: int, sig: int) -> None:
        real_kill(pid, sig)
        if pid == init and sig == signal.SIGKILL:
            deadline = time.monotonic() + ENDS  # a bound, not a measure: the wrapper reacts at once
            while time.monotonic() < deadline:
                try:
                    with open(f"/proc/{spawned}/stat", "rb") as f:
                        if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                            return
                except OSError:
                    return  # reaped already
                time.sleep(0.001)

    monkeypatch.setattr(os, "kill", kill_then_let_the_wrapper_react)
    c.signal(signal.SIGKILL)
    monkeypatch.undo()
    assert await asyncio.wait_for(c.wait(), ENDS) == 137
    assert "sigprocmask" not in " ".join(texts(c))


@pytest.mark.asyncio
async def test_stop_runs_term_trap(any_runtime: ContainerRuntime, tmp_path: Path) -> None:
    script = 'trap "echo got-term; exit 7" TERM; echo ready; while :; do sleep 0.1; done'
    c = await any_runtime.start(make_launch(tmp_path, sh(script)))
    await wait_for_log(c, "ready")
    t0 = time.monotonic()
    assert await c.stop(grace_seconds=5) == 7
    assert time.monotonic() - t0 < 2
    assert texts(c) == ["ready", "got-term"]
    assert await c.stop(5) == 7  # stopping a finished container just reports its exit code


@pytest.mark.asyncio
async def test_stop_kills_after_grace(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(
        make_launch(tmp_path, sh('trap "echo ignoring" TERM; echo ready; while :; do sleep 0.05; done'))
    )
    await wait_for_log(c, "ready")
    t0 = time.monotonic()
    assert await c.stop(grace_seconds=0.5) == 137
    assert 0.45 <= time.monotonic() - t0 < 3
    assert "ignoring" in texts(c)


@pytest.mark.asyncio
async def test_grandchildren_die_with_container(any_runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await any_runtime.start(
        make_launch(tmp_path, sh("sleep 300 & (sleep 301 &) ; echo ready; sleep 302"))
    )
    await wait_for_log(c, "ready")
    await asyncio.sleep(0.05)
    tree = c._tree()
    assert len(tree) >= 4  # sh, three sleeps (one orphaned to the namespace's pid 1)
    assert await c.stop(grace_seconds=0.5) == 137  # sh as pid 1 has no SIGTERM handler
    await asyncio.sleep(0.05)
    assert [p for p in tree if alive(p)] == []


@pytest.mark.asyncio
async def test_main_exit_ends_container_and_background_jobs(
    runtime: ContainerRuntime, tmp_path: Path
) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("sleep 300 & echo $! > /scratch/bg; sleep 0.3; exit 4")))
    while not (tmp_path / "vol" / "bg").exists():
        await asyncio.sleep(0.01)
    tree = c._tree()
    assert len(tree) >= 2
    t0 = time.monotonic()
    assert await asyncio.wait_for(c.wait(), ENDS) == 4
    assert time.monotonic() - t0 < 2
    await asyncio.sleep(0.05)
    assert [p for p in tree if alive(p)] == []


# logs


@pytest.mark.asyncio
async def test_cri_log_format(runtime: ContainerRuntime, tmp_path: Path) -> None:
    script = "echo one; echo two >&2; printf 'x%.0s' $(seq 20000); echo; printf tail"
    c = await runtime.start(make_launch(tmp_path, sh(script)))
    assert await c.wait() == 0
    raw = c.launch.log_path.read_bytes().splitlines()
    assert all(CRI_LINE.match(line) for line in raw)
    # stdout and stderr are read apart (as a runtime does): each keeps its order, not their interleaving
    records = {
        stream: [r.split(b" ", 3)[2:] for r in raw if r.split(b" ")[1] == stream]
        for stream in (b"stdout", b"stderr")
    }
    assert records[b"stdout"] == [
        [b"F", b"one"],
        [b"P", b"x" * 16384],
        [b"F", b"x" * (20000 - 16384)],
        [b"F", b"tail"],
    ]
    assert records[b"stderr"] == [[b"F", b"two"]]
    text = read_log(c.launch.log_path)
    assert text.endswith(b"\n")  # the unended "tail" is ended by read_log (it may come before "two")
    lines = text.splitlines()
    assert len(lines) == 4 and lines.pop(lines.index(b"two")) == b"two"
    assert lines == [b"one", b"x" * 20000, b"tail"]


def test_read_log_options(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(
        b"2026-12-02T18:20:01.100000000Z stdout F a\n"
        b"2026-12-02T18:20:02.000000000Z stderr F b\n"
        b"2026-12-02T18:20:03.123456789Z stdout P c1\n"
        b"2026-12-02T18:20:03.123456789Z stdout F c2\n"
        b"2026-12-02T18:20:04.000000000Z stdout F d\n"
        b"2026-12-02T18:20:05.0000"  # a record still being written: not returned
    )
    assert read_log(log) == b"a\nb\nc1c2\nd\n"
    assert read_log(log, timestamps=True) == (
        b"2026-12-02T18:20:01.1Z a\n2026-12-02T18:20:02Z b\n2026-12-02T18:20:03.123456789Z c1"
        b"2026-12-02T18:20:03.123456789Z c2\n2026-12-02T18:20:04Z d\n"
    )
    assert read_log(log, tail_lines=2) == b"c2\nd\n"
    assert read_log(log, tail_lines=0) == b""
    assert read_log(log, tail_lines=100) == b"a\nb\nc1c2\nd\n"
    assert read_log(log, since_time=datetime(2026, 12, 2, 18, 20, 2, tzinfo=UTC)) == b"b\nc1c2\nd\n"
    since = datetime(2026, 12, 2, 19, 20, 3, 500000, tzinfo=UTC) + timedelta(hours=-1)
    assert read_log(log, since_time=since) == b"d\n"
    assert read_log(log, limit_bytes=3) == b"a\nb"
    assert read_log(log, tail_lines=3, since_time=datetime(2026, 12, 2, 18, 20, 4), limit_bytes=100) == b"d\n"
    assert read_log(tmp_path / "missing.log") == b""


@pytest.mark.asyncio
async def test_follow_log_live_and_ends_after_exit(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("echo first; sleep 0.6; echo second")))
    await wait_for_log(c, "first")
    got: list[tuple[float, bytes]] = []
    t0 = time.monotonic()
    async for chunk in follow_log(
        c.launch.log_path, timestamps=False, is_running=lambda: c.running, force_check=0.5
    ):
        got.append((time.monotonic() - t0, chunk))
    assert b"".join(ch for _, ch in got) == b"first\nsecond\n"
    assert got[0][1] == b"first\n" and got[0][0] < 0.3  # existing lines come at once, the new one later
    assert c.finished_at is not None


@pytest.mark.asyncio
async def test_follow_log_options(tmp_path: Path) -> None:
    log = tmp_path / "f.log"
    running = True
    out: list[bytes] = []

    async def reader() -> None:
        async for chunk in follow_log(
            log, timestamps=True, tail_lines=1, is_running=lambda: running, force_check=0.2
        ):
            out.append(chunk)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.05)  # file not there yet: the follower waits for it
    log.write_bytes(
        b"2026-12-02T18:20:01.000000000Z stdout F old\n2026-12-02T18:20:02.500000000Z stdout F kept\n"
    )
    await asyncio.sleep(0.05)
    with log.open("ab") as f:
        f.write(b"2026-12-02T18:20:03.000000000Z stdout F ne")
        f.flush()
        await asyncio.sleep(0.05)
        f.write(b"w\n")
    await asyncio.sleep(0.05)
    running = False
    await asyncio.wait_for(task, 2)
    assert b"".join(out) == b"2026-12-02T18:20:02.5Z kept\n2026-12-02T18:20:03Z new\n"


# termination


@pytest.mark.asyncio
async def test_termination_message(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("echo log; printf 'done:42' > /dev/termination-log")))
    assert await c.wait() == 0
    assert c.termination_message() == "done:42"
    assert c.termination_message("FallbackToLogsOnError") == "done:42"

    c = await runtime.start(
        make_launch(tmp_path, sh("head -c 5000 /dev/zero | tr '\\0' m > /dev/termination-log"), "e")
    )
    await c.wait()
    assert c.termination_message() == "m" * 4096

    c = await runtime.start(
        make_launch(tmp_path, sh("for i in $(seq 1 100); do echo line$i; done; exit 1"), "f")
    )
    assert await c.wait() == 1
    assert c.termination_message("File") == ""
    fallback = c.termination_message("FallbackToLogsOnError")
    assert fallback.startswith("line21\n") and fallback.endswith("line100\n")

    c = await runtime.start(make_launch(tmp_path, sh("echo quiet-success"), "g"))
    assert await c.wait() == 0
    assert c.termination_message("FallbackToLogsOnError") == ""  # fallback only on failure


# memory


@pytest.mark.asyncio
async def test_rss_bytes(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("echo ready; sleep 5")))
    await wait_for_log(c, "ready")
    rss = c.rss_bytes()
    assert 100 * 1024 < rss < 64 * 1024 * 1024
    assert await c.stop(0.5) == 137  # sh as pid 1 has no SIGTERM handler
    assert c.rss_bytes() == 0


@pytest.mark.asyncio
async def test_memory_limit_oom_kill(runtime: ContainerRuntime, tmp_path: Path) -> None:
    hog = "import time\nchunks = []\nwhile True:\n    chunks.append(b'x' * (8 << 20))\n    time.sleep(0.02)\n"
    launch = make_launch(
        tmp_path,
        [os.path.realpath(sys.executable), "-c", hog],
        host_paths=[sys.base_prefix],
        memory_limit_bytes=64 * 1024 * 1024,
    )
    c = await runtime.start(launch)
    assert await asyncio.wait_for(c.wait(), ENDS) == 137
    assert c.oom_killed


@pytest.mark.asyncio
async def test_memory_limit_resized_in_place(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("echo ready; sleep 30")))
    await wait_for_log(c, "ready")
    assert c.memory_limit_bytes is None
    c.memory_limit_bytes = 1 << 30  # raised: nothing happens
    await asyncio.sleep(0.15)
    assert c.running
    c.memory_limit_bytes = 4096  # lowered below the current RSS: OOM-killed
    assert await asyncio.wait_for(c.wait(), ENDS) == 137
    assert c.oom_killed


@pytest.mark.asyncio
async def test_memory_limit_not_hit(runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("sleep 0.3; exit 0"), memory_limit_bytes=256 << 20))
    assert await c.wait() == 0
    assert not c.oom_killed


# exec


@pytest.mark.asyncio
async def test_exec_in_container_namespace(any_runtime: ContainerRuntime, tmp_path: Path) -> None:
    c = await any_runtime.start(
        make_launch(tmp_path, sh("echo ready > /scratch/flag; sleep 30"), working_dir="/scratch")
    )
    while not (tmp_path / "vol" / "flag").exists():
        await asyncio.sleep(0.01)
    code, out = await any_runtime.exec(
        c, sh("pwd; cat /scratch/flag; echo $GREETING $EXTRA; echo err >&2; exit 2"), 5, env={"EXTRA": "more"}
    )
    assert (code, out) == (2, "/scratch\nready\nhello more\nerr\n")
    code, out = await any_runtime.exec(c, sh("cat /proc/1/cmdline | tr '\\0' ' '"), 5)
    assert code == 0 and "sleep 30" in out  # same pid namespace as the container
    t0 = time.monotonic()
    assert await any_runtime.exec(c, sh("sleep 31.25; echo never"), 0.5) == (-1, "timeout")
    assert time.monotonic() - t0 < 15  # the 0.5 s timeout, not the 31 s command (loose: a loaded machine)
    # The timed-out command is killed: gone from the host's process table (reaping may take a moment).
    deadline = time.monotonic() + 10
    while [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(int(p)) == b"sleep\x0031.25\x00"]:
        assert time.monotonic() < deadline, "the timed-out exec's process is still alive"
        await asyncio.sleep(0.05)
    assert await c.stop(0.5) == 137  # sh as pid 1 has no SIGTERM handler
    assert await any_runtime.exec(c, ["true"], 5) == (-1, "container is not running")


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.asyncio
async def test_exec_right_after_start_does_not_steal_main_pid(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """An exec (readiness probe) issued the moment start() returns must not take the main process's place:
    SIGTERM still reaches the main process, whose trap runs (exit 7), instead of a SIGKILL after the grace."""
    script = 'trap "exit 7" TERM; echo ready; while :; do sleep 0.05; done'
    for i in range(6):
        c = await any_runtime.start(make_launch(tmp_path, sh(script), name=f"c{i}"))
        probe = asyncio.ensure_future(any_runtime.exec(c, sh("sleep 0.3"), 5))
        await wait_for_log(c, "ready")
        assert await c.stop(grace_seconds=3) == 7, f"container {i}: SIGTERM did not reach the main process"
        await probe


@pytest.mark.asyncio
async def test_container_starts_with_default_signals_even_if_the_host_ignores_some(
    any_runtime: ContainerRuntime, tmp_path: Path
) -> None:
    """A runtime starts containers with every signal at its default action: a cluster started in the
    background (SIGINT and SIGQUIT ignored, inherited across exec) must not pass that on to its containers."""
    script = 'trap "echo got-int; exit 5" INT; echo ready; while :; do sleep 0.05; done'
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        c = await any_runtime.start(make_launch(tmp_path, sh(script)))
    finally:
        signal.signal(signal.SIGINT, previous)
    await wait_for_log(c, "ready")
    c.signal(signal.SIGINT)
    assert await asyncio.wait_for(c.wait(), ENDS) == 5
    assert texts(c) == ["ready", "got-int"]
