"""The stage runner's delivery end to end on the local cluster (issue 36): public busybox in the init
container, the runner in an immutable ConfigMap the setup makes, checked against the sum in the pod spec;
a mirror is one option; each way it can fail names the cause and the fix within seconds (the startup timeout
is 300 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pendulum
import pytest
import yaml
from kruise_local import resources as R
from kubernetes import client, config

from airflow_kruise_chain.core.runnerinstall import configmap_name, runner_configmap, runner_script
from tests.e2e.conftest import connect_as
from tests.e2e.inline import FAST_POD, Failures, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")
MIRROR = "registry.example.com/mirror/busybox:1.37.0-musl"
FAST_FAILURE = 60
"""a bound on a failed setup's duration: the failure is named as soon as the pod says it, far below the
startup timeout (300 s)"""


def chain_dag(dag_id: str, failures: Failures | None = None, **options: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **options) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            one >> two
        if failures is not None:
            assert chain.setup_task is not None
            chain.setup_task.on_failure_callback = [failures]
    return dag


def core_api(cluster: Any, tmp_path: Path) -> client.CoreV1Api:
    """The cluster's admin, through the official client."""
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig-admin")
    return client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))


def mirror_busybox(cluster: Any) -> None:
    """A copy of busybox:1.37.0-musl in a mirror registry (a test-local catalogue entry), and the public one
    gone (nodes that cannot reach Docker Hub): a run that still pulled it would fail."""
    shipped = yaml.safe_load(resources.files("kruise_local").joinpath("images.yaml").read_text())["images"]
    (entry,) = [e for e in shipped if e["ref"] == "busybox:1.37.0-musl"]
    cluster.catalogue.remove("busybox:1.37.0-musl")
    cluster.catalogue.add({**entry, "ref": MIRROR})


def setup_failed(run: Any, failures: Failures) -> str:
    states = task_states(run)
    assert str(run.state) == "failed" and states["c.setup"][0] == "failed", states
    assert states["c.setup"][1] == 1  # not retried: only an admin's act helps
    assert states["c.setup"][2] < FAST_FAILURE, states["c.setup"]
    return str(failures.errors["c.setup"])


def test_the_default_runner_is_public_busybox_and_a_configmap_the_setup_makes(e2e_cluster, tmp_path):
    history = pod_events(e2e_cluster)
    for dag_id in ("runner_cm_first", "runner_cm_second"):
        run = run_inline(chain_dag(dag_id))
        assert str(run.state) == "success", task_states(run)
    pods = [o for k, r, o in history if r is R.PODS and k == "ADDED"]
    assert {p["spec"]["initContainers"][0]["image"] for p in pods} == {"busybox:1.37.0-musl"}
    cm = core_api(e2e_cluster, tmp_path).read_namespaced_config_map(configmap_name(), "default")
    assert cm.immutable is True and cm.data == {"runner": runner_script()}
    assert cm.metadata.labels == runner_configmap("default")["metadata"]["labels"]
    created = [p for m, p, c in e2e_cluster.audit if m == "POST" and p.endswith("/configmaps")]
    assert created == ["/api/v1/namespaces/default/configmaps"]  # made once, found by the second setup


def test_a_mirrored_runner_is_one_option(e2e_cluster, monkeypatch):
    mirror_busybox(e2e_cluster)
    history = pod_events(e2e_cluster)
    monkeypatch.setenv("AIRFLOW__KRUISE_CHAIN__RUNNER_IMAGE", MIRROR)
    run = run_inline(chain_dag("runner_cm_mirror_option"))
    assert str(run.state) == "success", task_states(run)
    monkeypatch.delenv("AIRFLOW__KRUISE_CHAIN__RUNNER_IMAGE")
    run = run_inline(chain_dag("runner_cm_mirror_chain", runner_image=MIRROR))  # or the chain's own
    assert str(run.state) == "success", task_states(run)
    pods = [o for k, r, o in history if r is R.PODS and k == "ADDED"]
    assert [p["spec"]["initContainers"][0]["image"] for p in pods] == [MIRROR, MIRROR]


def test_a_squatted_configmap_fails_the_setup_before_any_pod_naming_it_and_the_fix(e2e_cluster, tmp_path):
    core = core_api(e2e_cluster, tmp_path)
    squat = runner_configmap("default")
    squat["data"] = {"runner": "#!/kruise-chain/bin/busybox sh\necho not the provider's\n"}
    core.create_namespaced_config_map("default", squat)
    history = pod_events(e2e_cluster)
    failures = Failures()
    message = setup_failed(run_inline(chain_dag("runner_cm_squatted", failures)), failures)
    name = configmap_name()
    assert message.startswith(
        f"the stage runner's ConfigMap default/{name} is not this provider's (its runner"
    )
    assert f"kubectl delete configmap {name} -n default" in message
    assert "kruise-chain runner-configmap --namespace default | kubectl apply -f -" in message
    assert not [o for k, r, o in history if r is R.PODS]  # refused before the pod
    core.delete_namespaced_config_map(name, "default")  # the fix it names
    assert str(run_inline(chain_dag("runner_cm_squatted_fixed")).state) == "success"


def _replace_configmap_before_the_pod(monkeypatch: Any, core: client.CoreV1Api, data: dict | None) -> None:
    """Between the setup's check of the runner's ConfigMap and the pod's creation, someone deletes it and
    (`data` given) makes it again with `data`: what the pod's own check is for."""
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    create_pod = KruiseHook.create_pod

    def replaced(self: KruiseHook, body: dict, namespace: str) -> dict:
        core.delete_namespaced_config_map(configmap_name(), namespace)
        if data is not None:
            core.create_namespaced_config_map(namespace, {**runner_configmap(namespace), "data": data})
        return create_pod(self, body, namespace)

    monkeypatch.setattr(KruiseHook, "create_pod", replaced)


def test_a_runner_replaced_after_the_setup_checked_it_is_refused_in_the_pod(
    e2e_cluster, tmp_path, monkeypatch
):
    core = core_api(e2e_cluster, tmp_path)
    tampered = runner_script().replace("kc_bb=", "echo pwned >&2; kc_bb=", 1)
    assert tampered != runner_script()
    _replace_configmap_before_the_pod(monkeypatch, core, {"runner": tampered})
    history = pod_events(e2e_cluster)
    failures = Failures()
    message = setup_failed(run_inline(chain_dag("runner_cm_tampered", failures)), failures)
    name = configmap_name()
    assert (
        f"the stage runner's ConfigMap default/{name} is not this provider's (its runner's sha256" in message
    )
    assert f"kubectl delete configmap {name} -n default" in message
    pods = [o for k, r, o in history if r is R.PODS]
    ended = [
        s["lastState"].get("terminated") or s["state"].get("terminated")
        for p in pods
        for s in (p.get("status") or {}).get("initContainerStatuses") or []
    ]
    assert 65 in {e.get("exitCode") for e in ended if e}  # the init container's own check refused it
    started = [
        s for p in pods for s in (p.get("status") or {}).get("containerStatuses") or [] if s.get("started")
    ]
    assert started == []  # no slot ever ran the tampered runner


def test_a_configmap_deleted_before_the_kubelet_read_it_is_named(e2e_cluster, tmp_path, monkeypatch):
    _replace_configmap_before_the_pod(monkeypatch, core_api(e2e_cluster, tmp_path), None)
    failures = Failures()
    message = setup_failed(run_inline(chain_dag("runner_cm_deleted", failures)), failures)
    assert (
        message.startswith("chain pod default/c-")
        and f"the stage runner's ConfigMap default/{configmap_name()} cannot be read by the kubelet"
        in message
    )
    assert f'configmap "{configmap_name()}" not found' in message


def test_a_configmap_the_identity_may_not_create_names_the_rule_and_the_admin_command(e2e_cluster, tmp_path):
    role = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "role.yaml").read_text())
    (rule,) = [r for r in role["rules"] if r["resources"] == ["configmaps"]]
    rule["verbs"] = ["get"]  # an identity that may read it only
    connect_as(e2e_cluster, tmp_path, role["rules"])
    failures = Failures()
    message = setup_failed(run_inline(chain_dag("runner_cm_forbidden", failures)), failures)
    assert message.startswith(f"the stage runner's ConfigMap default/{configmap_name()} is missing and the")
    assert "grant it `create` on `configmaps` in 'default' (deploy/role.yaml" in message
    assert 'cannot create resource "configmaps"' in message  # what the API server said
    assert not [p for m, p, c in e2e_cluster.audit if m == "POST" and p.endswith("/pods")]
    # the admin applies the manifest the command prints (kubectl sends no token over the local cluster's
    # plain HTTP: the client does it here; test_the_admin_command_makes_the_configmap_the_setup_finds runs the
    # command itself); the identity then needs `get` only
    core_api(e2e_cluster, tmp_path).create_namespaced_config_map(
        "default", json.loads(print_configmap("default"))
    )
    run = run_inline(chain_dag("runner_cm_forbidden_applied"))
    assert str(run.state) == "success", task_states(run)


def print_configmap(namespace: str) -> str:
    """`kruise-chain runner-configmap --namespace NAMESPACE`'s output."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_kruise_chain.cli", "runner-configmap", "--namespace", namespace],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def test_the_admin_command_makes_the_configmap_the_setup_finds(e2e_cluster, tmp_path):
    kubeconfig = e2e_cluster.write_kubeconfig(tmp_path / "kubeconfig-kubectl")
    command = (
        f"kruise-chain runner-configmap --namespace default | kubectl --kubeconfig {kubeconfig} apply -f -"
    )
    env = {**os.environ, "HOME": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout.strip() == f"configmap/{configmap_name()} created", done
    e2e_cluster.audit.clear()
    run = run_inline(chain_dag("runner_cm_applied"))
    assert str(run.state) == "success", task_states(run)
    assert not [p for m, p, c in e2e_cluster.audit if p.endswith("/configmaps")]  # found, not made


@pytest.mark.parametrize(
    ("image", "said"),
    [
        ("registry.example.com/nope/busybox:1.37.0-musl", "cannot be pulled (ErrImagePull"),
        ("gcr.io/distroless/static-debian12:nonroot", "cannot run /bin/sh"),
    ],
)
def test_a_runner_image_that_cannot_serve_fails_the_setup_naming_the_option(e2e_cluster, image, said):
    failures = Failures()
    message = setup_failed(
        run_inline(chain_dag(f"runner_cm_image_{image.split('/')[1][:8]}", failures, runner_image=image)),
        failures,
    )
    assert f"the runner image {image} {said}" in message or f"the runner image docker.io/{image}" in message
    assert "runner_image" in message and "busybox:1.37.0-musl" in message
