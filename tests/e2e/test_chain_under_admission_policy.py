"""The shipped ValidatingAdmissionPolicy (deploy/admission-policy.yaml) lets the whole example DAG run under
the chain's identity with exactly deploy/role.yaml, on the local cluster with authorization enforced."""

from __future__ import annotations

import pytest
import yaml
from kubernetes import client, config

from tests.e2e.conftest import ROOT, connect_as, load_dag

pytestmark = pytest.mark.slow
ROLE = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())
POLICY, BINDING = yaml.safe_load_all((ROOT / "deploy" / "admission-policy.yaml").read_text())
CHAIN_ACCOUNT = ("chains", "airflow-kruise-chain")  # the identity the policy's matchConditions names


def test_example_dag_runs_under_the_shipped_admission_policy(e2e_cluster, tmp_path):
    kubeconfig = connect_as(e2e_cluster, tmp_path, ROLE["rules"], account=CHAIN_ACCOUNT)
    admin = config.new_client_from_config(str(e2e_cluster.write_kubeconfig(tmp_path / "admin")))
    api = client.AdmissionregistrationV1Api(admin)
    api.create_validating_admission_policy(POLICY)
    api.create_validating_admission_policy_binding(BINDING)
    e2e_cluster.audit.clear()
    run = load_dag(ROOT / "example_dags" / "example_kruise_chain.py").test()
    assert str(run.state) == "success"
    refused = [(m, p, c) for m, p, c in e2e_cluster.audit if c in (401, 403, 422)]
    assert refused == []
    # the policy was in force: the same identity is refused a foreign pod (its Role allows deleting pods)
    core = client.CoreV1Api(admin)
    foreign = {
        "metadata": {"name": "foreign"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "30"]}]},
    }
    core.create_namespaced_pod("default", foreign)
    chain = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    with pytest.raises(client.ApiException) as err:
        chain.delete_namespaced_pod("foreign", "default")
    assert err.value.status == 403 and "ValidatingAdmissionPolicy 'airflow-kruise-chain'" in err.value.body


def test_every_fast_go_is_admitted_by_the_shipped_policy(e2e_cluster, capfd, tmp_path):
    """Under deploy/role.yaml and the policy, each go of a one-image chain still reaches the slot's runner
    through pods/exec: the policy admits the runner's go command in a chain pod's slot (and no other)."""
    from tests.e2e.test_fastgo import execs
    from tests.e2e.test_same_image import A, run_chain

    connect_as(e2e_cluster, tmp_path, ROLE["rules"], account=CHAIN_ACCOUNT)
    admin = config.new_client_from_config(str(e2e_cluster.write_kubeconfig(tmp_path / "admin")))
    client.AdmissionregistrationV1Api(admin).create_validating_admission_policy(POLICY)
    client.AdmissionregistrationV1Api(admin).create_validating_admission_policy_binding(BINDING)
    _, _, out = run_chain(e2e_cluster, capfd, [A] * 4)
    assert execs(e2e_cluster) == 4
    assert "go via pods/exec refused" not in out  # every exec admitted (a 403 would say "refused")
