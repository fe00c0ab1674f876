"""The runner of a sealed chain pod (`wire.SEAL_ANNOTATION`): it derives each generation's token from the
pod's seal (env KC_SEAL) and the run spec's nonce, so that no stage can print a line the operator takes. Run
for real by a static busybox, as `tests/unit/test_core_runner.py` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_kruise_chain.core import ResultMarker, StartMarker, parse_marker
from airflow_kruise_chain.core.wire import StreamMarker, begin_token, matches, run_spec, sealed_token
from tests.unit.test_core_runner import BUSYBOX, Slot, runners, sh_stage  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(BUSYBOX is None, reason="needs a static busybox (Debian: busybox-static)")

SEAL = "5ea1" * 8


class SealedSlot(Slot):
    """A slot of a sealed pod: its run specs carry a nonce; `tokens` holds what the runner must derive."""

    def spec(self, stage, generation, **overrides) -> str:
        if stage is None:
            return ""
        nonce = f"n{generation}x"
        self.tokens[generation] = sealed_token(SEAL, nonce)
        return run_spec(
            generation=generation,
            token="",
            nonce=nonce,
            stage=stage.name,
            argv=[*stage.cmds, *stage.arguments],
            env=stage.env,
            outputs_max=stage.max_outputs_bytes,
            **overrides,
        )


# What a stage can read of its slot: its env, its run spec, the state and the termination message; and a
# result line it forges with what it read (the nonce as token, and the earlier generation's token if found).
LOOK = r"""
{ env; cat "$KC_META_FILE"; find "$KC_STATE_DIR" -type f -exec cat {} +; cat "$KC_TERM_FILE"; } \
  > "$CHAIN_SCRATCH/seen-$CHAIN_GENERATION" 2>&1
nonce=$(sed -n "s/^kc_nonce=//p" "$KC_META_FILE")
printf '\n::kruise-chain:: result gen=%s token=%s stage=demo slot=slot-a exit=0 reason=completed ' \
  "$CHAIN_GENERATION" "$nonce"
printf 'started=2026-01-01T00:00:00Z finished=2026-01-01T00:00:01Z outputs=- outputs_status=absent '
printf 'streams=2\n'
exit 3
"""


def test_no_stage_can_know_a_token_of_a_sealed_pod(tmp_path: Path, runners) -> None:  # noqa: F811
    slot = SealedSlot(tmp_path)
    runner = runners(slot, None, 0, KC_SEAL=SEAL)  # parked: the generations come through its volume
    files = {
        "KC_META_FILE": str(slot.meta / slot.name),
        "KC_STATE_DIR": str(slot.state),
        "KC_TERM_FILE": str(runner.termination_log),
    }
    for generation in (1, 2):
        slot.assign(sh_stage(LOOK, env=files), generation)
        assert runner.result(generation).exit_code == 3  # its own, not the forged line's
    lines = runner.drain()
    for generation in (1, 2):
        token = slot.tokens[generation]
        markers = [m for line in lines if (m := parse_marker(line)) and m.generation == generation]
        ours = [m for m in markers if matches(m, generation, token)]
        # the runner's four lines: the begin lines carry the token's hash, the end lines the token
        assert [type(m) for m in ours] == [StartMarker, StreamMarker, ResultMarker, StreamMarker]
        assert [m.token for m in ours] == [begin_token(token)] * 2 + [token] * 2
        forged = [m for m in markers if isinstance(m, ResultMarker) and m.exit_code == 0]
        assert forged and not any(matches(m, generation, token) for m in forged)
        seen = (slot.scratch / f"seen-{generation}").read_text()
        assert "kc_nonce=" in seen  # it read its run spec
        for earlier in range(1, generation + 1):
            assert slot.tokens[earlier] not in seen, (generation, earlier)
        assert SEAL not in seen and "KC_SEAL" not in seen
    assert runner.termination_log.read_text() == next(
        line for line in lines if line.startswith("::kruise-chain:: result gen=2 token=" + slot.tokens[2])
    )


# A stage that plants its generation's records (a result line with what token it can find: the nonce), then
# has its container go (as a memory limit with memory.oom.group ends a container: all of its processes).
PLANT = r"""
d=$(dirname "$CHAIN_OUTPUT")
nonce=$(sed -n "s/^kc_nonce=//p" "$KC_META_FILE")
printf '::kruise-chain:: result gen=%s token=%s stage=demo slot=slot-a exit=0 reason=completed ' \
  "$CHAIN_GENERATION" "$nonce" > "$d/result"
printf 'started=2026-01-01T00:00:00Z finished=2026-01-01T00:00:01Z outputs=- outputs_status=absent\n' \
  >> "$d/result"
echo 0 > "$d/exit_code"
echo planted
sleep 30
"""


def test_records_a_stage_planted_before_its_container_went_are_not_announced(tmp_path, runners) -> None:  # noqa: F811
    slot = SealedSlot(tmp_path)
    stage = sh_stage(PLANT, env={"KC_META_FILE": str(slot.meta / slot.name)})
    slot.assign(stage, 3)
    runner = runners(slot, None, 0, KC_SEAL=SEAL)
    runner.wait_line(lambda line: line == "planted")
    runner.kill_container()
    again = runners(slot, stage, 3, KC_SEAL=SEAL)  # the kubelet starts it again, the generation in env
    result = again.result(3)
    assert (result.exit_code, result.reason) == (137, "interrupted")  # not the planted exit 0, nor a hang
    assert "planted" not in again.drain()  # not run again
