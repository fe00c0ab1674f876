"""The example DAG end to end on the local cluster, checked from the API server's and kubelet's records."""

from __future__ import annotations

import re
from datetime import datetime

import pytest
from kruise_local import resources as R
from kruise_local.crdschema import validate_against_crd
from kruise_local.imageref import normalize

from tests.conftest import CRDS
from tests.e2e.conftest import ROOT, load_dag, xcoms

pytestmark = pytest.mark.slow
STAGES = ["generate", "transform", "aggregate", "report"]


def expected_data(records: int = 1000, min_value: int = 250) -> tuple[int, dict[str, int]]:
    """What transform and aggregate must produce if they read generate's records (the DAG's formula)."""
    kept, sums = 0, {}
    for i in range(1, records + 1):
        value = (i * 7919) % 1000
        if value >= min_value:
            kept += 1
            region = f"REGION-{i % 4}"
            sums[region] = sums.get(region, 0) + value * 2
    return kept, sums


def test_example_dag_runs_every_stage_once_in_one_pod(e2e_cluster):
    cluster = e2e_cluster
    history = []
    cluster.call(lambda: cluster.store.listen(lambda kind, res, obj, old: history.append((kind, res, obj))))
    dag = load_dag(ROOT / "example_dags" / "example_kruise_chain.py")
    run = dag.test()
    assert str(run.state) == "success"

    # exactly one pod for the whole run, and it is gone after teardown
    created = [p for m, p, c in cluster.audit if m == "POST" and p.endswith("/pods") and c == 201]
    assert len(created) == 1
    pods_added = [o for k, r, o in history if r is R.PODS and k == "ADDED"]
    assert len(pods_added) == 1
    pod = pods_added[0]
    assert any(k == "DELETED" and r is R.PODS for k, r, _ in history)
    assert (
        cluster.call(
            lambda: cluster.store.peek(R.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        )
        is None
    )

    # every stage ran exactly once, in DAG order: one start marker per generation on the containers' stdout
    # (the runner prints its copy on stderr too)
    logs = sorted((cluster.root / "pods" / pod["metadata"]["uid"] / "containers").rglob("*.log"))
    starts = []
    for log in logs:
        starts += re.findall(
            r"^\S+ stdout [FP] ::kruise-chain:: start gen=(\d+) token=\S* stage=(\S+) slot=\S+ at=(\S+)",
            log.read_text(),
            re.M,
        )
    starts.sort(key=lambda s: int(s[0]))
    assert [s[1] for s in starts] == STAGES
    assert [int(s[0]) for s in starts] == [1, 2, 3, 4]

    # data written by stage N was read by stage N+1
    results = xcoms(run)
    out = {s: results[f"etl.{s}"] for s in STAGES}
    assert all(out[s]["exit_code"] == 0 for s in STAGES)
    kept, sums = expected_data()
    assert out["generate"]["outputs"] == {"records": 1000, "file": "records.csv"}
    assert out["transform"]["outputs"] == {"kept": kept}
    assert out["aggregate"]["outputs"] == {"regions": 4, "total": sum(sums.values())}
    assert out["report"]["outputs"]["top_region"] == max(sums, key=sums.get)
    assert [out[s]["generation"] for s in STAGES] == [1, 2, 3, 4]
    assert [out[s]["slot"] for s in STAGES] == ["slot-a", "slot-b", "slot-a", "slot-b"]

    # each stage's image was on the node (prewarmed) before its stage started
    node_name = next(
        o["spec"]["nodeName"] for _, r, o in history if r is R.PODS and o["spec"].get("nodeName")
    )
    node = cluster.kubelet.nodes[node_name]
    for s in STAGES:
        image = normalize(out[s]["image"])
        assert image in node.pulled_at, f"{image} never pulled"
        assert node.pulled_at[image] <= datetime.fromisoformat(out[s]["started_at"]), s

    # every Kruise object the run created validates against the OpenKruise CRD schemas
    kruise = [o for k, r, o in history if r in (R.IMAGE_PULL_JOBS, R.CRRS, R.NODE_IMAGES)]
    assert any(o["kind"] == "ImagePullJob" for o in kruise)
    if CRDS.is_dir():
        for obj in kruise:
            assert validate_against_crd(obj) == [], (obj["kind"], obj["metadata"]["name"])
