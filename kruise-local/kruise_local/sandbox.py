"""A pod sandbox (the CRI's `RunPodSandbox`; the pause container that holds a pod's network and IPC
namespaces): a small holder process in a new network namespace with `lo` up and a new IPC namespace (unless
`hostNetwork`, `hostIPC`), which every container of the pod joins and which runs the kubelet's tcpSocket and
httpGet probes from inside the namespace (`pkg/probe/tcp/tcp.go`, `pkg/probe/http/http.go`: 200-399
succeed, redirects followed on the same host, at most 10)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

# The pod sandbox's holder process (`python -I -S -c`): writes the pod's sysctls (argv[2]: {/proc/sys path:
# value}, as runc writes a sandbox's `linux.sysctl`), brings `lo` up in its new network namespace (argv[1]
# "lo"; SIOCGIFFLAGS/SIOCSIFFLAGS, as `ip link set lo up`), says "ready", then runs the probes the runtime
# sends it, one JSON line each, from inside the namespace, and answers one JSON line each. It exits at EOF on
# stdin (the runtime closed the sandbox or died).
HOLDER_SCRIPT = r"""
import fcntl, json, socket, struct, sys, threading
for path, value in json.loads(sys.argv[2]).items():  # the pod's sysctls, in its own namespaces
    with open(path, "w") as f:
        f.write(value)
if sys.argv[1] == "lo":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
    fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
    s.close()
lock = threading.Lock()
def reply(rid, ok, msg):
    with lock:
        sys.stdout.write(json.dumps([rid, ok, msg]) + "\n")
        sys.stdout.flush()
def tcp(host, port, timeout):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True, ""
    except OSError as e:
        return False, f"dial tcp {host}:{port}: connect: {str(e.strerror or e).lower()}"
def http_get(host, port, timeout, path, scheme, headers):
    import http.client, ssl  # only when needed: the holder of a pod without HTTP probes stays small
    from urllib.parse import urlsplit
    url = f"{scheme.lower()}://{host}:{port}{path}"
    for _ in range(11):
        u = urlsplit(url)
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(u.hostname, u.port or 443, timeout=timeout,
                                               context=ssl._create_unverified_context())
        else:
            conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        try:
            target = (u.path or "/") + ("?" + u.query if u.query else "")
            conn.putrequest("GET", target, skip_host="Host" in headers, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            res = conn.getresponse()
            body = res.read(10 * 1024).decode(errors="replace")
        except OSError as e:
            why = str(e.strerror or e).lower()
            return False, f'Get "{url}": dial tcp {u.hostname}:{u.port}: connect: {why}'
        except http.client.HTTPException as e:
            return False, f'Get "{url}": {type(e).__name__}: {e}'
        finally:
            conn.close()
        loc = res.getheader("Location")
        if res.status in (301, 302, 303, 307, 308) and loc:
            nxt = urlsplit(loc)
            if nxt.hostname in (None, u.hostname):
                url = f"{nxt.scheme or u.scheme}://{u.hostname}:{nxt.port or u.port}{nxt.path or '/'}"
                url += "?" + nxt.query if nxt.query else ""
                continue
        if 200 <= res.status < 400:
            return True, body if res.status < 300 else f"Probe terminated redirects, Response body: {body}"
        return False, f"HTTP probe failed with statuscode: {res.status}"
    return False, f'Get "{url}": stopped after 10 redirects'
def run(req):
    rid, kind, host, port, timeout = req[:5]
    try:
        ok, msg = tcp(host, port, timeout) if kind == "tcp" else http_get(host, port, timeout, *req[5:])
    except Exception as e:
        ok, msg = False, f"{type(e).__name__}: {e}"
    reply(rid, ok, msg)
print("ready", flush=True)
for line in sys.stdin:
    threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()
"""


SANDBOX_WAIT_SECONDS = 20.0


def close_pipes(proc: asyncio.subprocess.Process) -> None:
    """Close an ended helper process's pipes and its transport (an exec, a sandbox holder). A pipe whose
    reader went with the client is paused once its buffer is full and never reads its end: left open, its
    transport lingered until the garbage collector closed it ("unclosed transport", or "Event loop is
    closed" once the loop had stopped)."""
    transport = getattr(proc, "_transport", None)  # asyncio.subprocess.Process keeps it private
    if transport is not None:
        transport.close()


class PodSandbox:
    """A pod's network namespace, held by a small process for the pod's lifetime (the CRI pod sandbox):
    every container of the pod joins it, and probes connect from inside it."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        isolated: bool,
        shm: Path | None = None,
        files: dict[str, Path] | None = None,
        own_ipc: bool = False,
    ) -> None:
        self._proc = proc
        self.pid = proc.pid
        self.isolated = isolated  # False: the host's network namespace (hostNetwork, sandbox="none")
        self.shm = shm  # the pod's /dev/shm, shared by its containers (None: each container has its own)
        self.files = files or {}  # the pod's /etc/hostname and /etc/resolv.conf (`etcfiles.sandbox_files`)
        self.own_ipc = own_ipc  # an IPC namespace of the pod's own (False: hostIPC, sandbox="none")
        self._next = 0
        self._waiting: dict[int, asyncio.Future[tuple[bool, str]]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read())

    @property
    def net_ns(self) -> str:
        return f"/proc/{self.pid}/ns/net"

    @property
    def ipc_ns(self) -> str:
        return f"/proc/{self.pid}/ns/ipc"

    def other_userns(self) -> bool:
        """Whether the namespace belongs to a user namespace other than ours (a rootless sandbox)."""
        try:
            return os.stat(f"/proc/{self.pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino
        except OSError:
            return False

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        while line := await self._proc.stdout.readline():
            with contextlib.suppress(ValueError, TypeError):
                rid, ok, msg = json.loads(line)
                fut = self._waiting.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result((bool(ok), str(msg)))
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result((False, "pod sandbox is gone"))
        self._waiting.clear()

    async def _ask(self, request: list[object], timeout: float) -> tuple[bool, str]:
        if self._proc.returncode is not None or self._proc.stdin is None or self._reader.done():
            return False, "pod sandbox is gone"
        self._next += 1
        rid = self._next
        fut: asyncio.Future[tuple[bool, str]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        try:
            self._proc.stdin.write(json.dumps([rid, *request]).encode() + b"\n")
            await self._proc.stdin.drain()
            return await asyncio.wait_for(fut, timeout + 5.0)  # the holder enforces `timeout` itself
        except (OSError, TimeoutError):
            return False, f"probe timed out after {timeout}s"
        finally:
            self._waiting.pop(rid, None)

    async def probe_tcp(self, port: int, timeout: float, host: str = "127.0.0.1") -> tuple[bool, str]:
        """A tcpSocket probe from inside the namespace (`pkg/probe/tcp/tcp.go` `DoTCPProbe`: success iff a
        connection opens within `timeout`). Returns (success, message)."""
        return await self._ask(["tcp", host, port, timeout], timeout)

    async def probe_http(
        self,
        port: int,
        path: str,
        timeout: float,
        *,
        scheme: str = "HTTP",
        headers: dict[str, str] | None = None,
        host: str = "127.0.0.1",
    ) -> tuple[bool, str]:
        """An httpGet probe from inside the namespace (`pkg/probe/http/http.go` `DoHTTPProbe`): GET, redirects
        to the same host followed (at most 10), at most 10 KiB of body read; status 200-399 passes (a 3xx
        left unfollowed passes with "Probe terminated redirects"), anything else or no answer fails.
        Certificates are not verified (the kubelet's InsecureSkipVerify). Returns (success, message)."""
        return await self._ask(["http", host, port, timeout, path or "/", scheme, headers or {}], timeout)

    async def close(self) -> None:
        """Kill the holder; the namespace goes once the last container in it has exited. Cancelled while it
        waits for the holder (the local cluster stops), it still reaps the holder and closes its transport:
        left open, the garbage collector would close it after the loop has gone."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()
        exited = asyncio.ensure_future(self._proc.wait())
        try:
            await asyncio.shield(exited)
        except asyncio.CancelledError:  # SIGKILLed, it is gone in milliseconds: reap it before going
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({exited}, timeout=5.0)
            raise
        finally:
            self._reader.cancel()
            close_pipes(self._proc)
