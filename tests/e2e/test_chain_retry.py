"""An Airflow retry of a stage re-runs it in the same pod, as a new generation, with scratch data intact."""

from __future__ import annotations

import pytest
from kruise_local import resources as R

from tests.e2e.conftest import xcoms
from tests.e2e.inline import (
    FAST_POD,
    pod_events,
    restarts_and_back_offs,
    run_inline,
    start_markers,
    task_states,
)

pytestmark = pytest.mark.slow

PREPARE = r"""
seq 1 100 > "$CHAIN_SCRATCH/numbers.txt"
echo "prepared $(wc -l < "$CHAIN_SCRATCH/numbers.txt") numbers"
"""

FLAKY = r"""
test -s "$CHAIN_SCRATCH/numbers.txt" || { echo "numbers.txt from the prepare stage is gone" >&2; exit 2; }
if [ ! -f "$CHAIN_SCRATCH/flaky.marker" ]; then
  echo "first try: failing on purpose (generation $CHAIN_GENERATION)"
  echo "$CHAIN_GENERATION" > "$CHAIN_SCRATCH/flaky.marker"
  exit 1
fi
sum=$(awk '{ s += $1 } END { print s }' "$CHAIN_SCRATCH/numbers.txt")
echo "second try: sum $sum (first try was generation $(cat "$CHAIN_SCRATCH/flaky.marker"))"
first=$(cat "$CHAIN_SCRATCH/flaky.marker")
printf '{"sum": %s, "first_try_generation": %s}' "$sum" "$first" > "$CHAIN_OUTPUT"
"""


def test_a_retry_reruns_the_stage_in_place_as_a_new_generation(e2e_cluster, capfd):
    import pendulum
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    history = pod_events(cluster)
    with DAG("chain_retry", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        # one image for every stage: each swap, the retry's too, changes annotations only (no restart)
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            prepare = chain.stage("prepare", image="busybox:1.36", cmds=["/bin/sh", "-c", PREPARE])
            flaky = chain.stage(
                "flaky", image="busybox:1.36", cmds=["/bin/sh", "-c", FLAKY], retries=1, retry_delay=0
            )
            prepare >> flaky
    run = run_inline(dag)
    out = capfd.readouterr().out

    assert str(run.state) == "success", out[-3000:]
    states = task_states(run)
    assert states["c.flaky"][:2] == ("success", 2)
    result = xcoms(run)["c.flaky"]
    assert result["exit_code"] == 0
    assert result["outputs"] == {"sum": 5050, "first_try_generation": 2}  # prepare's data survived the retry
    assert result["generation"] == 3  # a new generation: prepare 1, the failed try 2, the retry 3
    assert xcoms(run)["c.prepare"]["generation"] == 1
    assert "first try: failing on purpose (generation 2)" in out
    assert "second try: sum 5050 (first try was generation 2)" in out

    # one pod for the whole run; the retry ran in place: annotations only, no restart, no new pod nor CRR
    pods = [o for k, r, o in history if r is R.PODS and k == "ADDED"]
    assert len(pods) == 1
    assert not [o for k, r, o in history if r is R.CRRS]
    assert "generation=3 image=busybox:1.36 via annotations only" in out
    images = {c["image"] for k, r, o in history if r is R.PODS for c in o["spec"]["containers"]}
    assert images == {"busybox:1.36"}, images
    assert not restarts_and_back_offs(history)
    assert [(g, s) for g, s, _ in start_markers(cluster, pods[0]["metadata"]["uid"])] == [
        (1, "prepare"),
        (2, "flaky"),
        (3, "flaky"),
    ]
