"""The stage runner (v2) end to end: any stage image (distroless, no shell), exact argv, results no stage
output can forge, records a stage cannot wipe."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, start_markers, task_states

pytestmark = pytest.mark.slow

DISTROLESS = "gcr.io/distroless/python3-debian12:latest"
HOSTILE = [
    "two words",
    "it's",
    'say "hi"',
    "$HOME `id` $(id) ${X:-y} $$",
    "back\\slash\\",
    "new\nline",
    "trailing newlines\n\n",
    "",
    "*",
    "ü ☃",
    "A=1",
    "-c",
    "--",
]
PROBE = (
    "import json, os; argv = open('/proc/self/cmdline', 'rb').read().decode().split('\\0')[:-1]; "
    "json.dump({'argv': argv, 'mode': os.environ['MODE']}, open(os.environ['CHAIN_OUTPUT'], 'w'))"
)


def stage_starts(cluster: Any, history: list) -> list[tuple[int, str]]:
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    return [(g, s) for g, s, _ in start_markers(cluster, pod["metadata"]["uid"])]


def test_a_distroless_stage_gets_exactly_its_argv(e2e_cluster, capfd):
    from airflow.sdk import DAG, literal

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("distroless", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            chain.stage(
                "exact",
                image=DISTROLESS,
                cmds=["python3", "-c", PROBE],
                # literal(): Airflow's Jinja rendering of template fields drops a trailing newline
                arguments=[literal(arg) for arg in HOSTILE],
                env={"MODE": literal('it\'s "strict"\n')},
            )
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    result = xcoms(run)["c.exact"]
    assert result["outputs"] == {"argv": ["python3", "-c", PROBE, *HOSTILE], "mode": 'it\'s "strict"\n'}


FIRST = "echo 'first stage line'; echo 'data' > \"$CHAIN_SCRATCH/data\""
FORGER = r"""
echo 'first stage line'
echo '::kruise-chain:: start gen=1 token=0000 stage=first slot=slot-a at=2026-01-01T00:00:00Z'
for g in 1 2 3; do
  for t in 0000 '' "$CHAIN_GENERATION"; do
    echo "::kruise-chain:: result gen=$g token=$t stage=forger slot=slot-b exit=0 reason=completed" \
      "started=2026-01-01T00:00:00Z finished=2026-01-01T00:00:01Z outputs=- outputs_status=absent"
  done
done
exit 1
"""


def test_a_stage_printing_result_lines_still_fails_with_its_exit_code(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    failures = Failures()
    with DAG("forged", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            first = chain.stage("first", image="busybox:1.36", cmds=["/bin/sh", "-c", FIRST])
            forger = chain.stage(
                "forger",
                image="busybox:1.36",
                cmds=["/bin/sh", "-c", FORGER],
                on_failure_callback=failures,
            )
            first >> forger
    run = run_inline(dag)
    capfd.readouterr()
    assert str(run.state) == "failed"
    assert task_states(run)["c.forger"][0] == "failed"
    assert "failed with exit code 1" in str(failures.errors["c.forger"])
    results = xcoms(run)
    assert results["c.forger"]["exit_code"] == 1 and results["c.first"]["exit_code"] == 0
    assert stage_starts(e2e_cluster, history) == [(1, "first"), (2, "forger")]


WIPE = r"""
ls -A "$CHAIN_SCRATCH"
rm -rf "$CHAIN_SCRATCH"/* "$CHAIN_SCRATCH"/.[!.]* "$CHAIN_SCRATCH"/..?*
test -z "$(ls -A "$CHAIN_SCRATCH")"
"""
NEXT = r"""
test ! -e "$CHAIN_SCRATCH/data" && echo fresh > "$CHAIN_SCRATCH/after"
printf '{"ok": true}' > "$CHAIN_OUTPUT"
"""


def test_a_stage_wiping_its_scratch_succeeds_and_the_chain_goes_on(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    history = pod_events(e2e_cluster)
    with DAG("wipe", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            tasks = [
                chain.stage(
                    "first",
                    image="busybox:1.36",
                    cmds=["/bin/sh", "-c", FIRST + "; touch $CHAIN_SCRATCH/.dot"],
                ),
                chain.stage("wipe", image="busybox:1.36", cmds=["/bin/sh", "-c", WIPE]),
                chain.stage("next", image="busybox:1.36", cmds=["/bin/sh", "-c", NEXT]),
                chain.stage("last", image="alpine:3.20", cmds=["/bin/sh", "-c", NEXT]),
            ]
            for before, after in pairwise(tasks):
                before >> after
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    assert xcoms(run)["c.next"]["outputs"] == {"ok": True}
    assert stage_starts(e2e_cluster, history) == [(1, "first"), (2, "wipe"), (3, "next"), (4, "last")]
