"""The Kubernetes version the local cluster models (`ClusterConfig.kubernetes_version`, `kruise-local
--kubernetes-version`, `features.Features`), through the official client: `/version` and the OpenAPI
documents agree, and a version-gated rule follows the version (a NotRequired resize that lowers a memory
limit: refused on 1.33, kubernetes/kubernetes#130183; allowed from 1.34, kubernetes/kubernetes#133012)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.cli import _kubernetes_version
from kruise_local.features import Features
from kruise_local.testing import container, pod_body, running, wait_for
from kubernetes import client, config
from kubernetes.client import ApiException


def _api(c: LocalCluster, tmp: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(c.write_kubeconfig(tmp / "kubeconfig")))


def _get(api: client.ApiClient, path: str) -> dict:
    response = api.call_api(path, "GET", _preload_content=False, auth_settings=["BearerToken"])
    return json.loads((response[0] if isinstance(response, tuple) else response).data)


def _lower_memory_limit(core: client.CoreV1Api) -> None:
    core.patch_namespaced_pod_resize(
        "p",
        "default",
        {
            "spec": {
                "containers": [
                    {"name": "c", "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "48Mi"}}}
                ]
            }
        },
    )


@pytest.mark.parametrize(("version", "lowers"), [("1.33.2", False), ("1.34.0", True), ("1.35.0", True)])
def test_the_version_is_one_answer_and_gates_lowering_a_memory_limit(tmp_path, version, lowers):
    with LocalCluster(
        ClusterConfig(profile="fast", root=str(tmp_path / "r"), kubernetes_version=version)
    ) as c:
        api = _api(c, tmp_path)
        git = client.VersionApi(api).get_code()
        assert (git.major, git.minor, git.git_version) == (
            "1",
            version.split(".")[1],
            f"v{version}+kruise-local",
        )
        assert _get(api, "/openapi/v2")["info"]["version"] == git.git_version  # kubectl compares these
        assert _get(api, "/openapi/v3/api/v1")["info"]["version"] == git.git_version
        (node,) = client.CoreV1Api(api).list_node().items
        assert node.status.node_info.kubelet_version == f"v{version}"  # the kubelet runs the same version
        core = client.CoreV1Api(api)
        resources = {"requests": {"memory": "32Mi"}, "limits": {"memory": "64Mi"}}
        core.create_namespaced_pod(
            "default", pod_body("p", container("c", "exec sleep 60", resources=resources))
        )
        wait_for(lambda: running(core, "default", "p", "c"))
        if lowers:
            _lower_memory_limit(core)
            spec = core.read_namespaced_pod("p", "default").spec.containers[0].resources
            assert spec.limits["memory"] == "48Mi"
        else:
            with pytest.raises(ApiException) as err:
                _lower_memory_limit(core)
            assert err.value.status == 422
            assert (
                "memory limits cannot be decreased unless resizePolicy is RestartContainer" in err.value.body
            )


@pytest.mark.parametrize("text", ["1.31", "2.0", "1.36.0", "latest", ""])
def test_an_unmodelled_version_is_refused_naming_the_option_and_the_choices(text):
    with pytest.raises(ValueError, match=r"kubernetes_version: .* use one of 1\.32, 1\.33, 1\.34, 1\.35"):
        ClusterConfig(kubernetes_version=text)
    with pytest.raises(Exception, match="kubernetes_version"):
        _kubernetes_version(text)  # the CLI's --kubernetes-version


def test_version_spellings() -> None:
    assert Features.parse("v1.34.2").version == "1.34.2" and Features.parse("1.33").version == "1.33.0"
    assert [Features.parse(f"1.{m}").memory_limit_decrease for m in (32, 33, 34, 35)] == [
        False,
        False,
        True,
        True,
    ]
    assert [Features.parse(f"1.{m}").in_place_resize for m in (32, 33)] == [False, True]
