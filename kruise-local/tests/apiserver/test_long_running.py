"""Long-running requests outlive `--request-timeout` as on a real API server: kube-apiserver's
`BasicLongRunningRequestCheck(watch, proxy; attach, exec, proxy, log, portforward)` exempts them from
`WithTimeoutForNonLongRunningRequests`, so an exec session longer than the timeout keeps its output and its
exit code, while a request that is not long-running is still cut off with a 504."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from kruise_local import ClusterConfig, LocalCluster, limits
from kruise_local.testing import container, pod_body, running, wait_for

TIMEOUT = 1.0
"""the cluster's request timeout; the exec sessions run 2.5 times as long"""
SESSION = "sleep 2.5; echo done"


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("GET", "/api/v1/namespaces/n/pods/p/exec?command=sh", True),  # WebSocket
        ("POST", "/api/v1/namespaces/n/pods/p/exec?command=sh", True),  # SPDY
        ("POST", "/api/v1/namespaces/n/pods/p/attach", True),
        ("GET", "/api/v1/namespaces/n/pods/p/portforward?ports=80", True),
        ("GET", "/api/v1/namespaces/n/pods/p/log", True),  # followed or not: the subresource decides
        ("GET", "/api/v1/namespaces/n/pods/p/log?follow=true", True),
        ("GET", "/api/v1/namespaces/n/services/s/proxy/x", True),
        ("GET", "/api/v1/nodes/node-1/proxy/metrics", True),
        ("GET", "/api/v1/watch/namespaces/n/pods", True),
        ("GET", "/api/v1/namespaces/n/pods?watch=true", True),
        ("GET", "/apis/apps.kruise.io/v1alpha1/clonesets?watch=1", True),
        ("GET", "/api/v1/namespaces?watch=true", True),
        ("GET", "/api/v1/namespaces/n/pods", False),
        ("GET", "/api/v1/namespaces/n/pods/p", False),
        ("GET", "/api/v1/namespaces/n/pods/p?watch=true", False),  # a get, as `NewRequestInfo` resolves it
        ("POST", "/api/v1/namespaces/n/pods/p/eviction", False),
        ("PUT", "/api/v1/namespaces/n/finalize", False),
        ("GET", "/api/v1/namespaces/n", False),
        ("POST", "/api/v1/namespaces/n/pods?watch=true", False),
        ("GET", "/version", False),
        ("GET", "/healthz", False),
    ],
)
def test_long_running_requests_are_those_of_basic_long_running_request_check(method, path, expected):
    assert limits.long_running(make_mocked_request(method, path)) is expected


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Any, Path]]:
    from kubernetes import client, config

    root = tmp_path_factory.mktemp("long-running")
    c = LocalCluster(ClusterConfig(profile="fast", root=str(root), request_timeout=TIMEOUT))
    c.start()
    kubeconfig = c.write_kubeconfig(root / "kubeconfig")
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
    core.create_namespaced_pod("default", pod_body("p", container("main", "exec sleep 300")))
    wait_for(lambda: running(core, "default", "p", "main"))
    yield c, core, kubeconfig
    c.stop()


def test_an_exec_session_longer_than_the_request_timeout_keeps_its_output_and_exit_code(short):
    from kubernetes.stream import stream

    _, core, _ = short
    resp = stream(
        core.connect_get_namespaced_pod_exec,
        "p",
        "default",
        command=["sh", "-c", SESSION],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=False,
    )
    resp.run_forever(timeout=30)
    assert resp.read_stdout() == "done\n"
    assert resp.returncode == 0


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_exec_longer_than_the_request_timeout_ends_with_the_command(short, tmp_path):
    _, _, kubeconfig = short
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
    cmd = ["kubectl", "exec", "p", "--", "sh", "-c", SESSION]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr


def test_a_request_that_is_not_long_running_still_times_out_with_504(short):
    cluster, _, _ = short
    host, port = urllib.parse.urlparse(cluster.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(  # a create whose body never arrives
            b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 504")
    assert b'"reason":"Timeout"' in answer.replace(b" ", b"")


def test_a_watch_and_a_log_follow_longer_than_the_request_timeout_end_as_they_would(short):
    from kubernetes import watch

    _, core, _ = short
    core.create_namespaced_pod(
        "default", pod_body("follow", container("main", "echo a; sleep 2.5; echo b"), restart="Never")
    )
    wait_for(lambda: running(core, "default", "follow", "main"))

    def log(**kw: Any) -> bytes:
        return core.read_namespaced_pod_log("follow", "default", _preload_content=False, **kw).data

    wait_for(lambda: log() == b"a\n", what="the first line")
    # the follow ends with the container, after more than twice the request timeout, with all its lines
    assert log(follow=True, _request_timeout=30) == b"a\nb\n"
    # a watch ends at its timeoutSeconds (3 x the request timeout), its stream complete
    w = watch.Watch()
    stream = w.stream(core.list_namespaced_pod, "default", timeout_seconds=3, _request_timeout=30)
    names = [e["object"].metadata.name for e in stream if e["type"] == "ADDED"]
    assert sorted(names) == ["follow", "p"]
