"""The runner is out of its stages' reach (issue 22 a), end to end on the local cluster with `dag.test()`: a
stage runs as its runner's user, so only the kernel's ptrace access check (`kernel/ptrace.c`
`__ptrace_may_access`) keeps it from the runner's memory. The runner runs a busybox its user cannot read, so
the kernel made it non-dumpable at its exec (`fs/exec.c` `would_dump`, `begin_new_exec`): an attacker stage
opens `/proc/1/mem` (reading the heap where an earlier stage's run spec was, writing a byte back),
`/proc/1/environ`, `/proc/1/root`, `/proc/1/cwd` and `/proc/1/fd`; each fails, and the stages after it run as
their own, with the same image and with another."""

from __future__ import annotations

import re
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")

# FOUND lines for every runner resource the stage reached. The heap read looks for an earlier stage's secret
# (its run spec went through the runner's memory); the write puts back the byte it read (harmless if allowed).
ATTACK = r"""
found() { echo "FOUND $1"; }
me=$(id -u)
echo "ATTACKER uid=$me"
grep -q KC_SLOT /proc/1/environ 2>/dev/null && found environ
ls /proc/1/root/ >/dev/null 2>&1 && found root
ls /proc/1/cwd/ >/dev/null 2>&1 && found cwd
for fd in /proc/1/fd/*; do readlink "$fd" >/dev/null 2>&1 && { found "fd"; break; }; done
(exec 4</proc/1/mem) 2>/dev/null && found mem-open
(exec 5<>/proc/1/mem) 2>/dev/null && found mem-open-write
grep -q . /proc/1/maps 2>/dev/null && found maps
heap=$(grep -m1 '\[heap\]' /proc/1/maps 2>/dev/null)
text=$(grep -m1 ' r-xp ' /proc/1/maps 2>/dev/null)
if [ -n "$heap" ]; then
  start=$((0x${heap%%-*})); end=${heap#*-}; end=$((0x${end%% *}))
  dd if=/proc/1/mem bs=4096 skip=$((start / 4096)) count=$(((end - start) / 4096)) 2>/dev/null > heap.bin
  [ -s heap.bin ] && found mem-read
  grep -aq 'hunter' heap.bin && found "secret-in-heap"
  rm -f heap.bin
fi
if [ -n "$text" ]; then
  at=$((0x${text%%-*}))
  dd if=/proc/1/mem bs=1 skip=$at count=1 of=byte.bin 2>/dev/null && [ -s byte.bin ] \
    && dd if=byte.bin of=/proc/1/mem bs=1 seek=$at count=1 conv=notrunc 2>/dev/null && found mem-write
  rm -f byte.bin
fi
printf '{"attacker": true}' > "$CHAIN_OUTPUT"
"""
VICTIM = r"""
printf '{"me": "%s", "secret": "%s", "argv": "%s"}' "$1" "$SECRET" "$*" > "$CHAIN_OUTPUT"
exit "$2"
"""


def chain_dag(dag_id: str, attacker_image: str) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    def victim(chain: Any, i: int, code: int) -> Any:
        return chain.stage(
            f"victim{i}",
            image="busybox:1.36",
            cmds=["/bin/sh", "-c", VICTIM, "sh", f"victim{i}", str(code)],
            env={"SECRET": f"hunter{i}"},
        )

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            first, second = victim(chain, 1, 0), victim(chain, 2, 0)
            attacker = chain.stage("attacker", image=attacker_image, cmds=["/bin/sh", "-c", ATTACK])
            third, fourth = victim(chain, 3, 0), victim(chain, 4, 4)
            first >> second >> attacker >> third >> fourth
    return dag


@pytest.mark.parametrize("image", ["busybox:1.36", "alpine:3.20"], ids=["same-image", "other-image"])
def test_a_stage_cannot_reach_its_runners_memory_environ_root_or_fds(e2e_cluster, capfd, image):
    run = run_inline(chain_dag(f"unreachable_{image.split(':')[0]}", image))
    out = capfd.readouterr().out
    assert str(run.state) == "failed", out[-3000:]  # victim4's own exit code 4
    states = task_states(run)
    assert [states[f"c.{s}"][0] for s in ("victim1", "victim2", "attacker", "victim3", "victim4")] == [
        "success",
        "success",
        "success",
        "success",
        "failed",
    ]
    assert "ATTACKER uid=" in out  # the attack ran
    assert re.findall(r"FOUND (\S+)", out) == []
    results = xcoms(run)
    assert results["c.attacker"]["outputs"] == {"attacker": True}
    assert results["c.victim3"]["outputs"] == {"me": "victim3", "secret": "hunter3", "argv": "victim3 0"}
