"""What a stage may write besides the scratch reaches no later stage of its slot (issue 37): the slot's
temporary folders (`KC_TMP`, /tmp and /dev/shm in a chain pod, volumes of that slot alone) are emptied once
the stage's processes are gone, and found empty before the next stage starts, which gets a fresh, empty HOME
in the first of them; a stage never runs over what the runner could not remove; and a generation that changed
the container's /dev (the runtime's tmpfs, which a read-only root filesystem leaves writable by root) is that
container's last: the runner records its result and exits, so that the kubelet starts the container afresh.
The runner is run for real, as pid 1 of its own pid namespace, as `tests/unit/test_core_runner.py` runs it."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, BWRAP, TIMEOUT, Slot, sh_stage

slot = base.slot  # the runner tests' fixtures: one slot's folders, runners killed at the end
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")

LEAVE = r"""
echo "home=$HOME"
mkdir -p "$HOME/.config" && echo mine > "$HOME/.config/plant" && echo 'echo HIJACKED' > "$HOME/.profile"
for d in $DIRS; do
  echo mine > "$d/plant"; mkdir -p "$d/.hidden/deep"; echo mine > "$d/.hidden/deep/x"
  mkdir "$d/locked" && echo mine > "$d/locked/x" && chmod 000 "$d/locked"
  ln -s /etc/passwd "$d/link"; mkfifo "$d/fifo"
done
"""
LOOK = r"""
listing=$(for d in "$HOME" $DIRS; do printf '%s=' "$d"; ls -A "$d" | tr '\n' ,; printf ';'; done)
printf '{"home": "%s", "listing": "%s"}' "$HOME" "$listing" > "$CHAIN_OUTPUT"
"""


def folders(tmp: Path) -> tuple[Path, Path, dict[str, str]]:
    """Two temporary folders as a slot's /tmp and /dev/shm, and the runner's env naming them."""
    one, two = tmp / "tmp", tmp / "shm"
    one.mkdir()
    two.mkdir()
    env = {"KC_TMP": f"{one} {two}"}  # the stages' HOME: .kruise-chain-home in the first
    return one, two, env


def wait_emptied(one: Path, two: Path) -> None:
    """Wait until the runner has emptied the folders after a generation (once the stage's processes were
    gone, right after its result): nothing but the next stage's empty HOME."""
    deadline = time.monotonic() + TIMEOUT
    while sorted(p.name for p in one.iterdir()) != [".kruise-chain-home"] or any(two.iterdir()):
        assert time.monotonic() < deadline, (list(one.iterdir()), list(two.iterdir()))
        time.sleep(0.01)


def test_each_stage_gets_an_empty_home_and_finds_nothing_an_earlier_one_left(slot: Slot, runners, tmp_path):
    one, two, env = folders(tmp_path)
    dirs = {"DIRS": f"{one} {two}"}
    runner = runners(slot, sh_stage(LEAVE, env=dirs), 1, **env)
    assert runner.result(1).exit_code == 0
    assert f"home={one}/.kruise-chain-home" in runner.seen
    wait_emptied(one, two)
    assert not any((one / ".kruise-chain-home").iterdir())
    assert Path("/etc/passwd").stat().st_mode & 0o777 == 0o644  # the planted link was removed, not followed
    slot.assign(sh_stage(LOOK, name="look", env=dirs), 2)
    result = runner.result(2)
    home = f"{one}/.kruise-chain-home"
    assert result.outputs == {"home": home, "listing": f"{home}=;{one}=.kruise-chain-home,;{two}=;"}


def test_the_stages_own_home_wins(slot: Slot, runners, tmp_path):
    _, _, env = folders(tmp_path)
    runner = runners(slot, sh_stage('echo "home=$HOME"', env={"HOME": "/root"}), 1, **env)
    assert runner.result(1).exit_code == 0
    assert "home=/root" in runner.seen


def test_what_an_earlier_container_left_is_removed_when_the_runner_starts(slot: Slot, runners, tmp_path):
    one, two, env = folders(tmp_path)
    (one / "left").write_text("by a stage of the slot's previous container")
    (two / ".x").mkdir()
    runner = runners(slot, sh_stage(LOOK, env={"DIRS": f"{one} {two}"}), 1, **env)
    home = f"{one}/.kruise-chain-home"
    assert runner.result(1).outputs == {"home": home, "listing": f"{home}=;{one}=.kruise-chain-home,;{two}=;"}


@pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr (e2fsprogs)")
def test_a_stage_never_runs_over_what_the_runner_cannot_remove(slot: Slot, runners, tmp_path):
    """An entry the runner cannot remove (here an immutable file, which it does not undo): the next
    generation is recorded as failed (exit 70, `unclean`) without running, and never runs again."""
    one, two, env = folders(tmp_path)
    # generation 1 leaves a file in each folder, so that the folders are found emptied only once the runner
    # emptied both and made the HOME afresh (its last step): the file below is made after that, not removed
    # by it (which made this test skip or fail under load)
    leave = sh_stage('for d in $DIRS; do touch "$d/left"; done', env={"DIRS": f"{one} {two}"})
    runner = runners(slot, leave, 1, **env)
    assert runner.result(1).exit_code == 0
    wait_emptied(one, two)
    stuck = two / "stuck"
    stuck.write_text("x")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        slot.assign(sh_stage("echo RAN"), 2)
        result = runner.result(2)
        assert (result.exit_code, result.reason) == (70, "unclean")
        assert "RAN" not in runner.drain()
        assert any("cannot empty the slot's temporary folders" in line for line in runner.seen)
        assert (slot.gen_dir(2) / "exit_code").read_text() == "70\n"
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=False)


@pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap: the runner's /dev is its sandbox's own")
def test_a_generation_that_changed_dev_is_its_containers_last(slot: Slot, runners, tmp_path):
    _, _, env = folders(tmp_path)
    quiet = runners(slot, sh_stage("cat /dev/null; echo x > /dev/null"), 1, **env)
    assert quiet.result(1).exit_code == 0
    with contextlib.suppress(subprocess.TimeoutExpired):
        quiet.process.wait(timeout=1)
    assert quiet.process.poll() is None  # writing to /dev/null changes nothing: the runner parks
    quiet.kill_container()

    other = Slot(tmp_path, "slot-b")
    tamper = runners(other, sh_stage("touch /dev/evil; ln -sfn /scratch/leak /dev/stderr"), 1, **env)
    result = tamper.result(1)
    assert result.exit_code == 0  # its result is recorded and announced first
    assert tamper.process.wait(timeout=TIMEOUT) == 0  # then the container ends, to start afresh
    assert any("changed /dev" in line for line in tamper.drain())
    assert json.loads((other.gen_dir(1) / "exit_code").read_text()) == 0
