"""The fast go: a go's run spec delivered through `pods/exec` into the slot's runner as well.

The run spec annotation stays the durable record (what a restarted runner, a reattaching try and the UI read).
A go (a swap that changes only annotations: the slot holds the stage's image) is patched as always; then the
task (`start_go`: on a thread, while it follows the stage) execs the slot's runner (`runner --go LENGTH`,
the runner's own read-only busybox and script) with the same spec on stdin. `--go` writes it into the slot's
own state (`<slot>.go`, renamed into place: never read half-written) and wakes the runner. The runner takes
the newer generation of the two places and runs each generation once (its records: `gen-N/...`,
`<slot>.started`): the deliveries may come in any order, twice or not at all, and one older than the
runner's newest generation is ignored (an exec of a generation the annotation already started says so and
exits 0: the runner ends the stage's processes, not what the kubelet exec'd into its container). The exec
goes API server -> kubelet -> runtime: it does not wait for the pod's sync and the kubelet's downwardAPI
refresh (0.1-1.3 s on an idle node, seconds behind a busy sync, `DESIGN.md`). A stage task opens the exec
before its swap's patch (`open_go`), so the exec's set-up and the start of `runner --go` overlap the patch;
the spec goes on its stdin only once the patch has succeeded, else the exec is closed with an empty stdin
(`--go` takes nothing that is not a whole spec of the announced length).

Out of the stages' reach: the file lies in the slot's own state volume (the other slot does not mount it),
the runner reads it only while no stage process is left in its slot, and empties its state after each
generation (once the stage's processes are gone) and removes the file at its start, so a spec a stage
planted there is gone before the runner looks. Only a caller allowed `pods/exec` (`get` and `create`) can put
one there while the slot is parked. An exec refused (RBAC 403) or failed leaves the go to the annotation: the
task log says so once.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .lines import LineSplitter
from .swap import SwapPlan
from .wire import MARKER, RUN_FIELD, RUNNER_BIN, names_prepare, slot_annotation

GO_COMMAND: tuple[str, ...] = (f"{RUNNER_BIN}/runner", "--go")
EXEC_TIMEOUT = 10.0
"""seconds an exec may take before the go is left to the annotation"""
CAPTURE_WAIT = 5
"""seconds the go's exec waits in the slot for the generation's end, to give its output and result
(`Capture`); a stage that runs longer is read from the slot's log, which the kubelet serves by then"""
CAPTURE_MAX = 1048576
"""bytes of each stream the runner captures (its `kc_cap_max`): a stream past it is not captured"""
REFUSED = 76
"""`runner --go`'s exit code when its container was not created for the prepare the go names (the old
container of a slot prepared ahead, not killed yet: it answers after 3 s unless the kubelet kills the
container first, which ends the exec too): the go is tried again until the new one takes it"""
RETRY_EVERY = 0.05
"""seconds before a refused go is tried again, doubling after each exec that fails (no running container
of the slot for a moment: the old one stopped, the new one not started) up to `RETRY_AT_MOST`"""
RETRY_AT_MOST = 0.4


class ExecSession(Protocol):
    """An exec started with its stdin open (`KruiseHook.open_exec_in_pod`)."""

    def send(self, stdin: bytes, timeout: float) -> tuple[int, str]: ...

    def close(self) -> None: ...


class ExecApi(Protocol):
    """What the fast go needs from a Kubernetes client (`KruiseHook.exec_in_pod`, `open_exec_in_pod`)."""

    def exec_in_pod(
        self, name: str, namespace: str, container: str, command: list[str], stdin: bytes, timeout: float
    ) -> tuple[int, str]: ...

    def open_exec_in_pod(
        self, name: str, namespace: str, container: str, command: list[str]
    ) -> ExecSession: ...


def go_spec(plan: SwapPlan) -> str | None:
    """The run spec a go plan's patch writes, or None for any other plan."""
    if plan.action != "go" or plan.patch is None:
        return None
    annotations = (plan.patch.get("metadata") or {}).get("annotations") or {}
    spec = annotations.get(slot_annotation(plan.slot, RUN_FIELD))
    return spec if isinstance(spec, str) else None


def deliver_go(api: ExecApi, plan: SwapPlan, log: Callable[[str], None]) -> bool:
    """Deliver a patched go's run spec through `pods/exec`; whether the runner took it in. Never raises:
    the annotation patched before carries the go on its own."""
    spec = go_spec(plan)
    if spec is None:
        return False
    data = spec.encode()
    try:
        command = go_command(data)
        answer = api.exec_in_pod(plan.pod_name, plan.namespace, plan.slot, command, data, EXEC_TIMEOUT)
    except Exception as e:  # any failure: the annotation path carries the go
        return _not_delivered(plan, e, log)
    return _taken(plan, *answer, log)


def go_command(data: bytes, wait: int | None = None) -> list[str]:
    """`runner --go LENGTH`, and `SECONDS` to wait for the generation's end and print its `Capture` (a
    runner before captures ignores it: no frame, the log then)."""
    return [*GO_COMMAND, str(len(data)), *([str(wait)] if wait else [])]


@dataclass(frozen=True)
class Capture:
    """What a go's exec printed of its generation once it ended (core/runner.sh `kc_await`): the runner's
    start line, the stage's stdout and stderr as the runner's tees copied them (each whole, at most
    `CAPTURE_MAX` bytes) and the result line. The token is checked by the reader (`GenerationOutput`)."""

    start: str
    stdout: bytes
    stderr: bytes
    result: str

    def lines(self) -> list[str]:
        """The generation's lines as its log shows them, each stream's in order (stdout's, then stderr's):
        the start line, the stage's lines (split as the log reader splits them), the result line."""
        out = [self.start]
        for data in (self.stdout, self.stderr):
            splitter = LineSplitter()
            out += splitter.feed(data)
            if (last := splitter.finish()) is not None:
                out.append(last)  # the runner ends a line its stage left open
        return [*out, self.result]


def parse_capture(output: str, generation: int) -> Capture | None:
    """The `Capture` of `generation` in a go's exec output, None without a whole one. The frame's lines are
    the runner's (core/runner.sh `kc_await`): the start line, each stream's header naming its length and its
    base64 line, the result line, the end line. A stage's bytes are only inside the base64 lines: nothing it
    prints can end a frame or add a line to it; an exec cut short has no end line."""
    lines = output.split("\n")
    head = f"{MARKER} capture gen={generation} stream="
    for at, line in enumerate(lines):
        if not line.startswith(head) or at < 1 or len(lines) < at + 6:
            continue
        streams: list[bytes] = []
        for offset, name in ((0, "stdout"), (2, "stderr")):
            header, text = lines[at + offset], lines[at + offset + 1]
            size = header.removeprefix(f"{head}{name} bytes=")
            if size == header or not size.isdigit() or int(size) > CAPTURE_MAX:
                return None
            try:
                data = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                return None
            if len(data) != int(size):
                return None
            streams.append(data)
        start, result, end = lines[at - 1], lines[at + 4], lines[at + 5]
        if (
            not start.startswith(f"{MARKER} start gen={generation} ")
            or not result.startswith(f"{MARKER} result gen={generation} ")
            or end != f"{MARKER} capture gen={generation} end"
        ):
            return None
        return Capture(start, streams[0], streams[1], result)
    return None


def _not_delivered(plan: SwapPlan, error: BaseException, log: Callable[[str], None]) -> bool:
    why = "refused by RBAC" if getattr(error, "status", None) == 403 else "failed"
    log(
        f"::kruise-chain:: go via pods/exec {why} ({error}); generation {plan.generation} goes by its "
        "annotation"
    )
    return False


def _taken(plan: SwapPlan, code: int, output: str, log: Callable[[str], None]) -> bool:
    """Whether `runner --go`'s answer says it took the go in (else one line in the task log says why)."""
    if code == 0 and output.rstrip().endswith(": not taken"):
        log(
            f"::kruise-chain:: go via pods/exec not needed in {plan.slot}: generation {plan.generation} "
            "already started by its annotation"
        )
        return False
    if code == REFUSED:
        log(
            f"::kruise-chain:: go via pods/exec not taken in {plan.slot}: its container prepared for "
            f"generation {plan.generation} did not answer in {EXEC_TIMEOUT:g}s; it goes by its annotation"
        )
        return False
    if code != 0:
        # e.g. killed (137) after the runner's grace for exec'd processes at the end of a stage
        detail = output.strip().splitlines()[-1:] or [f"exit code {code}"]
        log(
            f"::kruise-chain:: go via pods/exec not taken in {plan.slot} ({detail[0]}); generation "
            f"{plan.generation} goes by its annotation"
        )
        return False
    return True


def _before_frame(output: str, generation: int) -> str:
    """What a go's exec said of the go itself: its output before the capture's frame, if any."""
    for head in (f"{MARKER} start gen={generation} ", f"{MARKER} capture gen={generation} "):
        if output.startswith(head):
            return ""
        if (at := output.find(f"\n{head}")) >= 0:
            return output[: at + 1]
    return output


class PendingGo:
    """A fast go opened before its swap's patch (`open_go`): a thread starts `runner --go` in the slot at
    once and, once `decide` says the patch succeeded, gives it the run spec (as `deliver_go`); a patch that
    failed closes the exec with an empty stdin, which the runner refuses (nothing is started). `wait` (at
    most twice `EXEC_TIMEOUT` and a second) before the task defers or ends; `decide` must come first (the
    swap calls it however its patch ends)."""

    def __init__(
        self, api: ExecApi, plan: SwapPlan, spec: str, log: Callable[[str], None], wait: int | None = None
    ) -> None:
        self._api, self._plan, self._data, self._log = api, plan, spec.encode(), log
        self._wait = wait
        self._command = go_command(self._data, wait)
        self._timeout = EXEC_TIMEOUT + (wait or 0)
        self._prepared = names_prepare(spec)
        self._decided = threading.Event()
        self._stopped = threading.Event()
        self._patched = False
        self.delivered = False
        self.capture: Capture | None = None
        """the generation's output and result as the exec gave them once it ended (`wait`), else None"""
        self._ended = threading.Event()
        self._on_end: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="kruise-chain-fast-go", daemon=True)
        self._thread.start()

    @property
    def ended(self) -> bool:
        """Whether the exec has ended (its `capture` is final)."""
        return self._ended.is_set()

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call `callback` (on the go's thread) once the exec has ended; at once if it has."""
        with self._lock:
            if not self._ended.is_set():
                self._on_end.append(callback)
                return
        callback()

    def _end(self) -> None:
        with self._lock:
            self._ended.set()
            callbacks, self._on_end = self._on_end, []
        for callback in callbacks:
            callback()

    def decide(self, patched: bool) -> None:
        """The swap's patch succeeded (`patched`: deliver the spec) or not (end the exec, deliver nothing)."""
        self._patched = patched
        self._decided.set()

    def wait(self) -> None:
        self._thread.join(2 * self._timeout + 1)

    def stop(self) -> None:
        """No more tries of a refused go (`_until_taken`): its task failed (e.g. the prepared slot's
        container cannot start, its run spec retired), so no container may take the go later."""
        self._stopped.set()

    def settle(self, failed: bool) -> None:
        """`wait` at the task's end, after `stop` if the task `failed`: no container takes the go of a
        failed task later, and its end waits for no try."""
        if failed:
            self.stop()
        self.wait()

    def _run(self) -> None:
        try:
            self._go()
        finally:
            self._end()

    def _go(self) -> None:
        plan = self._plan
        try:
            try:
                session = self._api.open_exec_in_pod(plan.pod_name, plan.namespace, plan.slot, self._command)
            except Exception as e:
                if not (self._wait and getattr(e, "status", None) == 403):
                    raise
                # an admission policy from before the wait (deploy/admission-policy.yaml): the go alone
                self._wait, self._timeout, self._command = None, EXEC_TIMEOUT, go_command(self._data)
                session = self._api.open_exec_in_pod(plan.pod_name, plan.namespace, plan.slot, self._command)
        except Exception as e:  # any failure: the annotation path carries the go
            if not (self._decided.wait(EXEC_TIMEOUT) and self._patched):
                return
            answer = self._failed(e)
        else:
            try:
                if not (self._decided.wait(EXEC_TIMEOUT) and self._patched):
                    return  # no spec on stdin: `runner --go` takes nothing
                try:
                    answer = session.send(self._data, self._timeout)
                except Exception as e:
                    answer = self._failed(e)
            finally:
                session.close()
        if answer is None:
            return
        last = self._until_taken(answer)
        if last is None:
            return
        code, output = last
        self.delivered = _taken(plan, code, _before_frame(output, plan.generation), self._log)
        if code == 0 and self._wait:
            self.capture = parse_capture(output, plan.generation)

    def _failed(self, error: BaseException) -> tuple[int, str] | None:
        """The first exec failed: a go that names a prepare tries again (`_until_taken`), as after a refusal
        (the slot's old container stopping under it: runc's `cannot exec in a stopped container`, the
        kubelet's `container not found`, whichever the runtime says first), unless RBAC refused it; any
        other go is left to the annotation (None, said once)."""
        if self._prepared and getattr(error, "status", None) != 403:
            return REFUSED, str(error)
        _not_delivered(self._plan, error, self._log)
        return None

    def _until_taken(self, answer: tuple[int, str]) -> tuple[int, str] | None:
        """Try again a go that names a prepare and was not taken (`REFUSED`: the exec reached the slot's
        old container, which the kubelet has not killed yet; or it ended with that container) until the
        container created for the prepare answers, for `EXEC_TIMEOUT` at most; an exec that fails
        meanwhile (the old container gone, the new one not started) is tried again too. The last answer, or
        None once `stop` was called (the task failed: nothing to say)."""
        plan = self._plan
        deadline = time.monotonic() + EXEC_TIMEOUT
        pause = RETRY_EVERY
        while self._prepared and answer[0] != 0 and time.monotonic() < deadline:
            if self._stopped.wait(pause):
                return None
            try:
                answer = self._api.exec_in_pod(
                    plan.pod_name, plan.namespace, plan.slot, self._command, self._data, self._timeout
                )
            except Exception as e:  # no running container of the slot for a moment
                answer = (REFUSED, str(e))
                pause = min(2 * pause, RETRY_AT_MOST)
        return answer


def open_go(
    api: ExecApi, plan: SwapPlan, log: Callable[[str], None], wait: int | None = None
) -> PendingGo | None:
    """The fast go of a planned, not yet patched go (`PendingGo`); None for any other plan. `api` must make
    the exec on a client of its own (`KruiseHook.open_exec_in_pod` does). `wait`: a go into a slot prepared
    ahead (its new container's log is served only once the pod's status shows it) waits that many seconds at
    most for the generation's end and keeps its `Capture`; any other go's log is readable at once."""
    spec = go_spec(plan)
    if spec is None:
        return None
    return PendingGo(api, plan, spec, log, wait if names_prepare(spec) else None)
