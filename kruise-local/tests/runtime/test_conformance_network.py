"""Pod network namespaces of the local cluster, driven through the real `kubernetes` client: the containers
of one pod share one network namespace (they meet on localhost), pods are isolated from each other, and the
kubelet's tcpSocket/httpGet probes connect to the real port inside the pod (`pkg/probe/tcp/tcp.go`,
`pkg/probe/http/http.go`)."""

from __future__ import annotations

from kruise_local.testing import log_of, pod_body, running, status_of, wait_for

PY = "python:3.11-slim"

# an HTTP server on $PORT answering every GET with the status named in /podinfo/labels (the pod's label
# `code`, projected by the downward API), else 200
SERVE = (
    "import http.server, os, re\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        try: code = int(re.search('code=.([0-9]{3})', open('/podinfo/labels').read()).group(1))\n"
    "        except (OSError, AttributeError): code = 200\n"
    "        self.send_response(code); self.end_headers(); self.wfile.write(b'hi')\n"
    "http.server.HTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()\n"
)


def py(name: str, code: str, **extra):
    return {"name": name, "image": PY, "command": ["python3", "-c", code], **extra}


def server(name: str, port: int = 8080, **extra):
    return py(name, SERVE, env=[{"name": "PORT", "value": str(port)}], **extra)


LABELS = {
    "name": "info",
    "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
}
MOUNT = [{"name": "info", "mountPath": "/podinfo"}]


def labelled(body, **labels):
    body["metadata"]["labels"] = labels
    return body


def events(core, namespace, pod):
    return core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items


def test_two_pods_listen_on_the_same_port(core, namespace):
    """Each pod has its own network namespace: the second bind of port 8080 does not clash."""
    probe = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    for name in ("a", "b"):
        core.create_namespaced_pod(namespace, pod_body(name, server("web", readinessProbe=probe)))
    for name in ("a", "b"):
        wait_for(
            lambda n=name: (cs := status_of(core, namespace, n, "web")) is not None and cs.ready,
            timeout=60,
            what=f"{name} ready",
        )
        cs = status_of(core, namespace, name, "web")
        assert cs.restart_count == 0 and cs.state.running is not None


def test_containers_of_a_pod_meet_on_localhost(core, namespace):
    client = (
        "import time, urllib.request\n"
        "for _ in range(300):\n"
        "    try:\n"
        "        print('got', urllib.request.urlopen('http://127.0.0.1:8080/').status, flush=True); break\n"
        "    except OSError: time.sleep(0.1)\n"
        "time.sleep(3600)\n"
    )
    core.create_namespaced_pod(namespace, pod_body("p", server("web"), py("client", client)))
    wait_for(
        lambda: "got 200" in log_of(core, namespace, "p", "client"), timeout=60, what="client reached web"
    )


def test_a_pod_does_not_reach_another_pods_port(core, namespace):
    core.create_namespaced_pod(namespace, pod_body("srv", server("web", port=8089)))
    wait_for(lambda: running(core, namespace, "srv", "web"), timeout=60, what="server running")
    probe = (
        "import socket, time\n"
        "time.sleep(2)\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 8089), timeout=2); print('reached')\n"
        "except OSError as e: print('isolated', e)\n"
    )
    core.create_namespaced_pod(namespace, pod_body("other", py("c", probe), restart="Never"))
    wait_for(lambda: core.read_namespaced_pod("other", namespace).status.phase == "Succeeded", timeout=60)
    assert "isolated" in log_of(core, namespace, "other", "c")


def test_tcp_readiness_follows_the_listener(core, namespace):
    """Not Ready while nobody listens on the probed (named) port; Ready once the process listens (told to by a
    label the downward API projects)."""
    late = (
        "import os, socket, time\n"
        "labels = '/podinfo/labels'\n"
        "while not os.path.exists(labels) or 'listen=\"yes\"' not in open(labels).read(): time.sleep(0.1)\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 9000)); s.listen(); time.sleep(3600)\n"
    )
    probe = {"tcpSocket": {"port": "tcp"}, "periodSeconds": 1}
    spec = py(
        "c",
        late,
        readinessProbe=probe,
        ports=[{"name": "tcp", "containerPort": 9000}],
        volumeMounts=MOUNT,
    )
    core.create_namespaced_pod(namespace, pod_body("p", spec, volumes=[LABELS]))
    wait_for(lambda: running(core, namespace, "p", "c"), timeout=60, what="running")
    wait_for(
        lambda: sum(e.reason == "Unhealthy" for e in events(core, namespace, "p")) >= 1,
        timeout=30,
        what="failure",
    )
    failed = [e.message for e in events(core, namespace, "p") if e.reason == "Unhealthy"]
    assert failed[0] == "Readiness probe failed: dial tcp 127.0.0.1:9000: connect: connection refused"
    assert status_of(core, namespace, "p", "c").ready is False
    core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"listen": "yes"}}})
    wait_for(lambda: status_of(core, namespace, "p", "c").ready, timeout=60, what="ready once listening")


def test_http_readiness_checks_the_status_code(core, namespace):
    """500 fails (not Ready, `HTTP probe failed with statuscode: 500`); 200 passes."""
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1}
    spec = server("web", readinessProbe=probe, volumeMounts=MOUNT)
    core.create_namespaced_pod(namespace, labelled(pod_body("p", spec, volumes=[LABELS]), code="500"))
    wait_for(
        lambda: any(
            e.message == "Readiness probe failed: HTTP probe failed with statuscode: 500"
            for e in events(core, namespace, "p")
        ),
        timeout=60,
        what="a failed HTTP probe",
    )
    assert status_of(core, namespace, "p", "web").ready is False
    core.patch_namespaced_pod("p", namespace, {"metadata": {"labels": {"code": "200"}}})
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "web")) is not None and cs.ready,
        timeout=60,
        what="ready",
    )
    assert status_of(core, namespace, "p", "web").restart_count == 0


def test_http_liveness_failure_restarts_the_container(core, namespace):
    probe = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    spec = server("web", livenessProbe=probe, volumeMounts=MOUNT)
    core.create_namespaced_pod(namespace, labelled(pod_body("p", spec, volumes=[LABELS]), code="500"))
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "web")) is not None and cs.restart_count >= 1,
        timeout=90,
        what="restart after liveness failures",
    )
    cs = status_of(core, namespace, "p", "web")
    # python as pid 1 of its container has no SIGTERM handler: the kernel drops the kubelet's SIGTERM
    # (pid_namespaces(7)) and the container ends at the SIGKILL after the grace period
    assert cs.last_state.terminated is not None and cs.last_state.terminated.exit_code == 137
    seen = [(e.type, e.reason, e.message) for e in events(core, namespace, "p")]
    assert ("Warning", "Unhealthy", "Liveness probe failed: HTTP probe failed with statuscode: 500") in seen
    assert ("Normal", "Killing", "Container web failed liveness probe, will be restarted") in seen


def test_http_liveness_success_keeps_the_container(core, namespace):
    """A 200 passes the liveness probe (the threshold leaves the server ten periods to start listening)."""
    probe = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1, "failureThreshold": 10}
    ready = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
    core.create_namespaced_pod(
        namespace, pod_body("p", server("web", livenessProbe=probe, readinessProbe=ready))
    )
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "web")) is not None and cs.ready,
        timeout=60,
        what="ready",
    )
    assert status_of(core, namespace, "p", "web").restart_count == 0


def test_startup_probe_gates_liveness_and_its_failure_restarts(core, namespace):
    """Liveness is not probed before the startup probe passes; a failed startup probe kills and restarts."""
    startup = {"tcpSocket": {"port": 9001}, "periodSeconds": 1, "failureThreshold": 2}
    liveness = {"tcpSocket": {"port": 9002}, "periodSeconds": 1, "failureThreshold": 1}
    spec = py("c", "import time; time.sleep(3600)", startupProbe=startup, livenessProbe=liveness)
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    wait_for(
        lambda: (cs := status_of(core, namespace, "p", "c")) is not None and cs.restart_count >= 1,
        timeout=90,
        what="restart after startup failures",
    )
    seen = [(e.reason, e.message) for e in events(core, namespace, "p")]
    assert ("Killing", "Container c failed startup probe, will be restarted") in seen
    assert ("Unhealthy", "Startup probe failed: dial tcp 127.0.0.1:9001: connect: connection refused") in seen
    assert not any(m.startswith("Liveness") for _, m in seen)
    assert status_of(core, namespace, "p", "c").started is False


def test_host_network_pod_shares_the_hosts_ports(core, namespace):
    """hostNetwork: true keeps the pod in the host's network namespace: its listener is reachable here."""
    import socket

    with socket.socket() as probe_port:
        probe_port.bind(("127.0.0.1", 0))
        port = probe_port.getsockname()[1]
    core.create_namespaced_pod(namespace, pod_body("p", server("web", port=port), hostNetwork=True))

    def reachable() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    wait_for(reachable, timeout=60, what="the host-network pod's listener on the host")
