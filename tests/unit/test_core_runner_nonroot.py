"""The chain pod's runner works as a non-root user, as a `pod_security="restricted"` chain runs it: the init
container's script and a slot's runner run under uid 65532 (gid 0, no capabilities: `setpriv` after the
mounts, as runc switches to the OCI process user after setting up the container's root) in the pod's layout
(`/kruise-chain` written by the init container then mounted read-only, the slot's state and scratch as
emptyDirs, which the kubelet makes mode 0777, the downwardAPI folder with 0444 files, the termination log
mode 0666), with the static busybox of the runner image."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from airflow_kruise_chain.core import ResultMarker, parse_marker, runner_script
from airflow_kruise_chain.core.manifest import (
    INIT_SCRIPT,
    READINESS_COMMAND,
    RESTRICTED_RUN_AS_USER,
    STARTUP_COMMAND,
)
from airflow_kruise_chain.core.wire import META_MOUNT, RUNNER_COMMAND, RUNNER_MOUNT, RUNNER_STATE, run_spec

BUSYBOX = shutil.which("busybox")
BWRAP, SETPRIV = shutil.which("bwrap"), shutil.which("setpriv")
pytestmark = pytest.mark.skipif(
    BUSYBOX is None or BWRAP is None or SETPRIV is None or os.geteuid() != 0,
    reason="needs a static busybox, bwrap and setpriv, run as root (to switch to the non-root user)",
)
USER = ["--reuid", str(RESTRICTED_RUN_AS_USER), "--regid", "0", "--clear-groups", "--inh-caps=-all"]


def container(binds: list[tuple[Path, str, bool]], argv: list[str], env: dict[str, str]) -> list[str]:
    """`argv` as a runtime runs a container's command: its own root (the host's /usr read-only as the
    image's userland, the runner image's busybox at /bin/busybox) and pid namespace, the volumes bound, then
    the process user switched to the non-root one."""
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
    cmd += ["--unshare-pid", "--as-pid-1", "--die-with-parent", "--clearenv"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return [*cmd, "--", SETPRIV, *USER, "--", *argv]


def test_init_container_and_runner_work_as_non_root(tmp_path: Path) -> None:
    runner, state, meta, scratch = (tmp_path / d for d in ("runner", "state", "meta", "scratch"))
    for folder in (runner, state, scratch):  # emptyDirs (kubelet: 0777)
        folder.mkdir()
        folder.chmod(0o777)
    meta.mkdir()
    term = tmp_path / "termination-log"
    term.write_text("")
    term.chmod(0o666)
    stage = 'printf \'{"uid": %s}\' "$(id -u)" >"$CHAIN_OUTPUT"'
    spec = run_spec(
        generation=1, token="t1", stage="s", argv=["/bin/sh", "-c", stage], env={}, outputs_max=4096
    )
    (meta / "slot-a").write_text(spec)
    (meta / "slot-a").chmod(0o444)

    # the init container (the runner image: a static busybox at /bin/busybox) installs the runner
    script = base64.b64encode(runner_script().encode()).decode()
    init = container(
        [(runner, RUNNER_MOUNT, False), (Path(BUSYBOX), "/bin/busybox", True)],
        ["/bin/busybox", "sh", "-c", INIT_SCRIPT],
        {"KC_RUNNER_SCRIPT": script, "PATH": "/usr/bin:/bin"},
    )
    done = subprocess.run(init, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (runner / "bin" / "runner.sh").stat().st_uid == RESTRICTED_RUN_AS_USER

    # a slot runs the runner from the read-only volume, as the same user, and the stage runs as that user
    binds = [
        (runner, RUNNER_MOUNT, True),
        (state, RUNNER_STATE, False),
        (meta, META_MOUNT, True),
        (scratch, "/scratch", False),
        (term, "/dev/termination-log", False),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "KC_SLOT": "slot-a",
        "KC_GENERATION": "1",
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
        assert marker.outputs == {"uid": RESTRICTED_RUN_AS_USER}
        # the slot's probes pass as that user too (the kubelet execs them in the container)
        for probe in (STARTUP_COMMAND, READINESS_COMMAND):
            check = container(
                binds, list(probe), {"KC_SLOT": "slot-a", "KC_GENERATION": "1", "PATH": "/usr/bin"}
            )
            assert subprocess.run(check, timeout=30).returncode == 0, probe
    finally:
        slot.terminate()
        slot.wait(timeout=10)
