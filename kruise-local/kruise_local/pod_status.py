"""The pod status the kubelet reports (`pkg/kubelet/kubelet_pods.go` `generateAPIPodStatus`, `getPhase`,
`convertToAPIContainerStatuses`; `pkg/kubelet/status/status_manager.go`), and the pod's metrics."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from . import resources as R
from .container import ContainerState, Instance
from .store import deep_copy, now_iso


def _ts(dt: datetime | None) -> str | None:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ") if dt else None


class PodStatusWriter:
    """The status manager's part of a pod worker: phase, conditions and container statuses."""

    # -- status --------------------------------------------------------------------------------------
    def update_phase(self) -> None:
        if self.final_phase:
            return
        states = list(self.containers.values())
        if states and all(
            s.current and s.current.exit_code is not None and not self.should_restart(s.current)
            for s in states
        ):
            failed = any(s.current and s.current.exit_code != 0 for s in states)
            self.final_phase = "Failed" if failed else "Succeeded"
            for s in states:
                if s.task and s.task is not asyncio.current_task():
                    s.task.cancel()
        self.mark_dirty()

    def phase(self) -> str:
        if self.final_phase:
            return self.final_phase
        states = list(self.containers.values())
        # a container whose first start's postStart hook runs is still waiting in the status (`st.frozen`,
        # no last state: `getPhase` counts it waiting)
        first_hook = any(s.frozen is not None and s.previous is None for s in states)
        if not self.sandbox_ready or not states or first_hook or any(s.current is None for s in states):
            return "Pending"
        return "Running"

    def container_status(self, st: ContainerState, spec: dict[str, Any]) -> dict[str, Any]:
        """`convertToAPIContainerStatuses`: running, terminated, or waiting; an exited container the kubelet
        will start again shows the reason its last start failed (the reasonCache: RunContainerError,
        CrashLoopBackOff, PostStartHookError...) as waiting, one it will not start again stays terminated.
        While a postStart hook runs, the status as the sync found it (`st.frozen`)."""
        if st.frozen is not None:
            return deep_copy(st.frozen)
        cur = st.current
        out: dict[str, Any] = {
            "name": st.name,
            "image": spec.get("image"),
            "imageID": "",
            "ready": bool(st.ready and cur and cur.exit_code is None),
            "restartCount": st.restart_count,
            "started": bool(cur and cur.exit_code is None and st.started),
        }
        if cur is not None:
            out["containerID"] = cur.container_id
            out["imageID"] = cur.image.image_id
            out["image"] = cur.image.ref
        last = st.previous if cur is None or cur.exit_code is None else cur
        if st.waiting_reason and (cur is None or (cur.exit_code is not None and self.should_restart(cur))):
            out["state"] = {"waiting": {"reason": st.waiting_reason}}
            if st.waiting_message:
                out["state"]["waiting"]["message"] = st.waiting_message
            if cur is not None and cur.exit_code is not None:
                last = cur
        elif cur is not None and cur.exit_code is None:
            out["state"] = {"running": {"startedAt": _ts(cur.started_at)}}
        elif cur is not None:
            out["state"] = {"terminated": self.terminated(cur)}
            last = st.previous
        else:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
        out["lastState"] = (
            {"terminated": self.terminated(last)} if last and last.exit_code is not None else {}
        )
        resources = st.allocated if cur is not None else self.kubelet.resizes.allocation(self, st.name, spec)
        if resources:
            out["resources"] = deep_copy(resources)
        allocated = self.kubelet.resizes.allocated_requests(self, st.name)
        if allocated:
            out["allocatedResources"] = allocated
        return out

    @staticmethod
    def terminated(inst: Instance) -> dict[str, Any]:
        t: dict[str, Any] = {
            "exitCode": inst.exit_code,
            "reason": inst.reason,
            "startedAt": _ts(inst.started_at),
            "finishedAt": _ts(inst.finished_at),
            "containerID": inst.container_id,
        }
        if inst.exit_code is not None and inst.exit_code >= 128 and inst.reason in ("Error", ""):
            t["signal"] = inst.exit_code - 128
        if inst.message:
            t["message"] = inst.message
        return t

    def write_status(self) -> None:
        self._status_dirty = False
        pod = self.pod()
        if pod is None or pod["metadata"]["uid"] != self.uid:
            return
        old_status = pod.get("status") or {}
        status: dict[str, Any] = {
            "phase": self.phase(),
            "hostIP": self.kubelet.nodes[self.node].ip,
            "hostIPs": [{"ip": self.kubelet.nodes[self.node].ip}],
            "startTime": _ts(self.start_time),
            "qosClass": old_status.get("qosClass", "BestEffort"),
        }
        if self.sandbox_ready:
            status["podIP"] = self.pod_ip
            status["podIPs"] = [{"ip": self.pod_ip}]
        if self.final_reason:
            status["reason"], status["message"] = self.final_reason, self.final_message
        if self.init_containers:
            inits = []
            for name, st in self.init_containers.items():
                out = self.container_status(st, self.spec_of(name) or {})
                # an init container is ready once it has completed (`kubelet_pods.go`
                # `convertToAPIContainerStatuses`)
                out["ready"] = bool(st.current and st.current.exit_code == 0)
                inits.append(out)
            status["initContainerStatuses"] = inits
        initialized = self.initialized or not pod["spec"].get("initContainers")
        specs = {c["name"]: c for c in pod["spec"].get("containers", [])}
        statuses = []
        for name, spec in specs.items():
            st = self.containers.get(name)
            if st is None:
                creating = "ContainerCreating" if initialized else "PodInitializing"
                statuses.append(
                    {
                        "name": name,
                        "image": spec.get("image"),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "started": False,
                        "state": {"waiting": {"reason": creating}},
                        "lastState": {},
                    }
                )
            else:
                statuses.append(self.container_status(st, spec))
        status["containerStatuses"] = statuses
        all_ready = bool(statuses) and all(s["ready"] for s in statuses) and status["phase"] == "Running"
        conds = {
            "PodReadyToStartContainers": self.sandbox_ready and not self.final_phase,
            "Initialized": initialized,
            "ContainersReady": all_ready,
            "Ready": all_ready,
            "PodScheduled": True,
        }
        old_conds = {c["type"]: c for c in old_status.get("conditions") or []}
        conditions = []
        for ctype, ok in conds.items():
            value = "True" if ok else "False"
            prev = old_conds.get(ctype)
            cond = {
                "type": ctype,
                "status": value,
                "lastTransitionTime": prev["lastTransitionTime"]
                if prev and prev["status"] == value
                else now_iso(),
                "lastProbeTime": None,
            }
            if not ok and ctype in ("Ready", "ContainersReady"):
                unready = [s["name"] for s in statuses if not s["ready"]]
                cond["reason"] = "ContainersNotReady" if status["phase"] != "Succeeded" else "PodCompleted"
                cond["message"] = f"containers with unready status: [{' '.join(unready)}]"
            conditions.append(cond)
        status["conditions"] = conditions + self.kubelet.resizes.conditions(self)
        if status == old_status:
            return
        pod = dict(pod)
        pod["status"] = status
        self.kubelet.store.update(R.PODS, pod, check_rv=False)

    def metrics(self) -> list[dict[str, Any]]:
        out = []
        for st in self.containers.values():
            cur = st.current
            rss = cur.proc.rss_bytes() if cur and cur.proc and cur.exit_code is None else 0
            out.append({"name": st.name, "usage": {"cpu": "0", "memory": f"{max(rss // 1024, 0)}Ki"}})
        return out
