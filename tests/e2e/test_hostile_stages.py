"""Sealed stages (issue 22), end to end on the local cluster with `dag.test()`: a stage gets what a container
gives it, and no stage can reach another. Each case asserts the safe outcome: the next stages run their own
command with their own env, exit code and outputs, each once; nothing a stage started outlives it."""

from __future__ import annotations

import re
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R
from kruise_local.validation import memory_bytes

from airflow_kruise_chain.core.resources import PARKED_LIMITS, PARKED_REQUESTS
from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# Every writable path a stage can find, tried: the runner's files and state (the old layout's too), both
# slots' run specs and the runner's environ (tokens), FIFOs and counters where records go, and a background
# loop that keeps writing every outputs file it can find and JSON into the scratch.
ATTACK = r"""
found() { echo "FOUND $1"; }
for f in /kruise-chain/bin/runner /kruise-chain/bin/runner.sh /kruise-chain/bin/busybox; do
  { printf 'kc_stage_argv() { echo hijacked; }\n' >> "$f"; } 2>/dev/null && found "wrote $f"
  { echo x > "$f.new" && mv -f "$f.new" "$f"; } 2>/dev/null && found "replaced $f"
done
mkdir -p /kruise-chain/state 2>/dev/null && found "made /kruise-chain/state"
for f in /kruise-chain/state/slot-a.env /kruise-chain/state/slot-b.env; do
  { printf 'kc_stage_argv() { echo hijacked; }\n' >> "$f"; } 2>/dev/null && found "appended $f"
done
for f in /kruise-chain-meta/*; do
  [ -f "$f" ] && found "meta ${f##*/}"
done
grep -ao 'kc_t=[^ ]*' /proc/1/environ 2>/dev/null | while read -r t; do found "environ $t"; done
cd /kruise-chain-state || exit 9
for g in 1 2 3 4 5 6; do
  mkdir -p "gen-$g" && rm -f "gen-$g/started" "gen-$g/exit_code" && mkfifo "gen-$g/started" "gen-$g/exit_code"
done
echo 999999 > slot-a.started; echo 999999 > slot-b.started
printf 'kc_stage_argv() { echo hijacked; }\n' > slot-a.env
mkdir -p locked && chmod 000 locked
(
  while :; do
    for f in $(find / -xdev -name outputs.json 2>/dev/null) "$CHAIN_SCRATCH/outputs.json"; do
      [ "$f" = "$CHAIN_OUTPUT" ] || printf '{"overwritten": true}' > "$f" 2>/dev/null
    done
    printf '{"overwritten": true}' > "$CHAIN_SCRATCH/victim.json"
    sleep 0.02
  done
) &
sleep 0.3
printf '{"attacker": true}' > "$CHAIN_OUTPUT"
"""
# A victim records its argv, its env and whether anything still writes the scratch, then exits with its own
# code.
VICTIM = r"""
rm -f "$CHAIN_SCRATCH/victim.json"
sleep 0.5
after=$(cat "$CHAIN_SCRATCH/victim.json" 2>/dev/null || echo null)
printf '{"me": "%s", "secret": "%s", "argv": "%s", "scratch_after": %s}' "$1" "$SECRET" "$*" "$after" \
  > "$CHAIN_OUTPUT"
exit "$2"
"""


def chain_dag(dag_id: str, images: tuple[str, str, str], failures: Failures, attack: str = ATTACK) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            attacker = chain.stage("attacker", image=images[0], cmds=["/bin/sh", "-c", attack])
            first = chain.stage(
                "victim1",
                image=images[1],
                cmds=["/bin/sh", "-c", VICTIM, "sh", "victim1", "0"],
                env={"SECRET": "hunter2"},
            )
            second = chain.stage(
                "victim2",
                image=images[2],
                cmds=["/bin/sh", "-c", VICTIM, "sh", "victim2", "3"],
                env={"SECRET": "s3cond"},
                on_failure_callback=failures,
            )
            attacker >> first >> second
    return dag


@pytest.mark.parametrize(
    "images",
    [
        (
            "busybox:1.36",
            "busybox:1.36",
            "busybox:1.36",
        ),  # victim1 in the other slot, victim2 in the attacker's
        ("busybox:1.36", "alpine:3.20", "python:3.11-slim"),  # each victim restarts a slot on its image
    ],
    ids=["same-image", "other-images"],
)
def test_an_attacker_stage_changes_nothing_of_the_stages_after_it(e2e_cluster, capfd, images):
    history = pod_events(e2e_cluster)
    failures = Failures()
    run = run_inline(chain_dag(f"hostile_{images[1].split(':')[0]}", images, failures))
    out = capfd.readouterr().out
    assert str(run.state) == "failed", out[-3000:]  # victim2's own exit code 3
    states = task_states(run)
    assert [states[f"c.{s}"][0] for s in ("attacker", "victim1", "victim2")] == [
        "success",
        "success",
        "failed",
    ]
    assert "failed with exit code 3" in str(failures.errors["c.victim2"])
    results = xcoms(run)
    assert results["c.attacker"]["outputs"] == {"attacker": True}
    first, second = results["c.victim1"], results["c.victim2"]
    assert first["exit_code"] == 0 and second["exit_code"] == 3
    # their own argv and env, and outputs no leftover loop overwrote (the loop died with the attacker)
    assert first["outputs"] == {
        "me": "victim1",
        "secret": "hunter2",
        "argv": "victim1 0",
        "scratch_after": None,
    }
    assert second["outputs"] == {
        "me": "victim2",
        "secret": "s3cond",
        "argv": "victim2 3",
        "scratch_after": None,
    }
    assert "hijacked" not in out
    # each stage started once, in the slots the planner chose
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    starts = start_markers(e2e_cluster, pod["metadata"]["uid"])
    assert [(g, s) for g, s, _ in starts] == [(1, "attacker"), (2, "victim1"), (3, "victim2")]
    assert starts[0][2] == starts[2][2] != starts[1][2]  # victim2 ran in the attacker's slot
    # what the attacker could reach: its own slot's run spec only, no runner file, no other slot's state
    found = re.findall(r"FOUND (\w+ \S+)", out)
    assert not [line for line in found if line.startswith(("wrote", "replaced", "appended", "made"))], found
    slot = starts[0][2]
    assert sorted({line for line in found if line.startswith("meta ")}) == [
        f"meta {slot}",
        f"meta {slot}.replay",
        f"meta {slot}.stop",
    ]


# A root stage (the image's user; it keeps CHOWN and FOWNER, not DAC_OVERRIDE) gives its slot's state folder,
# every record in it and the termination log to another user, mode 000: the runner must still record this
# stage's result and run the next stage of the slot normally.
LOCKOUT = r"""
printf '{"attacker": true}' > "$CHAIN_OUTPUT"
cd /kruise-chain-state || exit 9
mkdir -p gen-9/deep && chown -R 1234:1234 gen-9 && chmod 000 gen-9/deep gen-9
for f in * */*; do chown 1234:1234 "$f"; chmod 000 "$f"; done
chown 1234:1234 /dev/termination-log . && chmod 000 /dev/termination-log . && echo "LOCKED OUT"
"""


def test_a_root_stage_cannot_lock_its_runner_out_of_its_records(e2e_cluster, capfd):
    failures = Failures()
    images = ("busybox:1.36", "busybox:1.36", "busybox:1.36")
    run = run_inline(chain_dag("hostile_lockout", images, failures, attack=LOCKOUT))
    out = capfd.readouterr().out
    assert "LOCKED OUT" in out
    assert str(run.state) == "failed", out[-3000:]  # victim2's own exit code 3
    results = xcoms(run)
    assert results["c.attacker"]["exit_code"] == 0 and results["c.attacker"]["outputs"] == {"attacker": True}
    # victim2 ran in the attacker's slot after it
    assert (results["c.victim1"]["exit_code"], results["c.victim2"]["exit_code"]) == (0, 3)
    assert results["c.victim2"]["outputs"]["me"] == "victim2"
    assert "cannot create" not in out and "lost-record" not in out


# A benign stage that leaves a job running: an awk holding 64 MiB, sleeping in system().
BACKGROUND = (
    'awk \'BEGIN { s = "x"; for (i = 0; i < 26; i++) s = s s; system("sleep 300") }\' & '
    "sleep 1; echo started a background job"
)


def test_a_stage_that_leaves_a_job_running_ends_at_once_and_its_slot_parks(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    sized = {"requests": {"memory": "128Mi"}, "limits": {"memory": "192Mi"}}
    with DAG("hostile_background", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            bg = chain.stage("bg", image="busybox:1.36", cmds=["/bin/sh", "-c", BACKGROUND], resources=sized)
            after = chain.stage("after", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo after"])
            bg >> after
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert "started a background job" in out
    assert task_states(run)["c.bg"][2] < 120  # not the 300 s of its job (a bound, not a measure)
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
    (start,) = [slot for g, s, slot in start_markers(e2e_cluster, uid) if s == "bg"]
    now = e2e_cluster.call(lambda: e2e_cluster.store.peek(R.PODS, "default", name))
    (container,) = [c for c in now["spec"]["containers"] if c["name"] == start]
    resources = container.get("resources") or {}
    assert memory_bytes(resources["requests"]["memory"]) == memory_bytes(PARKED_REQUESTS["memory"])
    assert memory_bytes(resources["limits"]["memory"]) == memory_bytes(PARKED_LIMITS["memory"])

    def processes() -> int:
        worker = e2e_cluster.kubelet.worker_for(now)
        return len(worker.containers[start].current.proc._tree())

    assert e2e_cluster.call(processes) == 1  # the runner alone


# The replay: a stage deletes its records and, from a job left running, signals its runner once its
# result is recorded (the old runner left the job alone: the slot restarted and ran the generation again).
RESTARTER = r"""
echo x >> "$CHAIN_SCRATCH/runs"
(sleep 2; rm -rf /kruise-chain-state/* /kruise-chain/state/*; kill -TERM 1) &
rm -rf /kruise-chain-state/* /kruise-chain/state/* 2>/dev/null
exit 0
"""


def test_a_stage_deleting_its_records_and_signalling_its_runner_runs_once(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    count = 'sleep 3; printf \'{"runs": %s}\' "$(wc -l < "$CHAIN_SCRATCH/runs")" > "$CHAIN_OUTPUT"'
    with DAG("hostile_restarter", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            once = chain.stage("once", image="busybox:1.36", cmds=["/bin/sh", "-c", RESTARTER])
            counted = chain.stage("count", image="busybox:1.36", cmds=["/bin/sh", "-c", count])
            once >> counted
    run = run_inline(dag)
    out = capfd.readouterr().out
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    starts = [(g, s) for g, s, _ in start_markers(e2e_cluster, pod["metadata"]["uid"])]
    assert starts == [(1, "once"), (2, "count")], out[-3000:]
    assert xcoms(run)["c.count"]["outputs"] == {"runs": 1}
