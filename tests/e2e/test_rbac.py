"""Least privilege: the example DAG runs with exactly deploy/role.yaml; a missing verb is named."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.e2e.conftest import ROOT, connect_as, load_dag

pytestmark = pytest.mark.slow
ROLE = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())


def use_token(cluster, tmp_path, role: dict) -> None:
    connect_as(cluster, tmp_path, role["rules"])


def test_example_dag_runs_with_exactly_the_documented_role(e2e_cluster, tmp_path):
    use_token(e2e_cluster, tmp_path, ROLE)
    run = load_dag(ROOT / "example_dags" / "example_kruise_chain.py").test()
    assert str(run.state) == "success"
    refused = [(m, p) for m, p, c in e2e_cluster.audit if c in (401, 403)]
    assert refused == []


def test_a_missing_verb_is_refused_and_reported_by_name(e2e_cluster, tmp_path):
    role = copy.deepcopy(ROLE)
    role["rules"][0]["verbs"].remove("patch")  # no swaps allowed
    use_token(e2e_cluster, tmp_path, role)
    run = load_dag(ROOT / "example_dags" / "example_kruise_chain.py").test()
    assert str(run.state) == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["etl.setup"] == "success" and states["etl.generate"] == "failed"
    assert states["etl.teardown"] == "failed"  # it ran (the pod is deleted), then failed the run
    assert any(m == "PATCH" and c == 403 for m, p, c in e2e_cluster.audit)


def test_missing_verb_message_names_verb_and_resource(e2e_cluster, tmp_path):
    from airflow_kruise_chain.hooks.kruise import KruiseApiError, KruiseHook

    role = copy.deepcopy(ROLE)
    role["rules"][0]["verbs"].remove("patch")
    use_token(e2e_cluster, tmp_path, role)
    hook = KruiseHook(conn_id=None, config_file=str(tmp_path / "kubeconfig-sa"))
    hook.create_pod(
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "30"]}]},
        },
        "default",
    )
    with pytest.raises(KruiseApiError) as err:
        hook.patch_pod("p", "default", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 403
    assert "cannot patch pods" in str(err.value) and "'patch' on 'pods'" in str(err.value)
