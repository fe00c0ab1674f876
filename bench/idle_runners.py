"""What idle slots cost: CPU and RSS of the stage runners of idle chain pods on the local cluster.

    python bench/idle_runners.py --pods 10 --window 30    # 20 runners (two slots per pod)
    python bench/idle_runners.py --pods 1 --settle 0 --window 5    # the fast polls right after the start

Creates `--pods` chain pods (generation 0: nothing to run), waits until they run, lets `--settle` seconds pass
(the runners poll fast for about 5 s after they start), then reads the user + system CPU time of every runner
process (`busybox sh .../runner`: the kernel runs the slots' command through its `#!` line; a descendant of
this process: the local cluster runs its containers as local processes) from /proc/<pid>/stat at the start
and end of a `--window` of seconds, and their RSS.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IMAGE = "busybox:1.36"


def cpu_ticks(pid: int) -> int:
    """utime + stime of `pid`, in clock ticks."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def descends_from_me(pid: int) -> bool:
    """Whether `pid` descends from this process (other local clusters on the machine run runners too)."""
    try:
        while pid > 1:
            pid = parent(pid)
            if pid == os.getpid():
                return True
    except OSError:
        pass
    return False


def runner_pids() -> list[int]:
    """The runner processes of this process's cluster: `busybox sh .../runner` (the kernel runs the runner
    through its `#!` line) with no further argument (its short-lived helpers, such as `runner --capture-env`,
    have some)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if (
            len(argv) == 3
            and argv[0].endswith(b"busybox")
            and argv[1] == b"sh"
            and argv[2].endswith(b"/bin/runner")
            and descends_from_me(int(entry))
        ):
            pids.append(int(entry))
    return pids


def rss_kib(pid: int) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=10, help="idle chain pods (two runners each)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between running and measuring")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured")
    parser.add_argument("--profile", default="realistic", choices=["fast", "realistic"])
    args = parser.parse_args()

    from kruise_local import ClusterConfig, LocalCluster
    from kubernetes import client, config

    from airflow_kruise_chain.core.manifest import build_chain_pod
    from airflow_kruise_chain.core.runnerinstall import runner_configmap
    from airflow_kruise_chain.core.spec import ChainSpec, StageSpec

    root = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    with LocalCluster(ClusterConfig(profile=args.profile, root=str(root / "cluster"))) as cluster:
        config.load_kube_config(str(cluster.write_kubeconfig(root / "kubeconfig")))
        api = client.CoreV1Api()
        api.create_namespaced_config_map("default", runner_configmap("default"))  # as a chain's setup does
        for k in range(args.pods):
            chain = ChainSpec(name=f"idle{k}", namespace="default", stages=[StageSpec("s", IMAGE, ["true"])])
            pod = build_chain_pod(
                chain, pod_name=f"idle-{k}", dag_id="idle", run_id=f"r{k}", first_images=(IMAGE, IMAGE)
            )
            api.create_namespaced_pod("default", pod)
        deadline = time.monotonic() + 120
        while sum(p.status.phase == "Running" for p in api.list_namespaced_pod("default").items) < args.pods:
            if time.monotonic() > deadline:
                sys.exit("the pods did not all run within 120 s")
            time.sleep(0.5)
        time.sleep(args.settle)
        pids = runner_pids()
        start, t0 = {pid: cpu_ticks(pid) for pid in pids}, time.monotonic()
        time.sleep(args.window)
        end, t1 = {pid: cpu_ticks(pid) for pid in pids}, time.monotonic()
        rss = [rss_kib(pid) for pid in pids]
    seconds = sum(end[pid] - start[pid] for pid in pids) / os.sysconf("SC_CLK_TCK")
    share = 100 * seconds / (t1 - t0)
    print(
        f"{len(pids)} idle runners ({args.pods} pods, {args.profile} profile), {t1 - t0:.1f} s measured "
        f"after {args.settle:g} s: CPU {seconds:.2f} s = {share:.2f} % of one core in all, "
        f"{share / max(1, len(pids)):.3f} % each; RSS {min(rss, default=0)}-{max(rss, default=0)} KiB each"
    )


if __name__ == "__main__":
    main()
