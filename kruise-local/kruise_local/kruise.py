"""OpenKruise controllers of the local cluster: ImagePullJob -> NodeImage -> kruise-daemon pulls, and the
kruise-daemon side of ContainerRecreateRequest.

As in OpenKruise v1.9: the ImagePullJob controller writes the job's image tag into the NodeImage (one per
node) of each target node, at most `parallelism` at a time; the daemon pulls and reports in the NodeImage
status; the job's counts come from those statuses and it completes when every target has finished (at once
when no node matches, with desired 0). A CRR stops the listed containers (preStop, then the grace period) and
never starts them: the kubelet does, by restartPolicy.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import resources as R
from .imageref import normalize, split_image
from .profiles import Profile
from .selectors import LabelSelector
from .store import Obj, Store, deep_copy, now_iso
from .tasks import BackgroundTasks

if TYPE_CHECKING:
    from .kubelet import Kubelet

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")
PROTECTION = "apps.kruise.io/deletion-protection"


def _parse_time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def tag_phase_in(ni: Obj | None, image_name: str, tag: str) -> str:
    """The phase a NodeImage reports for `image_name:tag` (Waiting until reported; Failed if it is gone)."""
    if ni is None:
        return "Failed"
    for t in (((ni.get("status") or {}).get("imageStatuses") or {}).get(image_name) or {}).get("tags") or []:
        if t.get("tag") == tag:
            return t.get("phase", "Waiting")
    return "Waiting"


@dataclass
class JobProgress:
    """An ImagePullJob's view of its started nodes, kept up to date on every NodeImage change.

    The job loop reads the counts instead of re-reading every started node's NodeImage on each wake-up (which
    is O(nodes) per NodeImage change, O(nodes^2) for a job over thousands of nodes).
    """

    image_name: str
    tag: str
    event: asyncio.Event
    phases: dict[str, str] = field(default_factory=dict)
    succeeded: int = 0
    failed: set[str] = field(default_factory=set)

    @property
    def active(self) -> int:
        return len(self.phases) - self.succeeded - len(self.failed)

    def set(self, node: str, phase: str) -> bool:
        """Record `node`'s phase; True if it changed."""
        old = self.phases.get(node)
        if old == phase:
            return False
        if old == "Succeeded":
            self.succeeded -= 1
        elif old == "Failed":
            self.failed.discard(node)
        self.phases[node] = phase
        if phase == "Succeeded":
            self.succeeded += 1
        elif phase == "Failed":
            self.failed.add(node)
        return True


class Kruise:
    """The ImagePullJob controller, the kruise-daemon (image pulls, container recreation) and TTL cleanup."""

    def __init__(self, store: Store, profile: Profile, kubelet: Kubelet) -> None:
        self.store = store
        self.profile = profile
        self.kubelet = kubelet
        """the nodes' kubelets: the kruise-daemon on each node pulls and recreates containers through them"""
        self.jobs: dict[str, asyncio.Task[None]] = {}
        self.job_events: dict[str, asyncio.Event] = {}
        self.progress: dict[str, JobProgress] = {}
        self.node_jobs: dict[str, set[str]] = {}
        """node -> keys of the running jobs that started it (whose JobProgress follows its NodeImage)"""
        self.pulls: set[tuple[str, str, str, int]] = set()
        self.crr_tasks: dict[str, asyncio.Task[None]] = {}
        self.pod_locks: dict[str, asyncio.Lock] = {}
        self.tasks = BackgroundTasks()

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        return self.tasks.spawn(coro)

    def start(self) -> None:
        self.store.listen(self.on_change)
        for job in list(self.store.items(R.IMAGE_PULL_JOBS)):
            self.on_change("ADDED", R.IMAGE_PULL_JOBS, job, None)

    def ensure_node_image(self, node: str, labels: dict[str, str]) -> None:
        """kruise-daemon creates one NodeImage per node, named like it, with the node's labels."""
        if self.store.peek(R.NODE_IMAGES, "", node) is None:
            self.store.create(
                R.NODE_IMAGES,
                {
                    "metadata": {"name": node, "labels": dict(labels)},
                    "spec": {},
                    "status": {"desired": 0},
                },
                owned=True,
            )

    def on_change(self, kind: str, res: R.Resource, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        if res is R.IMAGE_PULL_JOBS:
            key = f"{meta.get('namespace')}/{meta['name']}/{meta['uid']}"
            if kind == "ADDED" and key not in self.jobs:
                self.job_events[key] = asyncio.Event()
                self.jobs[key] = self.spawn(self.run_job(key, obj))
            elif (
                kind == "MODIFIED"
                and meta.get("deletionTimestamp")
                and PROTECTION in (meta.get("finalizers") or [])
            ):
                # the controller releases its deletion protection once the job is being deleted
                released = deep_copy(obj)
                released["metadata"]["finalizers"] = [f for f in meta["finalizers"] if f != PROTECTION]
                asyncio.get_running_loop().call_soon(
                    lambda: self.store.update(R.IMAGE_PULL_JOBS, released, check_rv=False, owned=True)
                )
            elif kind == "DELETED":
                task = self.jobs.pop(key, None)
                if task:
                    task.cancel()
                self.job_events.pop(key, None)
                self.spawn(self.release_tags(obj))
        elif res is R.NODE_IMAGES:
            if kind != "DELETED":
                self.daemon_sync(obj)
            jobs = self.node_jobs.get(meta["name"])
            if jobs:
                # read the store, not `obj`: a write made by an earlier listener of this change is newer
                current = self.store.peek(R.NODE_IMAGES, "", meta["name"])
                for job_key in list(jobs):
                    prog = self.progress.get(job_key)
                    if prog is not None and prog.set(
                        meta["name"], tag_phase_in(current, prog.image_name, prog.tag)
                    ):
                        prog.event.set()
        elif res is R.CRRS:
            key = f"{meta.get('namespace')}/{meta['name']}/{meta['uid']}"
            if kind == "ADDED" and key not in self.crr_tasks:
                self.crr_tasks[key] = self.spawn(self.run_crr(key, obj))
            elif kind == "DELETED":
                task = self.crr_tasks.pop(key, None)
                if task:
                    task.cancel()

    # -- ImagePullJob controller --------------------------------------------------------------------------
    def target_nodes(self, job: Obj) -> list[str]:
        spec = job.get("spec") or {}
        nodes = [n["metadata"]["name"] for n in self.store.items(R.NODE_IMAGES)]
        pod_sel = spec.get("podSelector")
        if pod_sel is not None:
            selector = LabelSelector.from_object(pod_sel)
            hosting = {
                p["spec"].get("nodeName")
                for p in self.store.items(R.PODS, job["metadata"].get("namespace"))
                if selector.matches(p["metadata"].get("labels")) and p["spec"].get("nodeName")
            }
            return [n for n in nodes if n in hosting]
        sel = spec.get("selector")
        if sel is None:
            return nodes
        names = sel.get("names")
        if names:
            present = set(nodes)
            return [n for n in names if n in present]
        selector = LabelSelector.from_object({k: v for k, v in sel.items() if k != "names"})
        return [
            n["metadata"]["name"]
            for n in self.store.items(R.NODE_IMAGES)
            if selector.matches(n["metadata"].get("labels"))
        ]

    def update_job_status(self, ns: str, name: str, status: dict[str, Any]) -> Obj | None:
        job = self.store.peek(R.IMAGE_PULL_JOBS, ns, name)
        if job is None:
            return None
        if job.get("status") == status:
            return job
        # the store keeps `new` itself: copy what the job loop could still touch
        new = deep_copy(job)
        new["status"] = deep_copy(status)
        return self.store.update(R.IMAGE_PULL_JOBS, new, check_rv=False, owned=True)

    async def run_job(self, key: str, job: Obj) -> None:
        ns, name = job["metadata"].get("namespace", ""), job["metadata"]["name"]
        spec = job["spec"]
        image_name, tag = split_image(spec["image"])
        policy = spec.get("pullPolicy") or {}
        parallelism = spec.get("parallelism") or 1
        completion = spec.get("completionPolicy") or {"type": "Always"}
        deadline = completion.get("activeDeadlineSeconds")
        started = datetime.now(UTC)
        status: dict[str, Any] = {
            "startTime": now_iso(),
            "desired": 0,
            "active": 0,
            "succeeded": 0,
            "failed": 0,
        }
        targets = self.target_nodes(job)
        status["desired"] = len(targets)
        if isinstance(parallelism, str):  # intOrString: "50%" of the target nodes, at least one
            parallelism = (
                max(1, len(targets) * int(parallelism.rstrip("%")) // 100)
                if parallelism.endswith("%")
                else int(parallelism)
            )
        if not targets and completion.get("type", "Always") == "Always":
            status["completionTime"] = now_iso()
            status["message"] = "job has completed"
            self.update_job_status(ns, name, status)
            await self.expire_after(R.IMAGE_PULL_JOBS, ns, name, completion.get("ttlSecondsAfterFinished"))
            return
        self.update_job_status(ns, name, status)
        pending = deque(targets)
        owner = {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "name": name,
            "namespace": ns,
            "uid": job["metadata"]["uid"],
        }
        event = self.job_events[key]
        prog = self.progress[key] = JobProgress(image_name, tag, event)
        started_count = 0  # nodes started so far (a node named twice in `selector.names` counts twice)
        try:
            while True:
                # nodes started in this round count as Waiting until the next one, whatever they report
                fresh: list[str] = []
                active = prog.active
                while pending and active < parallelism:
                    node = pending.popleft()
                    self.node_jobs.setdefault(node, set()).add(key)
                    prog.set(node, "Waiting")
                    self.add_tag(
                        node, image_name, tag, policy, spec.get("imagePullPolicy", "IfNotPresent"), owner
                    )
                    # the NodeImage may be gone (no change is reported then): read its phase once
                    prog.set(node, tag_phase_in(self.store.peek(R.NODE_IMAGES, "", node), image_name, tag))
                    fresh.append(node)
                    started_count += 1
                    active += 1
                fresh_done = {n for n in fresh if prog.phases[n] in TERMINAL}
                if fresh_done:
                    failed = sorted(prog.failed.difference(fresh_done))
                    succeeded = prog.succeeded - sum(prog.phases[n] == "Succeeded" for n in fresh_done)
                else:
                    failed = sorted(prog.failed)
                    succeeded = prog.succeeded
                status = {
                    **status,
                    "active": active,
                    "succeeded": succeeded,
                    "failed": len(failed),
                }
                if failed:
                    status["failedNodes"] = failed
                done = not pending and not active
                overdue = deadline is not None and (datetime.now(UTC) - started).total_seconds() >= deadline
                if completion.get("type", "Always") == "Always" and (done or overdue):
                    status["completionTime"] = now_iso()
                    status["message"] = "job has completed" if done else "job exceeds activeDeadlineSeconds"
                    status["active"] = 0 if done else status["active"]
                    self.update_job_status(ns, name, status)
                    break
                status["message"] = f"job is running, progress {started_count - active}/{len(targets)}"
                self.update_job_status(ns, name, status)
                event.clear()
                try:
                    await asyncio.wait_for(event.wait(), timeout=1.0)
                except TimeoutError:
                    pass
        finally:
            self.forget_progress(key)
        await self.expire_after(R.IMAGE_PULL_JOBS, ns, name, completion.get("ttlSecondsAfterFinished"))

    def forget_progress(self, key: str) -> None:
        prog = self.progress.pop(key, None)
        if prog is None:
            return
        for node in prog.phases:
            jobs = self.node_jobs.get(node)
            if jobs is not None:
                jobs.discard(key)
                if not jobs:
                    del self.node_jobs[node]

    def tag_phase(self, node: str, image_name: str, tag: str, job_uid: str) -> str:
        return tag_phase_in(self.store.peek(R.NODE_IMAGES, "", node), image_name, tag)

    def add_tag(
        self,
        node: str,
        image_name: str,
        tag: str,
        policy: dict[str, Any],
        pull_policy: str,
        owner: dict[str, Any],
    ) -> None:
        ni = self.store.peek(R.NODE_IMAGES, "", node)
        if ni is None:
            return
        new = deep_copy(ni)
        images = new.setdefault("spec", {}).setdefault("images", {})
        entry = images.setdefault(image_name, {"tags": []})
        for t in entry["tags"]:
            if t["tag"] == tag:
                if owner not in t.setdefault("ownerReferences", []):
                    t["ownerReferences"].append(dict(owner))
                t["version"] = t.get("version", 0) + 1
                break
        else:
            entry["tags"].append(
                {
                    "tag": tag,
                    "createdAt": now_iso(),
                    "pullPolicy": {
                        k: v for k, v in policy.items() if k in ("timeoutSeconds", "backoffLimit")
                    },
                    "imagePullPolicy": pull_policy,
                    "ownerReferences": [dict(owner)],
                    "version": 0,
                }
            )
        # a new request resets the tag's reported status so the daemon pulls (or confirms) again
        statuses = (new.get("status") or {}).get("imageStatuses") or {}
        if image_name in statuses:
            statuses[image_name]["tags"] = [t for t in statuses[image_name]["tags"] if t["tag"] != tag]
            if not statuses[image_name]["tags"]:
                del statuses[image_name]
        self.store.update(R.NODE_IMAGES, new, check_rv=False, owned=True)

    async def release_tags(self, job: Obj) -> None:
        uid = job["metadata"]["uid"]
        for ni in list(self.store.items(R.NODE_IMAGES)):
            images = (ni.get("spec") or {}).get("images") or {}
            if not any(
                uid == o.get("uid")
                for e in images.values()
                for t in e.get("tags", [])
                for o in t.get("ownerReferences") or []
            ):
                continue
            new = deep_copy(ni)
            for entry in new["spec"]["images"].values():
                for t in entry["tags"]:
                    t["ownerReferences"] = [o for o in t.get("ownerReferences") or [] if o.get("uid") != uid]
            self.store.update(R.NODE_IMAGES, new, check_rv=False, owned=True)

    # -- kruise-daemon: image pulls -------------------------------------------------------------------
    def daemon_sync(self, ni: Obj) -> None:
        node = ni["metadata"]["name"]
        statuses = (ni.get("status") or {}).get("imageStatuses") or {}
        for image_name, entry in ((ni.get("spec") or {}).get("images") or {}).items():
            for t in entry.get("tags") or []:
                done = any(
                    s.get("tag") == t["tag"]
                    and s.get("phase") in TERMINAL
                    and s.get("version") == t.get("version", 0)
                    for s in (statuses.get(image_name) or {}).get("tags") or []
                )
                key = (node, image_name, t["tag"], t.get("version", 0))
                if not done and key not in self.pulls and t.get("ownerReferences"):
                    self.pulls.add(key)
                    self.spawn(self.daemon_pull(key, t))

    def set_tag_status(self, node: str, image_name: str, tag_status: dict[str, Any]) -> None:
        ni = self.store.peek(R.NODE_IMAGES, "", node)
        if ni is None:
            return
        new = deep_copy(ni)
        status = new.setdefault("status", {})
        images = status.setdefault("imageStatuses", {})
        tags = images.setdefault(image_name, {"tags": []})["tags"]
        tags[:] = [t for t in tags if t["tag"] != tag_status["tag"]] + [tag_status]
        all_tags = [t for e in images.values() for t in e["tags"]]
        status["desired"] = sum(
            len(e.get("tags") or []) for e in (new.get("spec") or {}).get("images", {}).values()
        )
        status["succeeded"] = sum(t["phase"] == "Succeeded" for t in all_tags)
        status["failed"] = sum(t["phase"] == "Failed" for t in all_tags)
        status["pulling"] = sum(t["phase"] == "Pulling" for t in all_tags)
        status["waiting"] = sum(t["phase"] == "Waiting" for t in all_tags)
        self.store.update(R.NODE_IMAGES, new, check_rv=False, owned=True)

    async def daemon_pull(self, key: tuple[str, str, str, int], tag: dict[str, Any]) -> None:
        node, image_name, tag_name, version = key
        ref = f"{image_name}@{tag_name}" if tag_name.startswith("sha256:") else f"{image_name}:{tag_name}"
        policy = tag.get("pullPolicy") or {}
        timeout = float(policy.get("timeoutSeconds", 600))
        attempts = int(policy.get("backoffLimit", 3)) + 1
        report = self.profile.daemon_report
        start = now_iso()
        state = self.kubelet.nodes.get(node)
        try:
            base = {"tag": tag_name, "version": version, "startTime": start}
            if (
                state is not None
                and (img := state.image_for(ref)) is not None
                and tag.get("imagePullPolicy") != "Always"
            ):
                self.set_tag_status(
                    node,
                    image_name,
                    {
                        **base,
                        "phase": "Succeeded",
                        "progress": 100,
                        "completionTime": now_iso(),
                        "imageID": img.image_id,
                    },
                )
                return
            self.set_tag_status(node, image_name, {**base, "phase": "Pulling", "progress": 0})
            message = ""
            for attempt in range(attempts):
                if state is None:
                    message = f"node {node} has no kubelet"
                    break
                try:
                    img = await asyncio.wait_for(self.kubelet.pull_to_node(node, ref), timeout=timeout)
                except TimeoutError:
                    img, message = None, f"pull image {ref} timeout after {timeout:.0f}s"
                else:
                    message = (
                        message
                        if img is not None
                        else (
                            f'failed to pull and unpack image "{normalize(ref)}": {normalize(ref)}: not found'
                        )
                    )
                if img is not None:
                    await asyncio.sleep(report)
                    self.set_tag_status(
                        node,
                        image_name,
                        {
                            **base,
                            "phase": "Succeeded",
                            "progress": 100,
                            "completionTime": now_iso(),
                            "imageID": img.image_id,
                        },
                    )
                    return
                if attempt + 1 < attempts:
                    await asyncio.sleep(min(2**attempt, 10) * (0.05 if self.profile.name == "fast" else 1))
            await asyncio.sleep(report)
            self.set_tag_status(
                node,
                image_name,
                {**base, "phase": "Failed", "progress": 0, "completionTime": now_iso(), "message": message},
            )
        finally:
            self.pulls.discard(key)

    # -- kruise-daemon: container recreation -------------------------------------------------------------
    def update_crr(self, ns: str, name: str, status: dict[str, Any]) -> None:
        crr = self.store.peek(R.CRRS, ns, name)
        if crr is None:
            return
        new = deep_copy(crr)
        new["status"] = deep_copy(
            status
        )  # the store keeps `new` itself; the CRR loop goes on editing `status`
        if status.get("phase") == "Completed":  # the controller drops the active label when it is done
            (new["metadata"].get("labels") or {}).pop("crr.apps.kruise.io/active", None)
        self.store.update(R.CRRS, new, check_rv=False, owned=True)

    async def run_crr(self, key: str, crr: Obj) -> None:
        ns, name = crr["metadata"].get("namespace", ""), crr["metadata"]["name"]
        spec = crr["spec"]
        strategy = spec.get("strategy") or {}
        names = [c["name"] for c in spec.get("containers") or []]
        states = [{"name": n, "phase": "Pending"} for n in names]
        created = _parse_time(crr["metadata"].get("creationTimestamp")) or datetime.now(UTC)
        deadline = spec.get("activeDeadlineSeconds")
        pod = self.store.peek(R.PODS, ns, spec["podName"])
        self.update_crr(ns, name, {"phase": "Pending", "containerRecreateStates": states})
        if pod is None:
            await self.finish_crr(ns, name, states, "pod has gone", spec)
            return
        uid = pod["metadata"]["uid"]
        lock = self.pod_locks.setdefault(uid, asyncio.Lock())
        try:
            async with lock:  # one CRR per pod runs at a time
                await self.recreate(ns, name, spec, strategy, states, uid, created, deadline)
        finally:
            if not lock.locked() and not lock._waiters:
                self.pod_locks.pop(uid, None)

    async def recreate(
        self,
        ns: str,
        name: str,
        spec: dict[str, Any],
        strategy: dict[str, Any],
        states: list[dict[str, Any]],
        uid: str,
        created: datetime,
        deadline: int | None,
    ) -> None:
        self.update_crr(ns, name, {"phase": "Recreating", "containerRecreateStates": states})
        min_started = float(strategy.get("minStartedSeconds") or 0)
        grace = strategy.get("terminationGracePeriodSeconds")
        message = ""

        def overdue() -> bool:
            return deadline is not None and (datetime.now(UTC) - created).total_seconds() >= deadline

        for state in states:
            pod = self.store.peek(R.PODS, ns, spec["podName"])
            if pod is None or pod["metadata"]["uid"] != uid:
                message = "pod has gone"
                break
            worker = self.kubelet.worker_for(pod)
            st = worker.containers.get(state["name"]) if worker else None
            if worker is None or st is None or st.current is None:
                state.update(phase="Failed", message="container not found or not started")
                message = state["message"]
                if strategy.get("failurePolicy", "Fail") == "Fail":
                    break
                continue
            old_id = st.current.container_id
            state.update(phase="Recreating")
            self.update_crr(ns, name, {"phase": "Recreating", "containerRecreateStates": states})
            kill_grace = float(
                grace if grace is not None else pod["spec"].get("terminationGracePeriodSeconds", 30)
            )
            await worker.kill_for_crr(state["name"], kill_grace)
            state["isKilled"] = True
            self.update_crr(ns, name, {"phase": "Recreating", "containerRecreateStates": states})
            # wait for the kubelet to start a new instance, running and ready for minStartedSeconds
            while True:
                if overdue():
                    message = "recreating has exceeded the activeDeadlineSeconds"
                    break
                cur = st.current
                if worker.terminating or self.store.peek(R.PODS, ns, spec["podName"]) is None:
                    message = "pod has gone"
                    break
                if (
                    cur is not None
                    and cur.container_id != old_id
                    and cur.exit_code is None
                    and st.ready
                    and (
                        cur.started_at and (datetime.now(UTC) - cur.started_at).total_seconds() >= min_started
                    )
                ):
                    state.update(phase="Succeeded")
                    break
                await asyncio.sleep(0.05)
            if message:
                break
            self.update_crr(ns, name, {"phase": "Recreating", "containerRecreateStates": states})
        await self.finish_crr(ns, name, states, message, spec)

    async def finish_crr(
        self, ns: str, name: str, states: list[dict[str, Any]], message: str, spec: dict[str, Any]
    ) -> None:
        status: dict[str, Any] = {
            "phase": "Completed",
            "completionTime": now_iso(),
            "containerRecreateStates": states,
        }
        if message:
            status["message"] = message
        self.update_crr(ns, name, status)
        self.spawn(self.expire_after(R.CRRS, ns, name, spec.get("ttlSecondsAfterFinished")))

    async def expire_after(self, res: R.Resource, ns: str, name: str, ttl: int | None) -> None:
        if ttl is None:
            return
        await asyncio.sleep(float(ttl))
        if self.store.peek(res, ns, name) is not None:
            self.store.mark_deleted(res, ns, name, None)

    async def shutdown(self) -> None:
        await self.tasks.cancel()
