"""The kubelet's probes (`pkg/kubelet/prober`: `prober.go`, `worker.go`): startup, readiness and liveness,
exec, tcpSocket and httpGet handlers; a failed liveness or startup probe asks for a kill; a readiness or
startup result that changed asks for a pod sync (`kubelet.go` `syncLoopIteration`, `handleProbeSync`)."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .backoff import go_duration
from .container import ContainerState, Instance


def probe_port(spec: dict[str, Any], port: Any) -> int | None:
    """A probe's port: a number, or the name of one of the container's ports (`ResolveContainerPort`)."""
    if isinstance(port, int):
        return port
    if isinstance(port, str) and port.isdigit():
        return int(port)
    for p in spec.get("ports") or []:
        if p.get("name") == port and p.get("containerPort") is not None:
            return int(p["containerPort"])
    return None


INITIAL: dict[str, bool | None] = {"readinessProbe": False, "livenessProbe": True, "startupProbe": None}
"""a worker's result for a container it has just found (`newWorker`: readiness Failure, liveness Success,
startup Unknown)"""


@dataclass
class ProbeWorker:
    """One probe worker's state (`worker.go` `worker`): the container spec and probe it was made with, the
    container instance it last found in the status (`containerID`), its result for it, the run of equal
    probe outcomes (`lastResult`, `resultRun`), `onHold` after a liveness or startup failure, and its
    one-slot manual trigger (`manualTriggerCh`)."""

    name: str
    kind: str
    spec: dict[str, Any]
    trigger: asyncio.Event = field(default_factory=asyncio.Event)
    inst: Instance | None = None
    result: bool | None = None
    last: bool | None = None
    run: int = 0
    on_hold: bool = False
    task: asyncio.Task[None] | None = None


class PodProber:
    """The prober manager's part of a pod worker: one probe worker per container name and probe type."""

    probe_workers: dict[tuple[str, str], ProbeWorker]

    def add_probes(self, pod: dict[str, Any]) -> None:
        """`prober_manager.go` `AddPod` (called by `SyncPod` once the pod's volumes are mounted, before the
        runtime starts anything): a worker for each probe of each container, which lives until the pod
        ends, across the container's restarts."""
        for c in pod["spec"].get("containers", []):
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if c.get(kind):
                    w = self.probe_workers[(c["name"], kind)] = ProbeWorker(c["name"], kind, c)
                    w.task = asyncio.create_task(self.probe_worker(w))

    def stop_probes(self) -> None:
        for w in self.probe_workers.values():
            if w.task is not None and w.task is not asyncio.current_task():
                w.task.cancel()

    def probe_grace(self, spec: dict[str, Any] | None, kind: str) -> float:
        """Grace period of a kill for a failed probe: the probe's terminationGracePeriodSeconds if set, else
        the pod's (`kuberuntime_container.go` `killContainer`)."""
        tgps = ((spec or {}).get(kind) or {}).get("terminationGracePeriodSeconds")
        return float(tgps) if tgps is not None else self.grace()

    def sync_begins(self) -> None:
        """`prober_manager.go` `UpdatePodStatus`, as a sync generates the pod's status: a started, running
        container without a readiness probe is ready; one with a readiness probe whose result for it is not
        Success triggers its readiness worker at once (`manualTriggerCh`; nothing triggers a startup or
        liveness worker)."""
        for name, st in self.containers.items():
            inst = st.shown
            if inst is None or inst.exit_code is not None or not st.started:
                continue
            w = self.probe_workers.get((name, "readinessProbe"))
            if w is None:
                if not st.ready:
                    st.ready = True
                    self.mark_dirty()
            elif not (w.inst is inst and w.result):
                w.trigger.set()

    async def probe_worker(self, w: ProbeWorker) -> None:
        """`worker.go` `run`: probe once at once, then at each tick of a ticker of periodSeconds started
        with the worker (its phase is the worker's, whatever the container's restarts), or when triggered;
        a tick that came while a probe ran is taken at once (the ticker's one-slot channel). A worker made
        within a period of the kubelet's start first sleeps a random part of the period."""
        period = float(w.spec[w.kind].get("periodSeconds", 10))
        if period > time.monotonic() - self.kubelet.started_at:
            await asyncio.sleep(random.random() * period)
        loop = asyncio.get_running_loop()
        begin, ticks = loop.time(), 0
        while await self.do_probe(w):
            due = int((loop.time() - begin) // period)
            if due > ticks:
                ticks = due
                continue
            try:
                await asyncio.wait_for(w.trigger.wait(), begin + (ticks + 1) * period - loop.time())
                w.trigger.clear()
            except TimeoutError:
                ticks += 1

    async def do_probe(self, w: ProbeWorker) -> bool:
        """`worker.go` `doProbe`; returns whether the worker goes on. It reads the container as the status
        manager's status shows it (`st.shown`: from the sync after the PLEG saw the start): a new container
        resets the result to the initial one (a readiness or startup result that changed asks for a pod
        sync: `results_manager.go` `Set`, `kubelet.go` `handleProbeSync`) and ends `onHold`. Nothing is
        probed while the container is not running, before initialDelaySeconds since its start, by a
        startup worker once the container started, or by the others before. A result changes only after
        successThreshold successes / failureThreshold failures in a row; every failure records an Unhealthy
        event (`prober.go` `probe`). A startup success sets `started` at once (`SetContainerStartup`; Ready
        waits for the next sync's `UpdatePodStatus`); a readiness result sets `ready`
        (`SetContainerReadiness`); a liveness or startup failure asks the container loop to kill (and
        restart) the container and holds the worker until a new container."""
        if self.terminating or self.final_phase is not None:
            return False
        st = self.containers.get(w.name)
        inst = st.shown if st is not None else None
        if st is None or inst is None:
            return True
        if inst is not w.inst:
            w.inst, w.result, w.last, w.run, w.on_hold = inst, INITIAL[w.kind], None, 0, False
            if w.kind != "livenessProbe":
                self.request_sync()
        if w.on_hold:
            return True
        if inst.exit_code is not None:
            policy = ((self.pod() or {}).get("spec") or {}).get("restartPolicy", "Always")
            return policy != "Never"
        probe = w.spec[w.kind]
        since = (datetime.now(UTC) - inst.started_at).total_seconds() if inst.started_at else 0.0
        if int(since) < int(probe.get("initialDelaySeconds", 0)):
            return True
        if (w.kind == "startupProbe") == st.started:
            return True
        good, msg = await self.run_probe(inst, w.spec, probe)
        if inst.exit_code is not None or st.shown is not inst or self.terminating:
            return True
        w.run = w.run + 1 if good == w.last else 1
        w.last = good
        if not good:
            label = w.kind.removesuffix("Probe").capitalize()
            self.event("Warning", "Unhealthy", f"{label} probe failed: {msg}", container=st.name)
        if w.run < int(probe.get("successThreshold" if good else "failureThreshold", 1 if good else 3)):
            return True
        if w.result != good:
            w.result = good
            self.probe_result(w, st, good)
        if not good and w.kind != "readinessProbe":
            w.on_hold, w.run = True, 0
        return True

    def probe_result(self, w: ProbeWorker, st: ContainerState, good: bool) -> None:
        """A result that changed (`syncLoopIteration`'s probe cases)."""
        if w.kind == "readinessProbe":
            st.ready = good
            self.mark_dirty()
            self.request_sync()
        elif w.kind == "startupProbe" and good:
            st.started = True
            self.mark_dirty()
            self.request_sync()
        elif not good:
            st.probe_failed = w.kind
            st.wake.set()

    async def run_probe(
        self, inst: Instance, spec: dict[str, Any], probe: dict[str, Any]
    ) -> tuple[bool, str]:
        """One probe (`prober.go` `runProbe`): exec in the container; tcpSocket and httpGet from inside the
        pod's network namespace, to 127.0.0.1 for the pod's IP (the default host) or the given host."""
        timeout = float(probe.get("timeoutSeconds", 1))
        if "exec" in probe:
            assert inst.proc is not None
            code, out = await self.kubelet.runtime.exec(
                inst.proc, list(probe["exec"].get("command") or []), timeout=timeout
            )
            if code == -1 and out == "timeout":
                return False, f"command timed out after {go_duration(timeout)}"
            return code == 0, out
        handler = probe.get("tcpSocket") or probe.get("httpGet")
        if handler is None or self.pod_sandbox is None:
            return False, "no supported probe handler (grpc probes are not modelled)"
        port = probe_port(spec, handler.get("port"))
        if port is None:
            return False, f"couldn't find port: {handler.get('port')} in container {spec.get('name')}"
        host = handler.get("host") or ""
        target = "127.0.0.1" if host in ("", self.pod_ip) else host
        if "tcpSocket" in probe:
            return await self.pod_sandbox.probe_tcp(port, timeout, host=target)
        version = ".".join(self.kubelet.kubernetes_version.split(".")[:2])
        headers = {
            "Host": f"{host or self.pod_ip}:{port}",
            "User-Agent": f"kube-probe/{version}",
            "Accept": "*/*",
        }
        for h in (
            handler.get("httpHeaders") or []
        ):  # user headers replace the defaults (`http.go` `NewProbeRequest`)
            for k in [k for k in headers if k.lower() == str(h.get("name", "")).lower()]:
                del headers[k]
            headers[str(h.get("name", ""))] = str(h.get("value", ""))
        return await self.pod_sandbox.probe_http(
            port,
            handler.get("path") or "/",
            timeout,
            scheme=handler.get("scheme") or "HTTP",
            headers=headers,
            host=target,
        )
