"""The fast go end to end: a chain whose stages share one image (every swap a go) hands each go's run spec to
the slot's runner through `pods/exec` too, and each generation starts once; with `pods/exec` refused by RBAC
the chain runs the same on its annotations alone, the task log saying so."""

from __future__ import annotations

import copy
import re
from collections import Counter
from typing import Any

import pytest
import yaml
from kruise_local import resources as R

from tests.e2e.conftest import ROOT, connect_as
from tests.e2e.test_same_image import A, run_chain

pytestmark = pytest.mark.slow
REFUSED = "go via pods/exec refused by RBAC"


def starts(cluster: Any, history: list) -> Counter[int]:
    """How many times each generation started: its start marker in the slots' CRI logs (on stdout, once per
    start)."""
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    found: Counter[int] = Counter()
    for log in (cluster.root / "pods" / pod["metadata"]["uid"] / "containers").rglob("*.log"):
        found.update(int(g) for g in re.findall(r"::kruise-chain:: start gen=(\d+) ", log.read_text()))
    return found


def execs(cluster: Any) -> int:
    return sum(n for key, n in cluster.requests.items() if key.startswith("GET ") and key.endswith("/exec"))


def test_every_go_goes_by_exec_and_starts_once(e2e_cluster, capfd):
    _, history, out = run_chain(e2e_cluster, capfd, [A] * 6)
    assert out.count("via annotations only") == 6
    assert execs(e2e_cluster) == 6
    # no refusal, no failure (an exec that lost the race to the annotation may say "not taken")
    assert "go via pods/exec refused" not in out and "go via pods/exec failed" not in out
    assert starts(e2e_cluster, history) == Counter(dict.fromkeys(range(1, 7), 1))


def test_every_go_into_a_restricted_chain_goes_by_exec(e2e_cluster, capfd):
    """The restricted chain's runner (non-root, no capability, its busybox execute-only) is not dumpable when
    exec'd, as under runc's exec: its go still hands over each run spec (a child of it may not open its
    /proc/PID/fd, fbf0ca4)."""
    before = execs(e2e_cluster)
    _, history, out = run_chain(e2e_cluster, capfd, [A] * 3, pod_security="restricted")
    assert execs(e2e_cluster) - before == 3
    # before fbf0ca4 each go was not taken: "error: not a run spec of N bytes" (exit 65)
    assert "not a run spec" not in out and "go via pods/exec failed" not in out, out[-3000:]
    assert starts(e2e_cluster, history) == Counter(dict.fromkeys(range(1, 4), 1))


def test_exec_refused_by_rbac_leaves_the_go_to_the_annotation(e2e_cluster, capfd, tmp_path):
    role = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())
    assert any("pods/exec" in rule["resources"] for rule in role["rules"])  # the documented role grants it
    role["rules"] = [rule for rule in copy.deepcopy(role["rules"]) if "pods/exec" not in rule["resources"]]
    connect_as(e2e_cluster, tmp_path, role["rules"])
    _, history, out = run_chain(e2e_cluster, capfd, [A] * 4)
    assert out.count(REFUSED) == 4  # once in each stage task's log
    assert starts(e2e_cluster, history) == Counter(dict.fromkeys(range(1, 5), 1))
