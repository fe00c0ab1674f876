"""An API server that stalls, on a real socket (no mock of the client): what a hung API server, a proxy that
swallows answers or a black-holed address looks like to the hooks.

Modes: ``silent`` accepts each connection and never answers; ``headers`` answers each request's headers (200,
chunked JSON) and then stalls its body; ``upgrade`` answers a WebSocket upgrade (101, `v5.channel.k8s.io`) and
then sends half a frame; ``full`` accepts nothing: its listen queue is filled first, so the kernel drops each
new connection's SYN and a connect hangs as on a black-holed address.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import yaml

Mode = Literal["silent", "headers", "upgrade", "full"]
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class StalledServer:
    """Serves on loopback in a thread in one `Mode`; `requests` counts the connections it accepted."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.requests = 0
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(0 if mode == "full" else 16)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        if mode == "full":  # fill the accept queue (backlog 0 holds one): later SYNs are dropped
            for _ in range(2):
                filler = socket.socket()
                filler.setblocking(False)
                with suppress(BlockingIOError):
                    filler.connect(self._listener.getsockname())
                self._held.append(filler)
            return
        self._thread = threading.Thread(target=self._serve, name=f"stalled-{mode}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.requests += 1
            self._held.append(conn)
            if self.mode != "silent":
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        request = b""
        with suppress(OSError):
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                request += chunk
            if self.mode == "headers":
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b'2\r\n{"\r\n'
                )
            else:  # the upgrade, then a binary frame's first two bytes (its length follows: never)
                key = next(
                    line.split(b":", 1)[1].strip()
                    for line in request.split(b"\r\n")
                    if line.lower().startswith(b"sec-websocket-key:")
                )
                accept = base64.b64encode(hashlib.sha1(key + WS_GUID.encode()).digest())
                conn.sendall(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Accept: "
                    + accept
                    + b"\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
                    b"\x82\x7e"
                )

    def kubeconfig(self, path: Path) -> Path:
        """A kubeconfig naming this server (plain HTTP, a bearer token), written to `path`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "stalled",
            "clusters": [{"name": "stalled", "cluster": {"server": self.url}}],
            "contexts": [{"name": "stalled", "context": {"cluster": "stalled", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def close(self) -> None:
        self._stop.set()
        if self.mode != "full":
            self._thread.join(timeout=5)
        for conn in self._held:
            conn.close()
        self._listener.close()


@contextmanager
def stalled_server(mode: Mode) -> Iterator[StalledServer]:
    server = StalledServer(mode)
    try:
        yield server
    finally:
        server.close()
