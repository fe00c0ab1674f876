"""Container lifecycle hooks and the kill of a container on the local kubelet.

- `run_handler` is `pkg/kubelet/lifecycle/handlers.go` `handlerRunner.Run`: an `exec` handler runs its command
  in the container with no time limit (`RunInContainer(..., 0)`: the CRI's `ExecSync`); a non-zero exit or a
  command that cannot start fails it, with the message `Exec lifecycle hook ([cmd]) for Container "c" in Pod
  "p_ns(uid)" failed - error: <ExecSync's error>, message: "<stdout and stderr>"`. An `httpGet` handler sends
  its GET from the pod's network namespace (to the pod's IP unless `host` names another; `User-Agent:
  kube-lifecycle/<major>.<minor>`); only a request that gets no answer fails it (`runHTTPHandler` looks at the
  transport's error, not at the status code). A `sleep` handler sleeps (`runSleepHandler`).
- `post_start` is `kuberuntime_container.go` `startContainer`'s step 4: right after the container started
  (its Started event recorded), in the same sync, so the pod's next container starts only after it
  (`SyncPod` starts the containers one by one) and the pod's status stays as the sync found it (the status
  manager got it when the sync began): a first start still shows `ContainerCreating` and the pod `Pending`.
  A failed hook records `FailedPostStartHook` ("PostStartHook failed": the message is not put in the event,
  so that no secret leaks), kills the container (`killContainer` with the message `FailedPostStartHook`,
  its preStop hook included) and fails the start: the container shows waiting `PostStartHookError` with the
  handler's message while it is to be restarted (the kubelet's reasonCache), and is restarted per
  restartPolicy under the crash-loop back-off.
- `kill` is `killContainer`: the grace period (the caller's: the pod's, a probe's, the deletion's), the
  preStop hook if there is one and time left (`executePreStopHook`: waited for at most the grace period, its
  whole seconds deducted; a failure records `FailedPreStopHook`, "PreStopHook failed", and the stop goes on),
  then at least `minimumGracePeriodInSeconds` (2 s) between the stop signal and SIGKILL.

Deviation: a preStop hook still running when its grace period ends is abandoned (ended with the container);
upstream's goroutine may still record a FailedPreStopHook event when its exec then fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

from .container import ContainerState, Instance
from .cri import StartError
from .prober import probe_port
from .processes import exit_status

MINIMUM_GRACE_PERIOD = 2.0
"""`kuberuntime_container.go` `minimumGracePeriodInSeconds`: the least time between the stop signal and
SIGKILL that `killContainer` gives a container"""
HTTP_HOOK_TIMEOUT = 3600.0
"""the kubelet's lifecycle HTTP client has no timeout; the local one gives up on a request after an hour"""


class ContainerLifecycle:
    """The lifecycle hooks and container kills of a pod worker; mixed into `PodWorker`."""

    async def run_handler(self, inst: Instance, spec: dict[str, Any], handler: dict[str, Any]) -> str | None:
        """`handlerRunner.Run`: None when the handler succeeded, else its message."""
        pod_ref = f"{self.name}_{self.ns}({self.uid})"
        name = spec.get("name", "")
        if "exec" in handler:
            command = [str(a) for a in handler["exec"].get("command") or []]
            error, output = await self._exec_sync(inst, command)
            if error is None:
                return None
            return (
                f"Exec lifecycle hook ([{' '.join(command)}]) for Container {json.dumps(name)} in Pod "
                f"{json.dumps(pod_ref)} failed - error: {error}, message: {json.dumps(output)}"
            )
        if "httpGet" in handler:
            get = handler["httpGet"]
            error = await self._http_get(spec, get)
            if error is None:
                return None
            return (
                f"HTTP lifecycle hook ({get.get('path', '')}) for Container {json.dumps(name)} in Pod "
                f"{json.dumps(pod_ref)} failed - error: {error}"
            )
        if "sleep" in handler:
            await asyncio.sleep(float(handler["sleep"].get("seconds") or 0))
            return None
        return f"Cannot run handler: invalid handler: {handler}"

    async def _exec_sync(self, inst: Instance, command: list[str]) -> tuple[str | None, str]:
        """The CRI's `ExecSync` as the kubelet's `RunInContainer` sees it: (error, stdout then stderr)."""
        assert inst.proc is not None
        try:
            ex = await self.kubelet.runtime.spawn_exec(inst.proc, command, tty=False)
        except StartError as e:
            why = f'failed to start exec "{uuid.uuid4().hex}": {e}'
            return f"rpc error: code = Unknown desc = failed to exec in container: {why}", ""
        except ProcessLookupError:
            return f"rpc error: code = NotFound desc = container {inst.container_id} is not running", ""
        try:
            out, err = await ex.proc.communicate()
        except asyncio.CancelledError:
            await asyncio.shield(ex.kill())
            raise
        code = exit_status(ex.proc.returncode or 0)
        output = (out or b"").decode(errors="replace") + (err or b"").decode(errors="replace")
        if code == 0:
            return None, output
        stderr = (err or b"").decode(errors="replace")
        return f"command '{' '.join(command)}' exited with {code}: {stderr}", output

    async def _http_get(self, spec: dict[str, Any], get: dict[str, Any]) -> str | None:
        """`runHTTPHandler`: None once the request got an answer (any status), else the transport's error."""
        port = probe_port(spec, get.get("port"))
        if port is None or self.pod_sandbox is None:
            return f"couldn't find port: {get.get('port')} in container {spec.get('name')}"
        host = get.get("host") or self.pod_ip
        version = ".".join(self.kubelet.kubernetes_version.split(".")[:2])
        headers = {"Host": f"{host}:{port}", "User-Agent": f"kube-lifecycle/{version}", "Accept": "*/*"}
        for h in get.get("httpHeaders") or []:
            for k in [k for k in headers if k.lower() == str(h.get("name", "")).lower()]:
                del headers[k]
            headers[str(h.get("name", ""))] = str(h.get("value", ""))
        ok, message = await self.pod_sandbox.probe_http(
            port,
            get.get("path") or "/",
            HTTP_HOOK_TIMEOUT,
            scheme=get.get("scheme") or "HTTP",
            headers=headers,
            host="127.0.0.1" if host == self.pod_ip else host,
        )
        answered = ok or message.startswith("HTTP probe failed with statuscode")
        return None if answered else message

    async def post_start(self, st: ContainerState, inst: Instance, spec: dict[str, Any]) -> bool:
        """Run the postStart hook of `inst`, just started and already `st.current`; True if it passed. While
        it runs (and until the PLEG's next relist, `PodWorker.seen_started`), `st.frozen` holds the
        container's status as the sync found it. A failure kills the container and leaves it waiting
        `PostStartHookError` (see the module's docstring)."""
        message = await self.run_handler(inst, spec, spec["lifecycle"]["postStart"])
        if message is None or self.terminating:
            return message is None
        self.event("Warning", "FailedPostStartHook", "PostStartHook failed", container=st.name)
        self.event("Normal", "Killing", "FailedPostStartHook", container=st.name)
        await self.kill(st, self.grace(), reason="")
        st.waiting_reason, st.waiting_message = "PostStartHookError", message
        self.mark_dirty()
        return False

    async def pre_stop(self, st: ContainerState, inst: Instance, spec: dict[str, Any], grace: float) -> int:
        """`executePreStopHook`: the preStop hook, waited for at most `grace` s; the whole seconds it took."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        hook = asyncio.ensure_future(self.run_handler(inst, spec, spec["lifecycle"]["preStop"]))
        done, _ = await asyncio.wait({hook}, timeout=grace)
        if hook in done:
            if hook.result() is not None:
                self.event("Warning", "FailedPreStopHook", "PreStopHook failed", container=st.name)
        else:
            hook.cancel()  # abandoned: its exec ends with the container (module docstring)
            with contextlib.suppress(asyncio.CancelledError):
                await hook
        return int(loop.time() - began)

    async def kill(self, st: ContainerState, grace: float, reason: str, *, minimum: bool = True) -> None:
        """`killContainer` of the running instance (its Killing event is the caller's): the preStop hook, then
        the stop signal and SIGKILL once the rest of `grace` (at least `MINIMUM_GRACE_PERIOD` with
        `minimum`; none when the local cluster itself stops) has passed."""
        inst = st.current
        if inst is None or inst.proc is None or inst.exit_code is not None:
            return
        spec = self.spec_of(st.name) or {}
        if ((spec.get("lifecycle") or {}).get("preStop")) and grace > 0:
            grace -= await self.pre_stop(st, inst, spec, grace)
        if minimum:
            grace = max(grace, MINIMUM_GRACE_PERIOD)
        st.kill_reason = reason
        code = await inst.proc.stop(max(grace, 0.0))
        st.frozen = None
        await self.exited(st, code, relist=False)
