"""Short stages on distinct images, each said go to in a slot prepared ahead: a stage may end before the pod's
status shows its new container (whose log the kubelet serves only then), and its task then takes its output
and result from the go's exec (`fastgo.Capture`); either way each line of every stage, stdout's and stderr's,
is in its task's log exactly once, and each stage ran once with its result."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from kruise_local import LocalCluster

from tests.e2e.conftest import connected_cluster, xcoms
from tests.e2e.inline import run_inline
from tests.e2e.test_prepare import IMAGES, sized_chain

pytestmark = pytest.mark.slow

LINES = r"""
n=$(cat "$CHAIN_SCRATCH/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$CHAIN_SCRATCH/count"
printf '{"count": %s}' $((n + 1)) > "$CHAIN_OUTPUT"
echo "out-a of $((n + 1))"; echo "err-a of $((n + 1))" >&2; echo "out-b of $((n + 1))"
printf 'err-b of %s' $((n + 1)) >&2
"""


@pytest.fixture(params=["fast", "realistic"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    """A fresh cluster of each kubelet profile (the realistic one relists every second: its status shows a
    new container a relist and a sync after it started, so a short stage ends before)."""
    yield from connected_cluster(tmp_path, request.param)


def test_each_line_of_short_prepared_stages_is_logged_once(cluster, capfd):
    run = run_inline(sized_chain(f"prepare_output_once_{cluster.config.profile}", LINES))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out[-3000:]
    results = xcoms(run)
    assert [results[f"c.s{k}"]["outputs"] for k in range(1, 6)] == [{"count": k} for k in range(1, 6)]
    for k in range(1, len(IMAGES) + 1):
        for line in (f"out-a of {k}", f"err-a of {k}", f"out-b of {k}", f"err-b of {k}"):
            logged = [text for text in out.splitlines() if re.search(rf"\] {re.escape(line)} +\[", text)]
            assert len(logged) == 1, (line, [t for t in out.splitlines() if "of " in t][-40:])
    taken = out.count("its output and result came with the go's exec")
    print(f"stages whose output and result came with the go's exec: {taken} of 5")
