"""Latency profiles: how long the modeled parts of a real cluster take.

`fast` models nothing (pure software overhead, for tests). `realistic` adds the delays a real node shows,
from published figures:

- scheduling: kube-scheduler binds a pod in ~10-50 ms on an idle cluster (Kubernetes scalability
  SLIs, "Pod startup latency" and scheduler_scheduling_attempt_duration_seconds;
  sig-scalability/slos/pod_startup_latency.md).
- sandbox: creating the pause sandbox with containerd + runc takes ~0.3-0.5 s and CNI network set-up another
  ~0.1-0.3 s (containerd CRI performance reports, e.g. "cri-tools critest benchmark"; CNI plugin
  benchmarks in the Cilium/Calico docs). We use 0.4 s + 0.2 s.
- image pull: registry pulls run at ~30-100 MB/s on cloud nodes plus ~0.5-1 s of manifest resolution and
  unpacking set-up (AWS EKS best-practices guide "Reduce container image pull time"; Google's
  "Image streaming" blog gives 30-60 MB/s without streaming). We use 40 MB/s + 0.6 s per pull.
- container start: runc create+start of a container in an existing sandbox ~0.1-0.2 s (runc/crun benchmarks in
  the crun README); we use 0.15 s.
- kubelet status: the kubelet's pod status manager batches updates; PLEG relist every 1 s
  (kubelet `--pleg-relist-period`, default 1 s) means exits are seen ~0.5 s later on average. We use 0.5 s.
- downwardAPI volume refresh after a pod update: the volume manager's desired-state populator marks the
  volume for remount and its reconciler rewrites the files; both loops sleep 100 ms between runs
  (`pkg/kubelet/volumemanager/volume_manager.go` `reconcilerLoopSleepPeriod` and
  `desiredStateOfWorldPopulatorLoopSleepPeriod`), so the files change 0-200 ms after the kubelet sees the
  update. We use 0.1 s. (The periodic sync, 60-90 s, is the fallback when an update is missed.)
- exec start: `pods/exec` goes API server -> kubelet (`GetExec`) -> the CRI streaming server -> `runc exec`,
  outside the pod worker; the stream set-up is a few loopback round trips and `runc exec` joins an existing
  container (no rootfs, cgroup or network set-up), a fraction of a container start. We use 0.05 s.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    """Modeled delays, in seconds (bandwidth in bytes per second, 0 = unlimited)."""

    name: str
    schedule: float = 0.0
    sandbox: float = 0.0
    network: float = 0.0
    pull_latency: float = 0.0
    pull_bandwidth: float = 0.0
    container_start: float = 0.0
    exit_detection: float = 0.0
    daemon_report: float = 0.0
    volume_refresh: float = 0.0
    exec_start: float = 0.0

    def pull_seconds(self, size_bytes: int) -> float:
        """Modeled time to pull an image of this size onto a node that lacks it."""
        transfer = size_bytes / self.pull_bandwidth if self.pull_bandwidth else 0.0
        return self.pull_latency + transfer


FAST = Profile("fast")
REALISTIC = Profile(
    "realistic",
    schedule=0.03,
    sandbox=0.4,
    network=0.2,
    pull_latency=0.6,
    pull_bandwidth=40e6,
    container_start=0.15,
    exit_detection=0.5,
    daemon_report=1.0,
    volume_refresh=0.1,
    exec_start=0.05,
)
PROFILES = {p.name: p for p in (FAST, REALISTIC)}


def get_profile(name: str) -> Profile:
    """The profile called `name`, or a ValueError naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown latency profile {name!r}: choose one of {sorted(PROFILES)}") from None
