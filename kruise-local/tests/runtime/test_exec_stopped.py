"""An exec into a container whose main process has just ended, before the runtime has seen its exit: runc's
exec (`exec.go` `execProcess`) reads the container's state first, and a container whose init process is
gone (or a zombie) is Stopped: `cannot exec in a stopped container`, which containerd's shim passes on as
`OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown` (the kubelet's streaming
`Exec` answers it as an InternalError). Once the runtime has seen the exit the kubelet refuses the exec
itself (`container not found`: tests/runtime/test_exec.py). Before, the local runtime looked the command up
in the dead process's root and said `permission denied`. The window is held open by blocking the runtime's
loop (its exit callback cannot run), not by timing."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from kruise_local.cri import StartError
from kruise_local.runtime import ContainerRuntime
from runtime_helpers import ENDS, alive, make_launch, sh, wait_for_log

STOPPED = "OCI runtime exec failed: exec failed: cannot exec in a stopped container: unknown"


@pytest.mark.asyncio
async def test_an_exec_into_a_container_whose_process_just_ended_finds_it_stopped(
    runtime: ContainerRuntime, tmp_path: Path
) -> None:
    c = await runtime.start(make_launch(tmp_path, sh("echo ready; exec sleep 300")))
    await wait_for_log(c, "ready")
    main = c._main_pid()
    assert main is not None
    os.kill(main, signal.SIGKILL)
    deadline = time.monotonic() + ENDS
    while alive(main):  # the loop is blocked: the runtime cannot record the exit meanwhile
        assert time.monotonic() < deadline, "the killed process lives on"
        time.sleep(0.01)
    assert c.finished_at is None
    with pytest.raises(StartError) as err:
        await runtime.spawn_exec(c, ["true"], False)
    assert str(err.value) == STOPPED
    await c.wait()  # the runtime records the end once its loop runs again
