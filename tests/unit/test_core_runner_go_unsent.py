"""A fast go opened before its swap's patch (`fastgo.open_go`) whose patch failed: `runner --go LENGTH`
already runs, waiting on its stdin, and the task closes it with nothing sent (or the connection drops
mid-spec). The runner starts nothing and no file of it is left in the slot's state; the generation's own
delivery later still starts it once."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, sh_stage
from tests.unit.test_core_runner_go import go, go_command, reading_stdin, starts

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")


def test_an_opened_go_closed_with_nothing_or_part_of_its_spec_starts_nothing(slot, runners) -> None:
    runner = runners(slot, None, 0)
    time.sleep(0.3)
    stage = sh_stage("echo once")
    data = slot.spec(stage, 1).encode()
    for sent in (b"", data[: len(data) // 2]):
        opened = subprocess.Popen(
            base.in_container(runner, go_command(slot, len(data))),
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=runner.env,
        )
        try:
            reading_stdin(opened)  # it runs before the patch is decided, waiting for its spec
            _, err = opened.communicate(sent, timeout=10)  # the patch failed: stdin closed
        finally:
            opened.kill()
        assert opened.returncode == 65 and b"not a run spec" in err
    time.sleep(0.5)
    assert starts(runner, 1) == 0
    assert not list(slot.state.glob(f"{slot.name}.go*"))
    assert go(slot, runner, slot.spec(stage, 1)).returncode == 0  # the next, patched go: started once
    runner.wait_line(lambda line: line == "once")
    assert runner.result(1).exit_code == 0 and starts(runner, 1) == 1
