"""The kubelet's probes (`pkg/kubelet/prober`: `prober.go`, `worker.go`): startup, readiness and liveness,
exec, tcpSocket and httpGet handlers; a failed liveness or startup probe asks for a kill; a readiness or
startup result that changed asks for a pod sync (`kubelet.go` `syncLoopIteration`, `handleProbeSync`)."""

from __future__ import annotations

import asyncio
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


class PodProber:
    """The prober manager's part of a pod worker: one probe loop per running container."""

    def probe_grace(self, spec: dict[str, Any] | None, kind: str) -> float:
        """Grace period of a kill for a failed probe: the probe's terminationGracePeriodSeconds if set, else
        the pod's (`kuberuntime_container.go` `killContainer`)."""
        tgps = ((spec or {}).get(kind) or {}).get("terminationGracePeriodSeconds")
        return float(tgps) if tgps is not None else self.grace()

    async def probe_loop(self, st: ContainerState, inst: Instance, spec: dict[str, Any]) -> None:
        """Run the container's probes (one worker each, `prober/worker.go`): the startup probe first, then
        readiness and liveness once it passed (`prober_manager.go`: they are skipped until started)."""
        if spec.get("startupProbe") and not await self.probe_worker(st, inst, spec, "startupProbe"):
            return
        st.started = True
        if not spec.get("readinessProbe"):
            st.ready = True
        self.mark_dirty()
        if spec.get("startupProbe"):
            self.request_sync()  # the startup result changed (`results_manager.go` `Set` sends changes only)
        kinds = [k for k in ("readinessProbe", "livenessProbe") if spec.get(k)]
        await asyncio.gather(*(self.probe_worker(st, inst, spec, k) for k in kinds))

    async def probe_worker(self, st: ContainerState, inst: Instance, spec: dict[str, Any], kind: str) -> bool:
        """One probe worker (`prober/worker.go` `doProbe`): a result changes only after successThreshold
        successes / failureThreshold failures in a row; readiness starts as failure. Every failure records an
        Unhealthy event (`prober.go` `probe`). A liveness or startup failure asks the container loop to kill
        (and restart) the container, and the worker stops for that instance (`onHold`). A startup worker
        returns True once its probe passed (it then stops); False when the instance is gone or failed."""
        probe = spec[kind]
        await asyncio.sleep(float(probe.get("initialDelaySeconds", 0)))
        period = float(probe.get("periodSeconds", 10))
        ok_needed, fail_needed = int(probe.get("successThreshold", 1)), int(probe.get("failureThreshold", 3))
        label = kind.removesuffix("Probe").capitalize()
        oks = fails = 0
        while inst.exit_code is None and st.current is inst and not self.terminating:
            good, msg = await self.run_probe(inst, spec, probe)
            if inst.exit_code is not None or st.current is not inst or self.terminating:
                return False
            if good:
                if kind == "startupProbe":
                    return True
                oks, fails = oks + 1, 0
                if kind == "readinessProbe" and not st.ready and oks >= ok_needed:
                    st.ready = True
                    self.mark_dirty()
                    self.request_sync()  # a readiness result that changed asks for a sync
            else:
                fails, oks = fails + 1, 0
                self.event("Warning", "Unhealthy", f"{label} probe failed: {msg}", container=st.name)
                if kind == "readinessProbe" and st.ready and fails >= fail_needed:
                    st.ready = False
                    self.mark_dirty()
                    self.request_sync()
                if kind != "readinessProbe" and fails >= fail_needed:
                    st.probe_failed = kind
                    st.wake.set()
                    return False
            await asyncio.sleep(period)
        return False

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
