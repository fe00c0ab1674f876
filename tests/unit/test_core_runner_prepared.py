"""A go into a slot prepared ahead names its prepare (`kc_p`, wire.py `PREPARE_ID_FIELD`): only the runner
whose container was created for it (env `KC_PREPARE`, the kubelet's fieldRef) runs it. The old container
(the kubelet has not killed it yet), one restarted on the old image, or one of an earlier prepare refuses
it, by the annotation and by the exec alike, and records nothing; a spec that names no prepare keeps
today's rule."""

from __future__ import annotations

import time

import pytest

from tests.unit import test_core_runner as base
from tests.unit.test_core_runner import BUSYBOX, sh_stage
from tests.unit.test_core_runner_go import go, starts

slot = base.slot
runners = base.runners
pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")

STAGE = sh_stage('echo x >> "$CHAIN_SCRATCH/runs"; echo "ran here"')
P_OLD, P_NEW = "0a1b2c3d4e5f6071", "8899aabbccddeeff"


def test_the_old_container_refuses_a_go_named_for_the_new_one_by_the_annotation(slot, runners) -> None:
    old = runners(slot, None, 0, KC_PREPARE=P_OLD)
    time.sleep(0.3)
    slot.assign(STAGE, 1, prepare=P_NEW)  # the go came before the kubelet killed the old container
    time.sleep(0.8)
    assert not (slot.scratch / "runs").exists() and not slot.gen_dir(1).exists()
    assert starts(old, 1) == 0
    assert old.stop() == 0
    new = runners(slot, STAGE, 1, KC_PREPARE=P_NEW, KC_RUN=slot.spec(STAGE, 1, prepare=P_NEW))
    assert new.result(1).exit_code == 0
    assert (slot.scratch / "runs").read_text() == "x\n"


def test_the_old_container_refuses_the_exec_and_the_new_one_takes_it(slot, runners) -> None:
    old = runners(slot, None, 0)  # a container of a pod's first start: no prepare
    time.sleep(0.3)
    spec = slot.spec(STAGE, 1, prepare=P_NEW)
    refused = go(slot, old, spec)
    assert refused.returncode == 76, refused.stderr
    assert b"prepared as 8899aabbccddeeff, not this one" in refused.stderr
    assert not (slot.state / f"{slot.name}.go").exists()
    time.sleep(0.5)
    assert starts(old, 1) == 0 and not slot.gen_dir(1).exists()
    assert old.stop() == 0
    new = runners(slot, None, 0, KC_PREPARE=P_NEW)  # created before the go's patch: no run spec in env
    taken = go(slot, new, spec)
    assert taken.returncode == 0, taken.stderr
    assert new.result(1).exit_code == 0
    time.sleep(0.3)
    assert starts(new, 1) == 1 and (slot.scratch / "runs").read_text() == "x\n"


def test_a_restart_on_the_old_image_with_the_go_in_env_refuses_it(slot, runners) -> None:
    # a runner that ended its container (kc_renew) restarted from a pod object of the earlier prepare, while
    # the spec the annotation holds already names the new one: it must not run it on the old image
    old = runners(slot, STAGE, 1, KC_PREPARE=P_OLD, KC_RUN=slot.spec(STAGE, 1, prepare=P_NEW))
    time.sleep(0.8)
    assert starts(old, 1) == 0 and not slot.gen_dir(1).exists()
    assert old.stop() == 0


def test_a_spec_naming_no_prepare_runs_in_any_container(slot, runners) -> None:
    runner = runners(slot, None, 0, KC_PREPARE=P_OLD)
    time.sleep(0.3)
    slot.assign(STAGE, 1)
    assert runner.result(1).exit_code == 0
    done = go(slot, runner, slot.spec(STAGE, 2))
    assert done.returncode == 0, done.stderr
    assert runner.result(2).exit_code == 0
    assert (slot.scratch / "runs").read_text() == "x\nx\n"


def test_a_stage_cannot_make_its_runner_take_a_go_for_another_prepare(slot, runners) -> None:
    # the prepare a runner was created for is in its memory from its start: a stage that exports another
    # KC_PREPARE, or plants a go file naming one, changes nothing for the next go
    plant = sh_stage(
        'export KC_PREPARE=8899aabbccddeeff; echo "kc_g=9" > "/proc/$PPID/environ" 2>/dev/null; echo planted'
    )
    runner = runners(slot, plant, 1, KC_PREPARE=P_OLD)
    assert runner.result(1).exit_code == 0
    slot.assign(STAGE, 2, prepare=P_NEW)
    time.sleep(0.8)
    assert starts(runner, 2) == 0 and not (slot.scratch / "runs").exists()
