"""`kruise-local up|status|down` starts a cluster in the background that the real client reaches."""

from __future__ import annotations

import subprocess
import sys

from kubernetes import client, config


def cli(home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kruise_local", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_up_status_down(tmp_path):
    home = tmp_path / "kl"
    up = cli(home, "up", "--nodes", "2", "--no-image-pull-job-gate")
    assert up.returncode == 0, up.stderr
    try:
        assert f"export KUBECONFIG={home / 'kubeconfig'}" in up.stdout
        status = cli(home, "status")
        assert status.returncode == 0 and "2 node(s)" in status.stdout
        api = config.new_client_from_config(config_file=str(home / "kubeconfig"))
        nodes = sorted(n.metadata.name for n in client.CoreV1Api(api).list_node().items)
        assert nodes == ["node-0", "node-1"]
        again = cli(home, "up")
        assert again.returncode == 0 and "already running" in again.stdout
    finally:
        down = cli(home, "down")
    assert down.returncode == 0 and "stopped" in down.stdout
    assert cli(home, "status").returncode == 1


def test_up_with_rbac_and_tls(tmp_path):
    """`--authorization-mode RBAC --tls`: the kubeconfig's admin (its CA in it) may do anything, a request
    without a token is anonymous, and the state folder holds the CA."""
    import json
    import ssl
    import urllib.error
    import urllib.request

    home = tmp_path / "kl"
    up = cli(home, "up", "--authorization-mode", "RBAC", "--tls")
    assert up.returncode == 0, up.stderr
    try:
        api = config.new_client_from_config(config_file=str(home / "kubeconfig"))
        assert api.configuration.host.startswith("https://")
        review = client.AuthenticationV1Api(api).create_self_subject_review({})
        assert "system:masters" in review.status.user_info.groups
        context = ssl.create_default_context(cafile=str(home / "ca.crt"))
        with urllib.request.urlopen(api.configuration.host + "/version", context=context, timeout=10) as r:
            assert r.status == 200  # system:public-info-viewer
        try:
            urllib.request.urlopen(api.configuration.host + "/api/v1/pods", context=context, timeout=10)
            raise AssertionError("an anonymous list was allowed")
        except urllib.error.HTTPError as e:
            assert e.code == 403 and "system:anonymous" in json.loads(e.read())["message"]
        assert cli(home, "status").returncode == 0
    finally:
        assert cli(home, "down").returncode == 0
