"""The local cluster's own tests. Fixtures come from `kruise_local.pytest_plugin` (loaded through pytest's
addopts). hypothesis is imported here, while only this thread runs: its pytest plugin otherwise imports it
lazily at the end of a run, while the clusters' threads may still be working, and CPython 3.11.7 can then
fail with "SystemError: AST constructor recursion depth mismatch" after every test passed."""

import uuid
from collections.abc import Iterator
from typing import Any

import hypothesis  # noqa: F401
import pytest


@pytest.fixture(scope="session")
def realistic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A CoreV1Api on a local cluster of the realistic profile (one per session: its delays are the point)."""
    from kruise_local import ClusterConfig, LocalCluster
    from kubernetes import client, config

    c = LocalCluster(ClusterConfig(profile="realistic", nodes=1, root=str(tmp_path_factory.mktemp("rc"))))
    c.start()
    kubeconfig = c.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")
    yield client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    c.stop()


@pytest.fixture
def realistic_ns(realistic: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    realistic.create_namespace({"metadata": {"name": name}})
    yield name
    realistic.delete_namespace(name)


@pytest.fixture(scope="module")
def rbac_cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A local cluster that authorizes by RBAC (one per module), with the module's namespace `NS` made:
    {"cluster", "admin" (an ApiClient of the admin's token), "root" (a folder for kubeconfigs)}."""
    from kruise_local import ClusterConfig, LocalCluster
    from kubernetes import client, config

    root = tmp_path_factory.mktemp("rbac")
    with LocalCluster(ClusterConfig(profile="fast", root=str(root / "c"), authorization_mode="RBAC")) as c:
        admin = config.new_client_from_config(str(c.write_kubeconfig(root / "admin")))
        client.CoreV1Api(admin).create_namespace({"metadata": {"name": request.module.NS}})
        yield {"cluster": c, "admin": admin, "root": root}
