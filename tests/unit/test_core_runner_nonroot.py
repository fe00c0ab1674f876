"""The chain pod's runner works as a non-root user, as a `pod_security="restricted"` chain runs it: the init
container's script and a slot's runner run under uid 65532 (gid 0, no capabilities: `setpriv` after the
mounts, as runc switches to the OCI process user after setting up the container's root) in the pod's layout
(`/kruise-chain` written by the init container then mounted read-only, the slot's state and scratch as
emptyDirs, which the kubelet makes mode 0777, the downwardAPI folder with 0444 files, the termination log
mode 0666), with the static busybox of the busybox image; and as root with containerd's default capabilities
less the chain's drops, against a root stage that locks the state and termination log away."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest
from kruise_local.capabilities import DEFAULT_CAPABILITIES

from airflow_kruise_chain.core import ResultMarker, parse_marker, runner_script
from airflow_kruise_chain.core.fastgo import GO_COMMAND
from airflow_kruise_chain.core.manifest import (
    RESTRICTED_RUN_AS_USER,
    STARTUP_COMMAND,
    UNREADABLE_RUNNER_CAPABILITIES,
)
from airflow_kruise_chain.core.runnerinstall import CHECK_FAILED_EXIT
from airflow_kruise_chain.core.wire import META_MOUNT, RUNNER_COMMAND, RUNNER_MOUNT, RUNNER_STATE, run_spec
from tests.unit.test_core_runner import pid_1

BUSYBOX = shutil.which("busybox")
BWRAP, SETPRIV, NSENTER = shutil.which("bwrap"), shutil.which("setpriv"), shutil.which("nsenter")
pytestmark = pytest.mark.skipif(
    BUSYBOX is None or BWRAP is None or SETPRIV is None or NSENTER is None or os.geteuid() != 0,
    reason="needs a static busybox, bwrap, setpriv and nsenter, run as root (to switch to the non-root user)",
)
USER = ["--reuid", str(RESTRICTED_RUN_AS_USER), "--regid", "0", "--clear-groups", "--inh-caps=-all"]


def container(
    binds: list[tuple[Path, str, bool]], argv: list[str], env: dict[str, str], root: bool = False
) -> list[str]:
    """`argv` as a runtime runs a container's command: its own root (the host's /usr read-only as the
    image's userland) and pid namespace, the volumes bound, then
    the process user switched to the non-root one; `root`: run as root with containerd's default
    capabilities less the chain's drops (a chain pod of an image whose user is root)."""
    cmd = [BWRAP, "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]
    cmd += [
        "--symlink",
        "usr/lib64",
        "/lib64",
        "--ro-bind",
        "/etc",
        "/etc",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    cmd += ["--tmpfs", "/tmp"]
    for host, path, read_only in binds:
        cmd += ["--ro-bind" if read_only else "--bind", str(host), path]
    cmd += ["--cap-drop", "ALL"]
    if root:
        kept = set(DEFAULT_CAPABILITIES) - {f"CAP_{c}" for c in UNREADABLE_RUNNER_CAPABILITIES}
        for cap in sorted(kept):
            cmd += ["--cap-add", cap]
    else:
        # a restricted chain's containers drop ALL capabilities: the user switch needs SETUID and SETGID
        # only, and they go with it (an exec must not hold DAC_OVERRIDE: the runner's busybox would count
        # as readable)
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd += ["--unshare-pid", "--as-pid-1", "--die-with-parent", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", *argv] if root else [*cmd, "--", SETPRIV, *USER, "--", *argv]


def stop(slot: subprocess.Popen) -> None:
    """End a slot started with `container`: its pid 1 (SIGKILL from here, an ancestor pid namespace, reaches
    a namespace's init), then bwrap. Ending bwrap alone left a non-root runner running, reparented to init:
    the user switch clears the parent-death signal bwrap's `--die-with-parent` sets (prctl(2)), and even set
    again it does not reach a non-root init from bwrap (observed)."""
    children = Path(f"/proc/{slot.pid}/task/{slot.pid}/children")
    for pid in children.read_text().split() if children.exists() else ():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    slot.kill()
    slot.wait(timeout=10)


APPLETS = ("sh", "sha256sum", "cp", "chmod", "mkdir", "mv", "cat", "ls")


def init_container(runner: Path, script: str, root_capabilities: set[str] | None = None) -> list[str]:
    """The chain pod's init container as a runtime runs it, as the non-root user (or as root with
    `root_capabilities`): the busybox image's root (`FROM scratch`: /bin/busybox and its applet links, PATH
    /bin; the host's /usr only for setpriv), the kubelet's `/etc/hosts`, the runner's emptyDir, and the env
    as the kubelet resolves it: ``KC_RUNNER`` the ConfigMap's value (here `script`), ``KC_RUNNER_SHA256``
    the pod spec's."""
    spec = _init_spec()
    cmd = [
        BWRAP,
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/lib",
        "/lib",
        "--symlink",
        "usr/lib64",
        "/lib64",
    ]
    cmd += ["--dir", "/bin", "--ro-bind", str(BUSYBOX), "/bin/busybox"]
    cmd += ["--dir", "/etc", "--ro-bind", "/etc/hosts", "/etc/hosts"]  # the kubelet's (here the host's)
    for applet in APPLETS:
        cmd += ["--symlink", "busybox", f"/bin/{applet}"]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--bind", str(runner), RUNNER_MOUNT, "--cap-drop", "ALL"]
    for cap in sorted(root_capabilities if root_capabilities is not None else {"CAP_SETUID", "CAP_SETGID"}):
        cmd += ["--cap-add", cap]
    cmd += ["--unshare-pid", "--as-pid-1", "--die-with-parent", "--clearenv", "--setenv", "PATH", "/bin"]
    for env in spec["env"]:
        value = script if "valueFrom" in env else env["value"]
        cmd += ["--setenv", env["name"], value]
    user = [SETPRIV, *USER, "--"] if root_capabilities is None else []
    return [*cmd, "--", *user, *spec["command"]]


def _init_spec() -> dict:
    from airflow_kruise_chain.core import ChainSpec, StageSpec, build_chain_pod

    chain = ChainSpec(name="c", namespace="ns", stages=[StageSpec("s", "busybox:1.36", ["true"])])
    pod = build_chain_pod(chain, pod_name="p", dag_id="d", run_id="r", first_images=chain.first_images)
    return pod["spec"]["initContainers"][0]


def _emptydir(path: Path) -> Path:
    path.mkdir()
    path.chmod(0o777)  # the kubelet's emptyDir mode
    return path


def test_a_runner_that_is_not_the_providers_is_refused_before_anything_is_installed(tmp_path: Path) -> None:
    runner = _emptydir(tmp_path / "runner")
    for other in (
        runner_script().replace("runner (v", "runner (v0", 1),
        runner_script() + "\n",
        runner_script()[:-1],
        "",
    ):
        done = subprocess.run(init_container(runner, other), capture_output=True, text=True, timeout=30)
        assert done.returncode == CHECK_FAILED_EXIT, done.stderr
        assert not (runner / "bin").exists()  # nothing installed, nothing run


def test_the_install_gives_the_runner_and_its_busybox_their_modes_and_can_run_again(tmp_path: Path) -> None:
    runner = _emptydir(tmp_path / "runner")
    for _ in range(2):  # an init container runs again when its pod's sandbox is made again
        done = subprocess.run(
            init_container(runner, runner_script()), capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in runner.iterdir()) == ["bin", "hosts"]
        # the pod's /etc/hosts, which the slots mount read-only (manifest.HOSTS_MOUNT)
        assert (runner / "hosts").read_bytes() == Path("/etc/hosts").read_bytes()
        assert sorted(p.name for p in (runner / "bin").iterdir()) == ["busybox", "runner"]
        installed = runner / "bin" / "runner"
        assert installed.read_text() == runner_script()
        mode = stat.S_IMODE(installed.stat().st_mode)
        assert (installed.stat().st_uid, mode) == (RESTRICTED_RUN_AS_USER, 0o555)
        assert stat.S_IMODE((runner / "bin" / "busybox").stat().st_mode) == 0o111  # execute-only
        assert (runner / "bin" / "busybox").stat().st_size == Path(str(BUSYBOX)).stat().st_size


def slot_files(tmp_path: Path) -> tuple[Path, Path, Path, Path, Path]:
    """A slot's mounts as the kubelet makes them: the runner, state and scratch emptyDirs (0777), the
    downwardAPI folder and the termination log file (kuberuntime_container.go makeMounts: 0666)."""
    runner, state, meta, scratch = (tmp_path / d for d in ("runner", "state", "meta", "scratch"))
    for folder in (runner, state, scratch):
        folder.mkdir()
        folder.chmod(0o777)
    meta.mkdir()
    term = tmp_path / "termination-log"
    term.write_text("")
    term.chmod(0o666)
    return runner, state, meta, scratch, term


def slot_binds(
    runner: Path, state: Path, meta: Path, scratch: Path, term: Path
) -> list[tuple[Path, str, bool]]:
    """`slot_files` where a slot's container mounts them (read-only: the runner and the downwardAPI)."""
    return [
        (runner, RUNNER_MOUNT, True),
        (state, RUNNER_STATE, False),
        (meta, META_MOUNT, True),
        (scratch, "/scratch", False),
        (term, "/dev/termination-log", False),
    ]


def test_init_container_and_runner_work_as_non_root(tmp_path: Path) -> None:
    runner, state, meta, scratch, term = slot_files(tmp_path)
    # the stage, of the runner's user, cannot reach the runner (not dumpable: the kernel exec'd the runner
    # script through its `#!` line, whose busybox is execute-only), neither its memory nor its environ nor
    # its root; it can reach its own (its /bin/sh is readable: the check is not vacuous)
    reach = (
        "$(cat /proc/1/environ >/dev/null 2>&1 || ls /proc/1/root/ >/dev/null 2>&1 || "
        "dd if=/proc/1/mem bs=1 count=1 >/dev/null 2>&1 && echo 1 || echo 0)"
    )
    own = "$(cat /proc/self/environ >/dev/null 2>&1 && echo 1 || echo 0)"
    pid1 = "$(tr '\\0' ' ' </proc/1/cmdline)"
    # and gets the container's env (the image's PATH and ENV) without the runner's KC_* (its run spec, token)
    stage = (
        f'printf \'{{"uid": %s, "reached": %s, "own": %s, "pid1": "%s", "env": "%s|%s|%s"}}\' "$(id -u)" '
        f'"{reach}" "{own}" "{pid1}" "$PATH" "$IMAGE_VAR" "${{KC_RUN:+leaked}}" >"$CHAIN_OUTPUT"'
    )
    spec = run_spec(
        generation=1, token="t1", stage="s", argv=["/bin/sh", "-c", stage], env={}, outputs_max=4096
    )
    (meta / "slot-a").write_text(spec)
    (meta / "slot-a").chmod(0o444)

    # the init container (the busybox image: its shell, the runner from the ConfigMap as env) checks the
    # script and installs the runner, its busybox execute-only
    done = subprocess.run(init_container(runner, runner_script()), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (runner / "bin" / "runner").stat().st_uid == RESTRICTED_RUN_AS_USER
    assert stat.S_IMODE((runner / "bin" / "runner").stat().st_mode) == 0o555
    assert stat.S_IMODE((runner / "bin" / "busybox").stat().st_mode) == 0o111

    # a slot runs the runner from the read-only volume, as the same user, and the stage runs as that user
    binds = slot_binds(runner, state, meta, scratch, term)
    env = {
        "PATH": "/usr/bin:/bin",
        "IMAGE_VAR": "from the image",
        "KC_SLOT": "slot-a",
        "KC_RUN": spec,
        "KC_SCRATCH": "/scratch",
        "KC_STATE": RUNNER_STATE,
        "KC_META": META_MOUNT,
    }
    slot = subprocess.Popen(container(binds, list(RUNNER_COMMAND), env), stdout=subprocess.PIPE, text=True)
    try:
        assert slot.stdout is not None
        marker = None
        for line in slot.stdout:
            parsed = parse_marker(line.rstrip("\n"))
            if isinstance(parsed, ResultMarker):
                marker = parsed
                break
        assert marker is not None and marker.exit_code == 0, marker
        assert marker.outputs == {
            "uid": RESTRICTED_RUN_AS_USER,
            "reached": 0,
            "own": 1,
            # the slot's command is the one path: the kernel ran its `#!` line, the busybox's sh
            "pid1": "/kruise-chain/bin/busybox sh /kruise-chain/bin/runner ",
            "env": "/usr/bin:/bin|from the image|",
        }
        # the slot's startup probe passes as that user too (the kubelet execs it in the container: its pid
        # and mount namespaces, where pid 1 is the runner its serving record names)
        check = [NSENTER, "-t", str(pid_1(slot)), "-p", "-m", "--", SETPRIV, *USER, "--", *STARTUP_COMMAND]
        probe_env = {"KC_SLOT": "slot-a", "PATH": "/usr/bin"}
        assert subprocess.run(check, env=probe_env, timeout=30).returncode == 0
    finally:
        stop(slot)


# A root stage (the image's user is root: it keeps CHOWN and FOWNER, not DAC_OVERRIDE) takes every record
# path, the slot's state folder and the termination log away from the runner: given to another user, mode
# 000, nested folders included, and a future generation's folder planted.
ROOT_ATTACK = r"""
printf '{"left": true}' > "$CHAIN_OUTPUT"
cd /kruise-chain-state || exit 9
mkdir -p gen-2/deep/deeper && : > gen-2/deep/deeper/f && chown -R 1234:1234 gen-2
chmod 000 gen-2/deep/deeper gen-2/deep gen-2
for f in slot-a.started slot-a.serving gen-1/outputs.json gen-1/started gen-1; do
  chown 1234:1234 "$f" && chmod 000 "$f"
done
chown 1234:1234 /dev/termination-log . && chmod 000 /dev/termination-log . && echo ATTACKED
exit 3
"""


def test_a_root_stage_taking_the_state_and_termination_log_away_breaks_nothing(tmp_path: Path) -> None:
    runner, state, meta, scratch, term = slot_files(tmp_path)
    done = subprocess.run(init_container(runner, runner_script()), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr

    def assign(generation: int, script: str) -> str:
        spec = run_spec(
            generation=generation,
            token=f"t{generation}",
            stage=f"s{generation}",
            argv=["/bin/sh", "-c", script],
            env={},
            outputs_max=4096,
        )
        (meta / ".new").write_text(spec)
        (meta / ".new").rename(meta / "slot-a")
        return spec

    spec = assign(1, ROOT_ATTACK)
    binds = slot_binds(runner, state, meta, scratch, term)
    env = {"PATH": "/usr/bin:/bin", "KC_SLOT": "slot-a", "KC_RUN": spec, "KC_STATE": RUNNER_STATE}
    env |= {"KC_META": META_MOUNT, "KC_SCRATCH": "/scratch"}
    slot = subprocess.Popen(
        container(binds, list(RUNNER_COMMAND), env, root=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []

    def result() -> ResultMarker:
        assert slot.stdout is not None
        for line in slot.stdout:
            lines.append(line)
            parsed = parse_marker(line.rstrip("\n"))
            if isinstance(parsed, ResultMarker):
                return parsed
        raise AssertionError(f"the runner ended without a result: {lines}")

    try:
        first = result()
        assert "ATTACKED\n" in lines
        assert (first.generation, first.exit_code, first.outputs) == (1, 3, {"left": True}), lines
        assert (state / "gen-1" / "exit_code").read_text() == "3\n"
        assert (state / "slot-a.serving").is_file()  # the startup probe's record, made again after the wipe
        assert parse_marker(term.read_text()) == first  # the termination message is this generation's
        # the next stage runs normally and its result is recorded
        assign(2, 'id -u >/dev/null && printf \'{"next": true}\' > "$CHAIN_OUTPUT"')
        second = result()
        assert (second.generation, second.exit_code, second.outputs) == (2, 0, {"next": True}), lines
        assert (state / "gen-2" / "exit_code").read_text() == "0\n"
        assert parse_marker(term.read_text()) == second
        assert not any("error" in line for line in lines), lines
    finally:
        stop(slot)


def test_the_fast_go_reaches_a_runner_that_is_not_dumpable(tmp_path: Path) -> None:
    """`runner --go LENGTH` as the kubelet execs it into a slot of a restricted chain: the same user, no
    capabilities, the runner's busybox execute-only, so the exec'd runner is not dumpable either. A child of
    a process that is not dumpable may not open that process's `/proc/PID/fd` (`proc_fd_access_allowed`,
    `ptrace_may_access`: only its own thread group may), so the go reads the spec it wrote through its own
    descriptor or a builtin, never through a command that opens `/proc/$$/fd`; generation 2 then runs."""
    runner, state, meta, scratch, term = slot_files(tmp_path)
    first = run_spec(generation=1, token="t1", stage="s1", argv=["/bin/true"], env={}, outputs_max=4096)
    (meta / "slot-a").write_text(first)
    (meta / "slot-a").chmod(0o444)
    done = subprocess.run(init_container(runner, runner_script()), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    binds = slot_binds(runner, state, meta, scratch, term)
    env = {"PATH": "/usr/bin:/bin", "KC_SLOT": "slot-a", "KC_RUN": first, "KC_SCRATCH": "/scratch"}
    env |= {"KC_STATE": RUNNER_STATE, "KC_META": META_MOUNT}
    slot = subprocess.Popen(container(binds, list(RUNNER_COMMAND), env), stdout=subprocess.PIPE, text=True)
    try:
        assert slot.stdout is not None
        results: list[ResultMarker] = []
        for line in slot.stdout:
            parsed = parse_marker(line.rstrip("\n"))
            if isinstance(parsed, ResultMarker):
                results.append(parsed)
                if len(results) == 1:  # generation 1 ended: the go of generation 2, by exec
                    second = run_spec(
                        generation=2, token="t2", stage="s2", argv=["/bin/true"], env={}, outputs_max=4096
                    ).encode()
                    # nsenter's own user switch, as runc's exec makes it: the capabilities go with the
                    # switch, before the exec (setpriv keeps them until its exec, where the kernel decides
                    # whether the runner is dumpable: it then is, and nothing is checked)
                    user = ["-S", str(RESTRICTED_RUN_AS_USER), "-G", "0"]
                    go = [NSENTER, "-t", str(pid_1(slot)), "-p", "-m", *user, "--", *GO_COMMAND]
                    exec_env = {"KC_SLOT": "slot-a", "PATH": "/usr/bin"}
                    answer = subprocess.run(
                        [*go, str(len(second))], input=second, env=exec_env, capture_output=True, timeout=30
                    )
                    assert answer.returncode == 0, answer.stderr.decode()
                else:
                    break
        assert [(r.generation, r.exit_code) for r in results] == [(1, 0), (2, 0)]
    finally:
        stop(slot)
