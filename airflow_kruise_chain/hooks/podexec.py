"""`pods/exec` over a WebSocket (`websocket-client`, as the official client's `kubernetes.stream`), for
`KruiseHook`, every wait bounded.

The official client's `stream` opens its WebSocket with no timeout at all (`ws_client.create_websocket` gives
`WebSocket.connect` none, and websocket-client then blocks): an API server that accepts the connection and
never answers the upgrade, or a black-holed address, held the fast go's thread for ever, and a frame cut
half-way blocked its reads. So the exec's request is made by the generated client (its URL, query and
authentication headers, refreshed tokens included) but not sent; this module opens the WebSocket itself with
the connect timeout and reads the v4/v5 channel protocol (`v5.channel.k8s.io`: a first byte per message names
the stream, 0 stdin, 1 stdout, 2 stderr, 3 the exec's Status, 255 a stream's close) with a deadline.
"""

from __future__ import annotations

import json
import ssl
import time
from typing import Any
from urllib.parse import urlparse

from airflow_kruise_chain.hooks.retry import KruiseApiError
from airflow_kruise_chain.hooks.timeouts import ApiTimeouts

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255


def _refused(status: int, body: bytes | str | None, namespace: str, name: str) -> KruiseApiError:
    """The error for an exec whose WebSocket upgrade the API server answered with an error status."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
    try:
        message = str(json.loads(text)["message"])
    except (ValueError, KeyError, TypeError):
        message = text.strip()[:300] or f"HTTP {status}"
    if status == 403:
        message = (
            f'permission denied: cannot create pods/exec "{name}" in namespace {namespace!r}. Grant the '
            f"verbs 'get' and 'create' on 'pods/exec' to the connection's identity. API said: {message}"
        )
    return KruiseApiError(f"exec in pod {namespace}/{name} failed ({status}): {message}", status)


class PodExec:
    """An exec opened in a pod's container (`open_exec`): its command runs and waits for its stdin, which
    `send` gives it (then waits for the end), or `close` ends without giving any (the command reads an empty
    stdin)."""

    def __init__(self, ws: Any, name: str, namespace: str) -> None:
        self._ws, self.name, self.namespace = ws, name, namespace
        self._v5 = ws.subprotocol == V5
        self._closed = False

    def send(self, stdin: bytes, timeout: float) -> tuple[int, str]:
        """Give the command `stdin` and wait for its end: (exit code, stdout + stderr). Raises
        `KruiseApiError` when it could not run (the Status's message) or did not end within `timeout` s."""
        import websocket

        deadline = time.monotonic() + timeout
        output: list[bytes] = []
        status = b""
        try:
            self._ws.settimeout(timeout)
            self._ws.send_binary(bytes([STDIN]) + stdin)
            if self._v5:  # stdin's end (older servers: the command reads a length)
                self._ws.send_binary(bytes([CLOSE, STDIN]))
            while (left := deadline - time.monotonic()) > 0:
                self._ws.settimeout(left)
                opcode, frame = self._ws.recv_data_frame(True)
                if opcode == websocket.ABNF.OPCODE_CLOSE:
                    break
                data = (
                    frame.data
                    if opcode in (websocket.ABNF.OPCODE_BINARY, websocket.ABNF.OPCODE_TEXT)
                    else b""
                )
                data = data.encode() if isinstance(data, str) else data
                if data[:1] in (bytes([STDOUT]), bytes([STDERR])):
                    output.append(data[1:])
                elif data[:1] == bytes([ERROR]):
                    status += data[1:]
            else:
                raise websocket.WebSocketTimeoutException("deadline")
        except websocket.WebSocketConnectionClosedException:
            pass  # the server ended the exec without a close message
        except (websocket.WebSocketTimeoutException, TimeoutError) as e:
            raise KruiseApiError(
                f"exec in pod {self.namespace}/{self.name} did not end within {timeout:g}s", 0
            ) from e
        except (websocket.WebSocketException, OSError) as e:
            raise KruiseApiError(f"exec in pod {self.namespace}/{self.name} failed: {e}", 0) from e
        finally:
            self.close()
        text = b"".join(output).decode(errors="replace")
        answer = json.loads(status or b"{}")
        if answer.get("status") == "Success":
            return 0, text
        for cause in (answer.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message", 1)), text
        message = answer.get("message") or "no status"
        raise KruiseApiError(
            f"exec in pod {self.namespace}/{self.name} failed: {message}", answer.get("code", 0)
        )

    def close(self) -> None:
        """End the exec (its stdin closed, given nothing if `send` was not called); once, within a second."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ws.connected and self._v5:
                self._ws.send_binary(bytes([CLOSE, STDIN]))
            self._ws.close(timeout=1)
        except Exception:  # best effort: the connection may already be gone
            self._ws.shutdown()


def _exec_request(client: Any, name: str, namespace: str, container: str, command: list[str]) -> dict:
    """The exec's request as the generated client makes it (URL, query, headers with the credentials), not
    sent: `client` (this exec's own) gets a `request` that keeps it."""
    from kubernetes.client import CoreV1Api

    made: dict[str, Any] = {}

    def keep(method: str, url: str, query_params: Any = None, headers: Any = None, **_: Any) -> dict:
        made.update(url=url, query=query_params, headers=headers or {})
        return made

    client.request = keep
    CoreV1Api(client).connect_get_namespaced_pod_exec(
        name,
        namespace,
        container=container,
        command=command,
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
    )
    return made


def _options(configuration: Any, headers: dict[str, str], timeout: float) -> dict[str, Any]:
    """`WebSocket.connect`'s options for the client's configuration: credentials, TLS, proxy, timeout."""
    import certifi

    if configuration.verify_ssl:
        tls: dict[str, Any] = {
            "cert_reqs": ssl.CERT_REQUIRED,
            "ca_certs": configuration.ssl_ca_cert or certifi.where(),
        }
        if configuration.assert_hostname is not None:
            tls["check_hostname"] = configuration.assert_hostname
    else:
        tls = {"cert_reqs": ssl.CERT_NONE}
    for key, value in (
        ("certfile", configuration.cert_file),
        ("keyfile", configuration.key_file),
        ("server_hostname", configuration.tls_server_name),
    ):
        if value:
            tls[key] = value
    options: dict[str, Any] = {
        "header": [f"{k}: {v}" for k, v in headers.items() if k.lower() == "authorization"],
        "subprotocols": [V5, V4],
        "timeout": timeout,
        "sslopt": tls,
    }
    if configuration.proxy:
        proxy = urlparse(configuration.proxy)
        options.update(http_proxy_host=proxy.hostname, http_proxy_port=proxy.port, proxy_type="http")
        if proxy.username:
            options["http_proxy_auth"] = (proxy.username, proxy.password or "")
        if configuration.no_proxy:
            options["http_no_proxy"] = [h.strip() for h in str(configuration.no_proxy).split(",")]
    return options


def open_exec(
    client: Any, name: str, namespace: str, container: str, command: list[str], timeouts: ApiTimeouts
) -> PodExec:
    """Start `command` in the pod's `container` over `pods/exec`, stdin open, connecting within
    `timeouts.connect` (each read of the upgrade's answer too). `client`: an `ApiClient` of this exec's own,
    closed before this returns. Raises `KruiseApiError`: status 403 when RBAC refused it, 0 when the API
    server did not answer (naming it)."""
    import websocket
    from kubernetes.stream.ws_client import get_websocket_url

    configuration = client.configuration
    try:
        made = _exec_request(client, name, namespace, container, command)
    finally:
        client.close()
    options = _options(configuration, made["headers"], timeouts.connect)
    ws = websocket.WebSocket(sslopt=options.pop("sslopt"), skip_utf8_validation=True)
    try:
        ws.connect(get_websocket_url(made["url"], made["query"]), **options)
    except websocket.WebSocketBadStatusException as e:
        ws.shutdown()
        raise _refused(e.status_code, e.resp_body, namespace, name) from e
    except (websocket.WebSocketException, OSError) as e:  # refused, timed out, TLS
        ws.shutdown()
        raise KruiseApiError(
            f"exec in pod {namespace}/{name} failed: cannot reach the Kubernetes API server "
            f"{configuration.host} within {timeouts.connect:g}s ({type(e).__name__}: {e}). Check that the "
            "connection names that server, that this machine reaches it (network, proxy, firewall) and that "
            "it is healthy (kubectl get --raw='/readyz?verbose')",
            0,
        ) from e
    return PodExec(ws, name, namespace)
