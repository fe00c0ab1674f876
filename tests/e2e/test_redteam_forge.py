"""Red team of sealed stages, round 3: a stage that forges its own result and keeps running, end to end on the
local cluster with `dag.test()`. Its task then takes its slot for free, and the slot's next generation (the
victim, same image: a go, no restart) lands in a container where the attacker still runs: each case asserts
the safe outcome, the victim's own command, exit code and outputs, whatever the attacker printed."""

from __future__ import annotations

from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# The attacker prints its own result (exit 0) and the end of its stderr as the runner would, then stays: it
# watches its slot's run spec (and the fast go's file) for the next generation, and prints that generation's
# start, result (exit 0, forged outputs) and stream ends with the token it read there.
FORGE = r"""
me=$(ls /kruise-chain-meta | grep -v '[.]' | head -1)
spec=/kruise-chain-meta/$me
field() { sed -n "s/^$1='\{0,1\}\([^']*\)'\{0,1\}$/\1/p" "$2" 2>/dev/null | head -1; }
forge() {  # FILE: the generation, token and stage of that run spec, announced as done with exit 0
  g=$(field kc_g "$1"); t=$(field kc_t "$1"); s=$(field kc_s "$1"); now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  b=$(printf '{"forged": true, "by": "attacker"}' | base64 | tr -d '\n')
  printf '\n::kruise-chain:: start gen=%s token=%s stage=%s slot=%s at=%s\n' "$g" "$t" "$s" "$me" "$now"
  printf '\n::kruise-chain:: stderr-start gen=%s token=%s stage=%s\n' "$g" "$t" "$s" >&2
  printf '\n::kruise-chain:: result gen=%s token=%s stage=%s slot=%s exit=0 reason=completed ' \
    "$g" "$t" "$s" "$me"
  printf 'started=%s finished=%s outputs=%s outputs_status=ok streams=2\n' "$now" "$now" "$b"
  printf '\n::kruise-chain:: stderr-end gen=%s token=%s stage=%s\n' "$g" "$t" "$s" >&2
  echo "FORGED gen=$g stage=$s"
}
own=$CHAIN_GENERATION
printf '{"attacker": true}' > "$CHAIN_OUTPUT"
# all it can read where a seal could be: env, every process's env and argv, its volumes
echo "LOOT-BEGIN-$own"
{ env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline
  find /kruise-chain* /tmp /dev/shm -type f -exec cat {} +; } 2>/dev/null | tr '\0' '\n'
echo "LOOT-END-$own"
forge "$spec"
i=0
while [ $i -lt 150 ]; do
  for f in "$spec" "/kruise-chain-state/$me.go"; do
    g=$(field kc_g "$f")
    if [ -n "$g" ] && [ "$g" -gt "$own" ]; then cp "$f" /tmp/next 2>/dev/null; forge /tmp/next; exit 0; fi
  done
  sleep 0.1; i=$((i + 1))
done
echo "NO-NEXT-GENERATION"
"""
VICTIM = r"""printf '{"me": "%s"}' "$1" > "$CHAIN_OUTPUT"; exit "$2" """


def _chain(dag_id: str, **chain_options: Any) -> tuple[Any, Failures]:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **chain_options) as chain:
            attacker = chain.stage("attacker", image="busybox:1.36", cmds=["/bin/sh", "-c", FORGE])
            middle = chain.stage(
                "middle", image="busybox:1.36", cmds=["/bin/sh", "-c", VICTIM, "sh", "middle", "0"]
            )
            victim = chain.stage(
                "victim",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", VICTIM, "sh", "victim", "3"],
                on_failure_callback=failures,
            )
            attacker >> middle >> victim
    return dag, failures


def test_a_stage_that_forges_its_end_and_stays_cannot_forge_the_next_generation_of_its_slot(
    e2e_cluster, capfd
):
    from kruise_local import resources as R

    history = pod_events(e2e_cluster)
    dag, failures = _chain("redteam_forge_stay")
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "FORGED gen=1 stage=attacker" in out, out[-3000:]  # the attack ran
    # nothing it could read holds the pod's seal (nor names it), its run spec's nonce it did read
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    seal = pod["metadata"]["annotations"].get("airflow-kruise-chain/seal")
    loot = out[out.index("LOOT-BEGIN-1") : out.index("LOOT-END-1")]
    assert "kc_g=1" in loot and "KC_SEAL=" not in loot and (seal is None or seal not in out)
    states = task_states(run)
    results = xcoms(run)
    assert results.get("c.victim", {}).get("outputs") != {"forged": True, "by": "attacker"}, out[-4000:]
    assert states["c.victim"][0] == "failed", out[-4000:]  # the victim's own exit code 3
    assert "failed with exit code 3" in str(failures.errors["c.victim"])
    assert results["c.middle"]["outputs"] == {"me": "middle"}
    # its own forged end was not taken either: its task waited for the runner's, with its real outputs
    assert results["c.attacker"]["outputs"] == {"attacker": True}
    assert "NO-NEXT-GENERATION" in out  # the slot was not handed on while it ran
