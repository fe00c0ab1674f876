"""Pod Security Admission on the local cluster, through the official client and kubectl: namespace labels
select the level, refusals and warnings carry the real plugin's words (k8s.io/pod-security-admission
`admission.go` `EvaluatePod`, the `policy/check_*.go` details)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kruise_local import ClusterConfig, LocalCluster, PodSecurityConfiguration
from kruise_local.pod_security_checks import checks_for, evaluate
from kruise_local.testing import container, pod_body, running, status_of, wait_for
from kubernetes.client import ApiException

RESTRICTED_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.fixture
def labelled(core: Any) -> Iterator[Callable[..., str]]:
    """Make namespaces with the given pod-security labels (mode=level or mode-version=v1.x)."""
    made: list[str] = []

    def make(**labels: str) -> str:
        name = f"psa-{uuid.uuid4().hex[:8]}"
        core.create_namespace(
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        f"pod-security.kubernetes.io/{k.replace('_', '-')}": v for k, v in labels.items()
                    },
                }
            }
        )
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


def _refusal(core: Any, ns: str, body: dict[str, Any]) -> ApiException:
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod(ns, body)
    return info.value


def _message(e: ApiException) -> str:
    return str(yaml.safe_load(e.body)["message"])


def test_restricted_namespace_refuses_a_privileged_pod_naming_each_violation(
    core: Any, labelled: Any
) -> None:
    ns = labelled(enforce="restricted")
    body = pod_body("priv", container("main", "sleep 1", securityContext={"privileged": True}))
    e = _refusal(core, ns, body)
    assert e.status == 403 and yaml.safe_load(e.body)["reason"] == "Forbidden"
    assert _message(e) == (
        'pods "priv" is forbidden: violates PodSecurity "restricted:latest": '
        'privileged (container "main" must not set securityContext.privileged=true), '
        'allowPrivilegeEscalation != false (container "main" must set '
        "securityContext.allowPrivilegeEscalation=false), "
        'unrestricted capabilities (container "main" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")'
    )
    assert core.list_namespaced_pod(ns).items == []


def test_restricted_namespace_refuses_host_path_and_host_namespaces(core: Any, labelled: Any) -> None:
    ns = labelled(enforce="restricted")
    body = pod_body(
        "host",
        container("main", "sleep 1", securityContext=RESTRICTED_CONTEXT),
        hostNetwork=True,
        hostPID=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    message = _message(_refusal(core, ns, body))
    assert message == (
        'pods "host" is forbidden: violates PodSecurity "restricted:latest": '
        "host namespaces (hostNetwork, hostPID), "
        'restricted volume types (volume "root" uses restricted volume type "hostPath")'
    )


def test_baseline_namespace_admits_an_ordinary_pod_and_refuses_host_path(core: Any, labelled: Any) -> None:
    ns = labelled(enforce="baseline")
    core.create_namespaced_pod(ns, pod_body("plain", container("main", "sleep 30")))
    wait_for(lambda: running(core, ns, "plain", "main"), what="the baseline pod running")
    body = pod_body(
        "host", container("main", "sleep 1"), volumes=[{"name": "h", "hostPath": {"path": "/tmp"}}]
    )
    assert _message(_refusal(core, ns, body)) == (
        'pods "host" is forbidden: violates PodSecurity "baseline:latest": hostPath volumes (volume "h")'
    )


def test_restricted_namespace_admits_a_pod_with_the_restricted_contexts(core: Any, labelled: Any) -> None:
    ns = labelled(enforce="restricted")
    init = container("init", "true", securityContext=RESTRICTED_CONTEXT)
    body = pod_body(
        "ok", container("main", "sleep 30", securityContext=RESTRICTED_CONTEXT), initContainers=[init]
    )
    core.create_namespaced_pod(ns, body)
    wait_for(lambda: running(core, ns, "ok", "main"), what="the restricted pod running")


def test_warn_admits_with_a_warning_header(core: Any, labelled: Any) -> None:
    ns = labelled(enforce="baseline", warn="restricted", warn_version="v1.30")
    _, status, headers = core.create_namespaced_pod_with_http_info(
        ns, pod_body("w", container("main", "sleep 1"))
    )
    assert status == 201
    warning = headers["Warning"]
    assert warning.startswith(
        '299 - "would violate PodSecurity \\"restricted:v1.30\\": allowPrivilegeEscalation != false'
    )
    core.read_namespaced_pod("w", ns)


def test_an_unlabelled_namespace_is_privileged(core: Any, namespace: str) -> None:
    body = pod_body("p", container("main", "sleep 1", securityContext={"privileged": True}), hostPID=True)
    _, status, headers = core.create_namespaced_pod_with_http_info(namespace, body)
    assert status == 201 and "Warning" not in headers


def test_invalid_labels_are_refused_on_create(core: Any) -> None:
    name = f"psa-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ApiException) as info:
        core.create_namespace(
            {"metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "strict"}}}
        )
    assert info.value.status == 422
    assert _message(info.value) == (
        f'Namespace "{name}" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
        'Invalid value: "strict": must be one of privileged, baseline, restricted'
    )


def test_tightening_a_namespace_warns_of_existing_pods(core: Any, labelled: Any) -> None:
    ns = labelled()
    for name in ("b", "a"):
        core.create_namespaced_pod(ns, pod_body(name, container("main", "sleep 1"), hostIPC=True))
    patch = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}
    _, _, headers = core.patch_namespace_with_http_info(ns, patch)
    warnings = headers.getlist("Warning") if hasattr(headers, "getlist") else [headers["Warning"]]
    text = " ".join(warnings)
    assert (
        f'existing pods in namespace \\"{ns}\\" violate the new PodSecurity enforce level '
        '\\"baseline:latest\\"' in text
    )
    assert "a (and 1 other pod): host namespaces" in text
    # the existing pods stay; an insignificant update (a label) of one is admitted, a new one is refused
    core.patch_namespaced_pod("a", ns, {"metadata": {"labels": {"x": "y"}}})
    e = _refusal(core, ns, pod_body("c", container("main", "sleep 1"), hostIPC=True))
    assert "host namespaces (hostIPC)" in _message(e)


def test_a_pinned_version_applies_the_checks_of_that_version() -> None:
    """runAsUser=0 is a restricted violation from v1.23 (`check_runAsUser.go` MinimumVersion 1.23)."""
    spec = {"containers": [{"name": "c", "securityContext": {**RESTRICTED_CONTEXT, "runAsUser": 0}}]}
    assert [r for r, _ in evaluate("restricted", 22, {}, spec)] == []
    assert [r for r, _ in evaluate("restricted", 23, {}, spec)] == ["runAsUser=0"]
    # overrides: restricted replaces the baseline hostPath and capabilities checks
    names = [fn.__name__ for fn in checks_for("restricted", 35)]
    assert "host_path_volumes" not in names and "capabilities_baseline" not in names


def test_exemptions_skip_the_checks(tmp_path: Path) -> None:
    config = ClusterConfig(
        root=str(tmp_path),
        pod_security=PodSecurityConfiguration(enforce="restricted", exempt_namespaces=("free",)),
    )
    with LocalCluster(config) as c:
        from kubernetes import client
        from kubernetes import config as kconfig

        core = client.CoreV1Api(
            kconfig.new_client_from_config(config_file=str(c.write_kubeconfig(tmp_path / "k")))
        )
        for ns in ("free", "strict"):
            core.create_namespace({"metadata": {"name": ns}})
        body = pod_body("p", container("main", "sleep 1"))
        core.create_namespaced_pod("free", body)  # exempt namespace
        e = _refusal(core, "strict", body)  # the configured default enforces restricted
        assert 'violates PodSecurity "restricted:latest"' in _message(e)


KUBECTL = shutil.which("kubectl")


@pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH")
def test_kubectl_shows_the_refusal_and_the_warning(kubeconfig: Path, labelled: Any, tmp_path: Path) -> None:
    ns = labelled(enforce="restricted", warn="restricted")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    manifest = yaml.safe_dump(
        pod_body("k", container("main", "sleep 1", securityContext={"privileged": True}))
    )
    done = subprocess.run(
        [KUBECTL, "-n", ns, "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0
    assert 'pods "k" is forbidden: violates PodSecurity "restricted:latest": privileged' in done.stderr
    ns2 = labelled(warn="baseline")
    done = subprocess.run(
        [KUBECTL, "-n", ns2, "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (
        'Warning: would violate PodSecurity "baseline:latest": privileged (container "main" must not set '
        "securityContext.privileged=true)"
    ) in done.stderr


def test_the_kubelet_refuses_to_run_a_non_root_container_as_root(core: Any, namespace: str) -> None:
    """`kuberuntime` `verifyRunAsNonRoot`: runAsNonRoot with runAsUser 0, or with no runAsUser on an image
    without a numeric USER (the catalogue's images run as root), is CreateContainerConfigError."""
    pod = pod_body(
        "nr",
        container("zero", "sleep 30", securityContext={"runAsNonRoot": True, "runAsUser": 0}),
        container("image", "sleep 30"),
        container("ok", "sleep 30", securityContext={"runAsUser": 1000}),
        securityContext={"runAsNonRoot": True},
    )
    core.create_namespaced_pod(namespace, pod)

    def config_error(name: str) -> Any:
        status = status_of(core, namespace, "nr", name)
        waiting = status.state.waiting if status is not None else None
        return waiting if waiting is not None and waiting.reason == "CreateContainerConfigError" else None

    zero = wait_for(lambda: config_error("zero"), what="zero refused")
    image = wait_for(lambda: config_error("image"), what="image refused")
    uid = core.read_namespaced_pod("nr", namespace).metadata.uid
    where = f'(pod: "nr_{namespace}({uid})", container:'
    assert zero.message == f"container's runAsUser breaks non-root policy {where} zero)"
    assert image.message == f"container has runAsNonRoot and image will run as root {where} image)"
    wait_for(lambda: running(core, namespace, "nr", "ok"), what="the container with a non-root user running")
    events = [e.message for e in core.list_namespaced_event(namespace).items if e.reason == "Failed"]
    assert f"Error: {zero.message}" in events
