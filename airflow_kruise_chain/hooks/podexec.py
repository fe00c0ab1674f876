"""`pods/exec` through the official client's WebSocket stream (`kubernetes.stream`), for `KruiseHook`."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from airflow_kruise_chain.hooks.retry import KruiseApiError

_HANDSHAKE = re.compile(r"Handshake status (\d{3})")


def _refused(error: BaseException, namespace: str, name: str) -> KruiseApiError:
    """The error for an exec whose WebSocket handshake failed. The client raises an ApiException with
    status 0 and the answer in its reason (and, preloading, an AttributeError over it)."""
    text = " ".join(str(e) for e in (error, error.__context__) if e is not None)
    match = _HANDSHAKE.search(text)
    status = int(match.group(1)) if match else 0
    message = text
    if "-+-+- " in text:  # "Handshake status N -+-+- {headers} -+-+- {the Status body}"
        try:
            message = json.loads(text.rsplit("-+-+- ", 1)[1].strip().splitlines()[0])["message"]
        except (ValueError, KeyError, TypeError, IndexError):
            message = text
    if status == 403:
        message = (
            f'permission denied: cannot create pods/exec "{name}" in namespace {namespace!r}. Grant the '
            f"verbs 'get' and 'create' on 'pods/exec' to the connection's identity. API said: {message}"
        )
    return KruiseApiError(f"exec in pod {namespace}/{name} failed ({status}): {message}", status)


class PodExec:
    """An exec opened in a pod's container (`open_exec`): its command runs and waits for its stdin, which
    `send` gives it (then waits for the end), or `close` ends without giving any (the command reads an empty
    stdin). On an API client of its own, closed with it."""

    def __init__(self, client: Any, resp: Any, name: str, namespace: str) -> None:
        self._client, self._resp, self.name, self.namespace = client, resp, name, namespace
        self._closed = False

    def send(self, stdin: bytes, timeout: float) -> tuple[int, str]:
        """Give the command `stdin` and wait for its end: (exit code, stdout + stderr). Raises
        `KruiseApiError` when it could not run (the Status's message) or did not end within `timeout` s."""
        resp, namespace, name = self._resp, self.namespace, self.name
        try:
            resp.write_stdin(stdin)
            resp.close_channel(0)  # stdin's end (v5.channel.k8s.io; older servers: it reads a length)
            deadline = time.monotonic() + timeout
            while resp.is_open() and time.monotonic() < deadline:
                resp.update(timeout=max(0.0, deadline - time.monotonic()))
            output = resp.read_stdout() + resp.read_stderr()
            if resp.is_open():
                raise KruiseApiError(f"exec in pod {namespace}/{name} did not end within {timeout:g}s", 0)
            status = json.loads(resp.read_channel(3) or "{}")
        finally:
            self.close()
        if status.get("status") == "Success":
            return 0, output
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                return int(cause.get("message", 1)), output
        message = status.get("message") or "no status"
        raise KruiseApiError(f"exec in pod {namespace}/{name} failed: {message}", status.get("code", 0))

    def close(self) -> None:
        """End the exec (its stdin closed, given nothing if `send` was not called) and its client; once."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._resp.is_open():
                self._resp.close_channel(0)
            self._resp.close()
        except Exception:  # best effort: the connection may already be gone
            pass
        finally:
            self._client.close()


def open_exec(client: Any, name: str, namespace: str, container: str, command: list[str]) -> PodExec:
    """Start `command` in the pod's `container` over `pods/exec` on `client` (an `ApiClient` the returned
    `PodExec` owns: closed with it, also when this raises), stdin open. Raises `KruiseApiError` when the
    exec cannot be made (status 403: RBAC refused it)."""
    from kubernetes.client import CoreV1Api
    from kubernetes.stream import stream

    try:
        resp = stream(
            CoreV1Api(client).connect_get_namespaced_pod_exec,
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
    except Exception as e:  # the client's handshake failures are ApiExceptions under an AttributeError
        client.close()
        raise _refused(e, namespace, name) from e
    return PodExec(client, resp, name, namespace)
