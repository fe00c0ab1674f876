"""Red team of sealed stages (issue 22), end to end on the local cluster with `dag.test()`: an attacker stage
goes after the runner's fast-go file (`<slot>.go`, which the runner reads while parked), its state and its
signals, from the stage and from leftovers racing its end. Each case asserts the safe outcome: the next stages
run their own command with their own env, exit code and outputs, each once."""

from __future__ import annotations

import re
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# A go file for both slots' names as a regular file, a symlink to a spec in the scratch, a FIFO and a
# half-written temporary, for a generation far ahead; a stop request and a bumped counter in the state; then
# detached leftovers (setsid, nohup) that keep planting the go file every 10 ms and wake the runner with
# SIGUSR1, racing the stage's end.
ATTACK = r"""
found() { echo "FOUND $1"; }
spec='kc_g=99
kc_t=forged
kc_s=hijacked
kc_stage_env() { :; }
kc_stage_argv() { echo hijacked-by-go; printf "{\"hijacked\": true}" > "$CHAIN_OUTPUT"; }'
printf '%s\n' "$spec" > "$CHAIN_SCRATCH/evil.spec"
for m in /kruise-chain-meta/slot-a.stop /kruise-chain-meta/slot-b.stop /kruise-chain-meta/slot-a; do
  { echo "1 0" > "$m"; } 2>/dev/null && found "wrote $m"
done
cd /kruise-chain-state || exit 9
printf '%s\n' "$spec" > slot-a.go; printf '%s\n' "$spec" > slot-b.go
printf '%s\n' "$spec" > slot-a.go.1; printf 'kc_g=9' > slot-b.go.2
echo "99 0" > slot-a.stop; echo "99 0" > slot-b.stop; echo 0 > slot-a.started; echo 0 > slot-b.started
[ -f slot-a.go ] && [ -f slot-b.go ] && [ -f slot-a.stop ] && echo "PLANTED-OK"
plant() {
  while :; do
    for s in slot-a slot-b; do
      rm -rf "$s.go"; printf '%s\n' "$spec" > "$s.go.new" && mv -f "$s.go.new" "$s.go"
      kill -USR1 1 2>/dev/null
      rm -rf "$s.go"; ln -s "$CHAIN_SCRATCH/evil.spec" "$s.go"
      kill -USR1 1 2>/dev/null
      rm -rf "$s.go"; mkfifo "$s.go"; (printf '%s\n' "$spec" > "$s.go" &)
      kill -USR1 1 2>/dev/null
    done
    sleep 0.01
  done
}
plant > /dev/null 2>&1 &
setsid sh -c 'while :; do
  cp "$CHAIN_SCRATCH/evil.spec" a.t && mv -f a.t slot-a.go; kill -USR1 1; sleep 0.01
done' > /dev/null 2>&1 &
nohup sh -c 'trap "" TERM HUP; while :; do
  ln -sf "$CHAIN_SCRATCH/evil.spec" slot-b.go 2>/dev/null; sleep 0.01
done' > /dev/null 2>&1 &
sleep 0.5
printf '{"attacker": true}' > "$CHAIN_OUTPUT"
"""
# A victim records its argv and env, then exits with its own code.
VICTIM = r"""
sleep 0.3
printf '{"me": "%s", "secret": "%s", "argv": "%s"}' "$1" "$SECRET" "$*" > "$CHAIN_OUTPUT"
exit "$2"
"""


def chain_dag(dag_id: str) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            attacker = chain.stage("attacker", image="busybox:1.36", cmds=["/bin/sh", "-c", ATTACK])
            stages = [
                chain.stage(
                    f"victim{i}",
                    image="busybox:1.36",
                    cmds=["/bin/sh", "-c", VICTIM, "sh", f"victim{i}", str(code)],
                    env={"SECRET": f"own-{i}"},
                )
                for i, code in ((1, 0), (2, 0), (3, 4))
            ]
            attacker >> stages[0] >> stages[1] >> stages[2]
    return dag


def test_a_planted_or_raced_go_file_is_never_run(e2e_cluster, capfd):
    history = pod_events(e2e_cluster)
    run = run_inline(chain_dag("redteam_go_file"))
    out = capfd.readouterr().out
    assert str(run.state) == "failed", out[-3000:]  # victim3's own exit code 4
    states = task_states(run)
    assert [states[f"c.{s}"][0] for s in ("attacker", "victim1", "victim2", "victim3")] == [
        "success",
        "success",
        "success",
        "failed",
    ]
    results = xcoms(run)
    assert results["c.attacker"]["outputs"] == {"attacker": True}
    for i, code in ((1, 0), (2, 0)):
        assert results[f"c.victim{i}"]["exit_code"] == code
        assert results[f"c.victim{i}"]["outputs"] == {
            "me": f"victim{i}",
            "secret": f"own-{i}",
            "argv": f"victim{i} {code}",
        }
    assert "PLANTED-OK" in out  # the attack ran
    assert "hijacked-by-go" not in out
    assert not re.findall(r"FOUND (\w+ \S+)", out)  # the run spec and stop files are read-only
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    starts = start_markers(e2e_cluster, pod["metadata"]["uid"])
    assert [(g, s) for g, s, _ in starts] == [(1, "attacker"), (2, "victim1"), (3, "victim2"), (4, "victim3")]
    assert starts[0][2] == starts[2][2] != starts[1][2] == starts[3][2]  # both slots ran after the attacker


# An attacker of its slot's records and streams: its outputs file a symlink to its slot's run spec, a result
# and a start marker forged for the generation after next (a guessed token) on an unended line, the
# termination message and the whole state volume made unwritable for the runner's user.
STREAMS = r"""
ln -sf "/kruise-chain-meta/$(ls /kruise-chain-meta | grep -v stop | head -1)" "$CHAIN_OUTPUT"
g=$((CHAIN_GENERATION + 2))
t=0000000000000000
printf '::kruise-chain:: start gen=%s token=%s stage=victim2 slot=forged at=2026-01-01T00:00:00Z\n' $g $t
printf '::kruise-chain:: result gen=%s token=%s stage=victim2 slot=forged exit=0 reason=completed ' $g $t
printf 'started=2026-01-01T00:00:00Z finished=2026-01-01T00:00:01Z outputs=e30= outputs_status=ok streams=2'
printf 'forged' > /dev/termination-log; chmod 000 /dev/termination-log
find /kruise-chain-state -depth ! -type l -exec chmod 000 {} +  # contents first: no DAC_OVERRIDE needed
"""


def test_a_stage_forging_markers_and_locking_its_records_changes_nothing_after_it(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    failures = Failures()
    with DAG("redteam_streams", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            attacker = chain.stage("attacker", image="busybox:1.36", cmds=["/bin/sh", "-c", STREAMS])
            stages = [
                chain.stage(
                    f"victim{i}",
                    image="busybox:1.36",
                    cmds=["/bin/sh", "-c", VICTIM, "sh", f"victim{i}", str(code)],
                    env={"SECRET": f"own-{i}"},
                    on_failure_callback=failures,
                )
                for i, code in ((1, 0), (2, 5))
            ]
            attacker >> stages[0] >> stages[1]
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "failed", out[-3000:]  # victim2's own exit code 5
    results = xcoms(run)
    assert results["c.attacker"]["exit_code"] == 0
    assert results["c.attacker"]["outputs_status"] == "absent"  # a symlink is not read: no run spec
    assert results["c.victim1"]["outputs"] == {"me": "victim1", "secret": "own-1", "argv": "victim1 0"}
    assert task_states(run)["c.victim2"][0] == "failed"
    assert "failed with exit code 5" in str(failures.errors["c.victim2"])  # not the forged exit 0
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    starts = [m for m in start_markers(e2e_cluster, pod["metadata"]["uid"]) if m[2] != "forged"]
    assert [(g, s) for g, s, _ in starts] == [(1, "attacker"), (2, "victim1"), (3, "victim2")]
    assert starts[0][2] == starts[2][2]  # victim2 ran in the attacker's slot, after its forged lines
