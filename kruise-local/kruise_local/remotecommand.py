"""`pods/exec` and `pods/attach` over WebSocket, the streaming protocol of `kubectl exec`/`cp`/`attach`
and the official clients. `pods/attach` shares everything below but the command: `AttachREST.Connect` and
its `AttachLocation` (`streamLocation` again), the kubelet's `GetAttach` (its refusal `container c not
found in pod p_ns`) and `ServeAttach` (`remotecommand/attach.go`: Success once the runtime's attach
returns); the runtime's part is `processes.Attachment`.

What it models, part by part:
- the API server's `ExecREST.Connect` (`pkg/registry/core/pod/rest/subresources.go`) and `streamLocation`
  (`pkg/registry/core/pod/strategy.go`): the container defaults to the only one, must be one of the pod's
  (init containers too), the pod must be bound; errors are 400 Status answers before any upgrade. From 1.35
  the `AuthorizePodWebsocketUpgradeCreatePermission` gate (on by default) authorizes the WebSocket upgrade,
  a GET resolved as `get pods/exec`, also as `create pods/exec` (KEP-4006's compound check).
- the kubelet's options and GetExec (`pkg/kubelet/cri/streaming/remotecommand/httpstream.go` `NewOptions`:
  tty drops stderr, one of stdin/stdout/stderr is required; `kubelet_pods.go` `GetExec`: only a running
  container, else `container not found ("c")`, which the kubelet's `streaming.WriteError` answers 500).
- the kubelet's WebSocket streams (`remotecommand/websocket.go` `createWebSocketStreams`, framing by
  `apiserver/pkg/util/wsstream/conn.go`): subprotocols `channel.k8s.io`, `base64.channel.k8s.io` and
  their `v4.` versions (or none); each message is a channel byte (base64: an ASCII digit) then data;
  channels stdin 0, stdout 1, stderr 2, error 3, resize 4; an empty message on the lowest writable channel
  once open; v4 writes the ending as a `metav1.Status` JSON on the error channel (`v4WriteStatusFunc`),
  older protocols the failure's message only (`v1WriteStatusFunc`).
- `ServeExec` (`remotecommand/exec.go`): success, or `NonZeroExitCode` with an `ExitCode` cause, or an
  `InternalError` when the command could not run (runc's message, as containerd passes it on: its
  `cannot exec in a stopped container` too, for a container whose process ended before the runtime
  recorded it, `runtime.RUNC_EXEC_STOPPED`).
- the API server's stream translator for `v5.channel.k8s.io` (`apiserver/pkg/util/proxy/streamtranslator.go`,
  which kubectl 1.30+ speaks): v4 plus the close signal (channel 255, then the channel to close: stdin's EOF,
  which `kubectl cp` into a pod needs); the translator upgrades first, so a kubelet refusal reaches the client
  as an `InternalError` Status on the error channel.
The exec goes API server -> kubelet -> runtime without the pod's worker: it never waits for a pod sync.
Deviation: SPDY (`kubectl` < 1.30, or its fallback) is not served: a non-WebSocket request gets 400.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import struct
import termios
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aiohttp import WSMsgType, web

from .cri import StartError
from .errors import ApiError
from .responses import start_stream
from .store import Obj

STDIN, STDOUT, STDERR, ERROR, RESIZE = range(5)
CLOSE = 255
V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_BASE64 = "v4.base64.channel.k8s.io"
V1 = "channel.k8s.io"
V1_BASE64 = "base64.channel.k8s.io"
PROTOCOLS = (V5, V4, V4_BASE64, V1, V1_BASE64)
_CHUNK = 32 * 1024
T = TypeVar("T")


class ExecRefused(Exception):
    """The kubelet refused the stream: no running container to exec in or attach to (`GetExec`'s and
    `GetAttach`'s errors)."""


class Exec(Protocol):
    """A started exec: what the streams need of it (`runtime.StreamingExec`)."""

    proc: asyncio.subprocess.Process
    master: int | None

    async def wait(self) -> int: ...

    async def kill(self) -> None: ...


class Attached(Protocol):
    """A started attach: what the streams need of it (`processes.Attachment`)."""

    async def read(self) -> tuple[int, bytes] | None: ...

    async def write_stdin(self, data: bytes) -> None: ...

    def stdin_ended(self) -> None: ...

    def resize(self, rows: int, cols: int) -> None: ...

    def detach(self) -> None: ...


class AttachNode(Protocol):
    """What the API server asks of the pod's kubelet for an attach."""

    async def start_attach(
        self, pod: Obj, container: str, stdin: bool, stdout: bool, stderr: bool
    ) -> Attached: ...


class ExecNode(Protocol):
    """What the API server asks of the pod's kubelet for an exec."""

    async def start_exec(self, pod: Obj, container: str, argv: list[str], tty: bool) -> Exec: ...


@dataclass(frozen=True)
class ExecOptions:
    """`PodExecOptions` from the query, after the kubelet's `NewOptions`."""

    command: list[str]
    container: str
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("true", "1")


def exec_options(request: web.Request, pod: Obj) -> ExecOptions:
    """An exec's or attach's options (`PodExecOptions`, `PodAttachOptions`: no command), with
    `streamLocation`'s and `NewOptions`' 400s."""
    name = pod["metadata"]["name"]
    spec = pod.get("spec") or {}
    containers = [c["name"] for c in spec.get("containers") or []]
    inits = [c["name"] for c in spec.get("initContainers") or []]
    ephemeral = [c["name"] for c in spec.get("ephemeralContainers") or []]
    container = request.query.get("container", "")
    if not container:
        if len(containers) != 1:
            names = " ".join(containers)
            message = f"a container name must be specified for pod {name}, choose one of: [{names}]"
            if inits:
                message += f" or one of the init containers: [{' '.join(inits)}]"
            raise ApiError(400, message)
        container = containers[0]
    elif container not in (*containers, *inits, *ephemeral):
        raise ApiError(400, f"container {container} is not valid for pod {name}")
    if not spec.get("nodeName"):
        raise ApiError(400, f"pod {name} does not have a host assigned")
    tty = _flag(request, "tty")
    stdin, stdout, stderr = _flag(request, "stdin"), _flag(request, "stdout"), _flag(request, "stderr")
    stderr = stderr and not tty  # "Access to exec with tty and stderr is not supported, bypassing stderr"
    if not (stdin or stdout or stderr):
        raise ApiError(400, "you must specify at least 1 of stdin, stdout, stderr")
    return ExecOptions(request.query.getall("command", []), container, stdin, stdout, stderr, tty)


def is_websocket(request: web.Request) -> bool:
    """Whether the request asks for a WebSocket upgrade (`wsstream.IsWebSocketRequest`)."""
    connection = request.headers.get("Connection", "").lower()
    return "upgrade" in connection and request.headers.get("Upgrade", "").lower() == "websocket"


def success_status() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def exit_status(argv: list[str], code: int) -> dict[str, Any]:
    """`ServeExec`'s Status for a command that exited non-zero (containerd's `CodeExitError` message)."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: "
        f"error executing command [{' '.join(argv)}], exit code {code}",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }


def internal_status(message: str) -> dict[str, Any]:
    """`apierrors.NewInternalError`'s Status."""
    return {
        "metadata": {},
        "status": "Failure",
        "message": f"Internal error occurred: {message}",
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    }


class Channels:
    """One negotiated WebSocket connection's framing."""

    def __init__(self, ws: web.WebSocketResponse, protocol: str) -> None:
        self.ws = ws
        self.protocol = protocol
        self.binary = protocol not in (V4_BASE64, V1_BASE64)
        self.v4 = protocol in (V5, V4, V4_BASE64)
        self.v5 = protocol == V5
        self._lock = asyncio.Lock()

    async def write(self, channel: int, data: bytes) -> None:
        async with self._lock:
            if self.ws.closed:
                return
            with contextlib.suppress(ConnectionError):
                if self.binary:
                    await self.ws.send_bytes(bytes([channel]) + data)
                else:
                    await self.ws.send_str(chr(ord("0") + channel) + base64.b64encode(data).decode())

    async def status(self, status: dict[str, Any]) -> None:
        if self.v4:
            await self.write(ERROR, json.dumps(status, separators=(",", ":")).encode())
        elif status["status"] != "Success":
            await self.write(ERROR, status["message"].encode())

    def decode(self, msg: Any) -> tuple[int, bytes] | None:
        """A client message's channel and data; None for one that carries none. As `wsstream` reads a
        message's payload whatever its frame type (the Python client sends str stdin as a text frame)."""
        if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT) or not msg.data:
            return None
        data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
        if self.binary:
            return data[0], data[1:]
        try:
            return data[0] - ord("0"), base64.b64decode(data[1:])
        except ValueError:
            return None


async def serve_exec(
    request: web.Request,
    pod: Obj,
    node: ExecNode,
    authorize_create: Callable[[], Awaitable[None]] | None,
) -> web.StreamResponse:
    """Serve one `pods/exec` request (see the module's docstring)."""
    opts = exec_options(request, pod)

    async def start() -> Exec:
        return await node.start_exec(pod, opts.container, opts.command, opts.tty)

    async def stream(channels: Channels, ex: Exec) -> None:
        await _stream(channels, opts, ex)

    async def release(ex: Exec) -> None:
        await ex.kill()

    return await _serve(request, "exec", opts, authorize_create, start, stream, release)


async def serve_attach(
    request: web.Request,
    pod: Obj,
    node: AttachNode,
    authorize_create: Callable[[], Awaitable[None]] | None,
) -> web.StreamResponse:
    """Serve one `pods/attach` request: `AttachREST.Connect` (`AttachLocation` is `streamLocation`, as for an
    exec: the same 400s), then the kubelet's `getAttach` (`NewOptions`, `GetAttach`) and `ServeAttach`
    (`remotecommand/attach.go`): the session streams until the runtime's attach returns, then writes
    Success (an attach carries no exit code), or the client goes. `processes.Attachment` is the runtime's
    part."""
    opts = exec_options(request, pod)

    async def start() -> Attached:
        return await node.start_attach(pod, opts.container, opts.stdin, opts.stdout, opts.stderr)

    async def stream(channels: Channels, attached: Attached) -> None:
        await _stream_attached(channels, opts, attached)

    async def release(attached: Attached) -> None:
        attached.detach()

    return await _serve(request, "attach", opts, authorize_create, start, stream, release)


async def _serve(
    request: web.Request,
    subresource: str,
    opts: ExecOptions,
    authorize_create: Callable[[], Awaitable[None]] | None,
    start: Callable[[], Awaitable[T]],
    stream: Callable[[Channels, T], Awaitable[None]],
    release: Callable[[T], Awaitable[None]],
) -> web.StreamResponse:
    """The upgrade shared by exec and attach: WebSocket only, the compound `create` check, the kubelet's
    refusal (a 500 answer, or after a v5 client's upgrade an InternalError Status), then `stream` until it
    ends, and `release` however the request ends (its client may go at any point)."""
    if not is_websocket(request):
        raise ApiError(
            400,
            f"Upgrade request required: the local cluster serves pods/{subresource} over WebSocket only "
            "(channel.k8s.io, v4.channel.k8s.io, v5.channel.k8s.io), not SPDY",
        )
    if authorize_create is not None:
        await authorize_create()
    offered = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
    translated = V5 in offered  # the API server's stream translator serves it, upgrading first
    started: T | str
    try:
        started = await start()
    except ExecRefused as e:
        if not translated:  # the kubelet's answer, proxied as is
            return web.Response(status=500, text=str(e))
        started = f"unable to upgrade connection: {e}"
    except StartError as e:
        started = f"error executing command in container: failed to exec in container: {e}"
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0)
    upgraded = False
    try:
        if not await start_stream(ws, request):  # the client went before the upgrade's answer
            return ws
        upgraded = True
        channels = Channels(ws, ws.ws_protocol or "")
        if isinstance(started, str):
            await channels.write(STDOUT if opts.stdout else STDERR if opts.stderr else ERROR, b"")
            await channels.status(internal_status(started))
        else:
            await stream(channels, started)
    finally:
        if not isinstance(started, str):
            await release(started)
        if upgraded:
            await ws.close()
    return ws


async def _stream(channels: Channels, opts: ExecOptions, ex: Exec) -> None:
    """Copy the streams until the command ends, then write its ending; kill it if the client goes away."""
    await channels.write(STDOUT if opts.stdout else STDERR if opts.stderr else ERROR, b"")
    proc = ex.proc
    loop = asyncio.get_running_loop()
    outputs: list[asyncio.Task[None]] = []
    if ex.master is not None:
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(ex.master), "rb", 0)
        )
        outputs.append(asyncio.ensure_future(_copy_out(reader, channels, STDOUT, opts.stdout)))
    else:
        transport = None
        if proc.stdout is not None:
            outputs.append(asyncio.ensure_future(_copy_out(proc.stdout, channels, STDOUT, opts.stdout)))
        if proc.stderr is not None:
            outputs.append(asyncio.ensure_future(_copy_out(proc.stderr, channels, STDERR, opts.stderr)))
        if not opts.stdin and proc.stdin is not None:
            proc.stdin.close()
    inputs = asyncio.ensure_future(_copy_in(channels, opts, ex))
    done = asyncio.ensure_future(asyncio.gather(ex.wait(), *outputs))
    try:
        await asyncio.wait([done, inputs], return_when=asyncio.FIRST_COMPLETED)
        if not done.done():  # the client closed the connection: nothing to report to
            return
        code = done.result()[0]
        argv = opts.command
        await channels.status(success_status() if code == 0 else exit_status(argv, code))
    finally:
        inputs.cancel()
        if transport is not None:
            transport.close()
        if not done.done():
            done.cancel()
        for task in outputs:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.gather(inputs, done, *outputs, return_exceptions=True)
        if ex.master is not None:
            os.close(ex.master)


async def _stream_attached(channels: Channels, opts: ExecOptions, attached: Attached) -> None:
    """Copy the container's output and the client's input until the attach ends (then Success, as
    `ServeAttach` writes it once `AttachContainer` returns nil) or the client closes the connection."""
    await channels.write(STDOUT if opts.stdout else STDERR if opts.stderr else ERROR, b"")

    async def outputs() -> None:
        while (chunk := await attached.read()) is not None:
            fd, data = chunk
            await channels.write(STDOUT if fd == 1 else STDERR, data)

    async def inputs() -> None:
        async for msg in channels.ws:
            frame = channels.decode(msg)
            if frame is None:
                continue
            channel, data = frame
            if channel == STDIN and opts.stdin:
                await attached.write_stdin(data)
            elif channel == RESIZE and (size := _terminal_size(data)) is not None:
                attached.resize(*size)
            elif channel == CLOSE and channels.v5 and data[:1] == bytes([STDIN]):
                attached.stdin_ended()

    out, into = asyncio.ensure_future(outputs()), asyncio.ensure_future(inputs())
    try:
        await asyncio.wait([out, into], return_when=asyncio.FIRST_COMPLETED)
        if out.done() and out.exception() is None:
            await channels.status(success_status())
    finally:
        for task in (out, into):
            task.cancel()
        await asyncio.gather(out, into, return_exceptions=True)


async def _copy_out(stream: asyncio.StreamReader, channels: Channels, channel: int, wanted: bool) -> None:
    with contextlib.suppress(OSError):  # a terminal's master reads EIO once its last slave is closed
        while chunk := await stream.read(_CHUNK):
            if wanted:
                await channels.write(channel, chunk)


async def _copy_in(channels: Channels, opts: ExecOptions, ex: Exec) -> None:
    """Feed stdin and terminal sizes from the client until it closes the connection."""
    stdin = ex.proc.stdin
    async for msg in channels.ws:
        frame = channels.decode(msg)
        if frame is None:
            continue
        channel, data = frame
        if channel == STDIN and opts.stdin:
            await _write_stdin(ex, stdin, data)
        elif channel == RESIZE and ex.master is not None:
            _resize(ex.master, data)
        elif channel == CLOSE and channels.v5 and data[:1] == bytes([STDIN]):
            if stdin is not None and not stdin.is_closing():
                stdin.close()
            elif ex.master is not None:
                await _write_stdin(ex, None, b"\x04")  # a terminal's end of input


async def _write_stdin(ex: Exec, stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        if ex.master is not None:
            os.write(ex.master, data)
        elif stdin is not None and not stdin.is_closing():
            stdin.write(data)
            await stdin.drain()


def _terminal_size(data: bytes) -> tuple[int, int] | None:
    """A `TerminalSize` message (`{"Width": w, "Height": h}`) as (rows, columns); None if it is not one."""
    try:
        size = json.loads(data)
        rows, cols = int(size.get("Height", 0)), int(size.get("Width", 0))
    except (ValueError, TypeError, AttributeError):
        return None
    return (rows, cols) if 0 < rows < 65536 and 0 < cols < 65536 else None


def _resize(master: int, data: bytes) -> None:
    """A `TerminalSize` message applied to the terminal."""
    if (size := _terminal_size(data)) is not None:
        with contextlib.suppress(OSError):
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
