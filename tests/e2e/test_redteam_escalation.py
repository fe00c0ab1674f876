"""Red team of sealed stages, round 2 (issue 37 finding 2, and /dev): an attacker stage that becomes root
through a set-user-ID program of its image, so that its runner (another user) cannot end it, then plants a
fast-go file the parked runner would run in its own shell; and a root stage that tampers with its container's
/dev (the runtime's tmpfs, writable by root whatever the root filesystem) to catch what later stages of its
slot write to /dev/null or /dev/stderr. End to end on the local cluster with `dag.test()`; kruise-local as
root models a set-user-ID program's escalation as runc does (no no_new_privs unless the container forbids it).
Each case asserts the safe outcome: the victim runs its own command with its own env, exit code and outputs,
and nothing of it reaches a later stage."""

from __future__ import annotations

import os
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="a set-user-ID escalation needs kruise-local as root"),
]

START = pendulum.datetime(2026, 1, 1, tz="UTC")
SUID_IMAGE = "ghcr.io/redteam/suid-python:1"

# Root through the image's set-user-ID python, then a daemon (root: the non-root runner's `kill -KILL -1`
# cannot end it) that keeps planting a regular fast-go file whose spec redefines the runner's kc_exec, and
# wakes the runner: sourced while parked, the runner would run the attacker's code for every later stage.
ESCALATE = r"""
import os, sys, time
try:
    os.setresuid(0, 0, 0)
    print("ESCALATED", flush=True)
except PermissionError:
    print("NOT-ESCALATED", flush=True)
spec = (
    "kc_g=999999\n"
    "kc_exec() { echo HIJACKED-GO; printf '{\"hijacked\": true, \"secret\": \"%s\"}' \"$SECRET\""
    " > \"$CHAIN_OUTPUT\"; exit 0; }\n"
    "kc_g=0\n"
)
if os.fork() == 0:
    os.setsid()
    end = time.time() + 120
    while time.time() < end:
        for slot in ("slot-a", "slot-b"):
            path = f"/kruise-chain-state/{slot}.go"
            try:
                if not os.path.exists(path):
                    with open(path + ".t", "w") as f:
                        f.write(spec)
                    os.rename(path + ".t", path)
            except OSError:
                pass
        try:
            os.kill(1, 10)
        except OSError:
            pass
        time.sleep(0.05)
    os._exit(0)
time.sleep(0.5)
"""
VICTIM = r"""
sleep 0.3
printf '{"me": "%s", "secret": "%s"}' "$1" "$SECRET" > "$CHAIN_OUTPUT"
exit "$2"
"""


def test_a_setuid_root_daemon_neither_survives_nor_plants_a_go_file(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    e2e_cluster.catalogue.add(
        {
            "ref": SUID_IMAGE,
            "files": {"/usr/local/bin/suid-python": {"from": "/usr/bin/python3.11", "mode": "4755"}},
        }
    )
    failures = Failures()
    nonroot = {"security_context": {"runAsUser": 65532, "runAsGroup": 65532}}
    with DAG("redteam_setuid", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **nonroot) as chain:
            attacker = chain.stage("attacker", image=SUID_IMAGE, cmds=["suid-python", "-c", ESCALATE])
            stages = [
                chain.stage(
                    f"victim{i}",
                    image=SUID_IMAGE,
                    cmds=["/bin/sh", "-c", VICTIM, "sh", f"victim{i}", str(code)],
                    env={"SECRET": f"own-{i}"},
                    on_failure_callback=failures,
                )
                for i, code in ((1, 0), (2, 0), (3, 3))
            ]
            attacker >> stages[0] >> stages[1] >> stages[2]
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "ESCALATED" in out, out[-3000:]  # the attack ran (NOT-ESCALATED once no_new_privs holds)
    assert "NOT-ESCALATED" in out, out[-3000:]
    assert "HIJACKED-GO" not in out
    states = task_states(run)
    assert [states[f"c.victim{i}"][0] for i in (1, 2, 3)] == ["success", "success", "failed"], out[-3000:]
    assert "failed with exit code 3" in str(failures.errors["c.victim3"])
    results = xcoms(run)
    for i in (1, 2):
        assert results[f"c.victim{i}"]["outputs"] == {"me": f"victim{i}", "secret": f"own-{i}"}


# A root stage turns its container's /dev/null into a regular file and /dev/stderr into a link to the scratch,
# and plants a folder in /dev; a later stage of its slot writes its secret to both, and a stage after it reads
# them back.
TAMPER = r"""
null=no; err=no; dir=no
rm -f /dev/null && : > /dev/null && chmod 666 /dev/null && null=yes
ln -sfn "$CHAIN_SCRATCH/leak" /dev/stderr && err=yes
mkdir -p /dev/evil && echo plant > /dev/evil/x && dir=yes
printf '{"null": "%s", "stderr": "%s", "dir": "%s"}' $null $err $dir > "$CHAIN_OUTPUT"
"""
WRITE_SECRET = r"""
echo "null:$SECRET" > /dev/null
echo "err:$SECRET" > /dev/stderr
printf '{"me": "writer", "evil": "%s"}' "$(ls /dev/evil 2>/dev/null)" > "$CHAIN_OUTPUT"
"""
READ_BACK = r"""
leak=$(cat "$CHAIN_SCRATCH/leak" 2>/dev/null)
printf '{"null": "%s", "leak": "%s"}' "$(cat /dev/null)" "$leak" > "$CHAIN_OUTPUT"
"""


def test_a_root_stage_tampering_with_dev_catches_nothing_of_the_next_stages(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    image = "busybox:1.36"
    with DAG("redteam_dev", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            tamper = chain.stage("tamper", image=image, cmds=["/bin/sh", "-c", TAMPER])
            fill1 = chain.stage("fill1", image=image, cmds=["/bin/sh", "-c", "true"])
            writer = chain.stage(
                "writer", image=image, cmds=["/bin/sh", "-c", WRITE_SECRET], env={"SECRET": "s3cr3t"}
            )
            fill2 = chain.stage("fill2", image=image, cmds=["/bin/sh", "-c", "true"])
            reader = chain.stage("reader", image=image, cmds=["/bin/sh", "-c", READ_BACK])
            tamper >> fill1 >> writer >> fill2 >> reader
    run = run_inline(dag)
    out = capfd.readouterr().out
    states = task_states(run)
    assert all(states[f"c.{name}"][0] == "success" for name in ("tamper", "writer", "reader")), states
    results: dict[str, Any] = xcoms(run)
    assert results["c.tamper"]["outputs"] == {"null": "yes", "stderr": "yes", "dir": "yes"}  # the attack ran
    assert results["c.writer"]["outputs"] == {"me": "writer", "evil": ""}
    assert results["c.reader"]["outputs"] == {"null": "", "leak": ""}
    assert "err:s3cr3t" in out  # the writer's stderr reached its own log
