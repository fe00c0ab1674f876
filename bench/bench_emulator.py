"""Benchmark of the local cluster emulator itself (not a timed test): how fast it turns requests into status.

    python bench/bench_emulator.py            # full run (~1 min on 2 cores)
    python bench/bench_emulator.py --quick    # smaller run (< 1 min)

Scenarios, each in both latency profiles (`fast`: no modeled delays; `realistic`: scheduling, sandbox, image
pull, container start and kruise-daemon report delays, see `kruise-local/kruise_local/profiles.py`):

1. pods: through the real `kubernetes` client, create P pods (one busybox:1.36 container `sleep 3600` each)
   from a few client threads as fast as possible; a watch (opened at the list's resourceVersion, so nothing is
   missed) records when each pod is first reported Running. Reports pods/s (P / time from the first create to
   the last Running) and the p50/p95 create->Running latency, then deletes them all and times the deletion
   (until the watch has seen every DELETED). Run twice: with the cluster in its own process (as `kruise-local
   serve` runs it: the emulator's own throughput) and in the client's process (as the test suite runs it,
   sharing the GIL with the client's threads).
2. imagepulljob: start a cluster of N nodes (5,000; start-up time measured), create one ImagePullJob
   (apps.kruise.io/v1alpha1, busybox:1.36, no selector = every node, parallelism N) through the real client
   and watch it until `status.completionTime` is set. Reports desired/succeeded/failed, the NodeImage status
   writes of the kruise-daemon, wall time and the peak RSS of the cluster's process. In the fast profile it
   runs again with parallelism 1 (OpenKruise's default: N rounds of one node each).

Every scenario runs in a fresh subprocess, so that peak RSS and start-up are per scenario. Results go to
`bench/results/emulator.json` and `bench/results/emulator.md`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
GROUP = "apps.kruise.io"


# -- helpers ----------------------------------------------------------------------------------------------
def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process, MiB."""
    now = peak = float("nan")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return now, peak


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def machine() -> dict[str, Any]:
    cpu = mem = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    try:
        kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        mem = f"{kib / 2**20:.1f} GiB"
    except (OSError, StopIteration):
        pass
    import kubernetes

    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "kubernetes_client": kubernetes.__version__,
    }


# -- the cluster under test, in this process or in its own ----------------------------------------------
def _start(profile: str, nodes: int, root: str) -> tuple[Any, float, dict[str, int]]:
    from kruise_local import ClusterConfig, LocalCluster
    from kruise_local import resources as R

    t0 = time.perf_counter()
    cluster = LocalCluster(ClusterConfig(profile=profile, nodes=nodes, root=root))
    cluster.start()
    startup = time.perf_counter() - t0
    counts = {"nodeimage_status_writes": 0, "nodeimage_writes": 0, "job_status_writes": 0}

    def count(kind: str, res: Any, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if res is R.NODE_IMAGES and old is not None:
            counts["nodeimage_writes"] += 1
            if obj.get("status") != old.get("status"):
                counts["nodeimage_status_writes"] += 1
        elif res is R.IMAGE_PULL_JOBS and old is not None and obj.get("status") != old.get("status"):
            counts["job_status_writes"] += 1

    cluster.call(lambda: cluster.store.listen(count))
    return cluster, startup, counts


def _host(conn: Any, profile: str, nodes: int, root: str) -> None:
    """Body of the cluster's own process: start, report, answer `stats`, stop on `stop`."""
    before = rss_mib()[0]
    cluster, startup, counts = _start(profile, nodes, root)
    path = cluster.write_kubeconfig(Path(root) / "kubeconfig")
    conn.send(
        {
            "kubeconfig": str(path),
            "startup_s": startup,
            "rss_before_start_mib": before,
            "rss_after_start_mib": rss_mib()[0],
        }
    )
    try:
        while True:
            msg = conn.recv()
            if msg == "stats":
                now, peak = rss_mib()
                conn.send({**cluster.call(lambda: dict(counts)), "rss_mib": now, "peak_rss_mib": peak})
            else:
                break
    finally:
        cluster.stop()
        conn.send("stopped")


class Cluster:
    """A LocalCluster under test: `layout` "process" (its own process) or "inproc" (this process)."""

    def __init__(self, layout: str, profile: str, nodes: int, root: str) -> None:
        self.layout = layout
        if layout == "inproc":
            self.rss_before_start_mib = rss_mib()[0]
            self.cluster, self.startup_s, self._counts = _start(profile, nodes, root)
            self.kubeconfig = str(self.cluster.write_kubeconfig(Path(root) / "kubeconfig"))
            self.rss_after_start_mib = rss_mib()[0]
        else:
            ctx = multiprocessing.get_context("fork")  # forked before any client thread exists
            self._conn, child = ctx.Pipe()
            self._proc = ctx.Process(target=_host, args=(child, profile, nodes, root), daemon=True)
            self._proc.start()
            hello = self._conn.recv()
            self.kubeconfig = hello["kubeconfig"]
            self.startup_s = hello["startup_s"]
            self.rss_before_start_mib = hello["rss_before_start_mib"]
            self.rss_after_start_mib = hello["rss_after_start_mib"]

    def stats(self) -> dict[str, Any]:
        if self.layout == "inproc":
            now, peak = rss_mib()
            return {**self.cluster.call(lambda: dict(self._counts)), "rss_mib": now, "peak_rss_mib": peak}
        self._conn.send("stats")
        return self._conn.recv()

    def api_client(self, pool: int = 16) -> Any:
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=cfg)
        cfg.connection_pool_maxsize = pool
        return client.ApiClient(cfg)

    def stop(self) -> None:
        if self.layout == "inproc":
            self.cluster.stop()
            return
        self._conn.send("stop")
        self._conn.recv()
        self._proc.join(60)


# -- scenario 1: pods to Running --------------------------------------------------------------------------
def pod_body(name: str, run: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": run}},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 5,
        },
    }


def run_pods(layout: str, profile: str, count: int, nodes: int, workers: int) -> dict[str, Any]:
    from kubernetes import client, watch

    with tempfile.TemporaryDirectory(prefix="bench-pods-") as root:
        cluster = Cluster(layout, profile, nodes, root)
        try:
            api = cluster.api_client(pool=workers + 2)
            core = client.CoreV1Api(api)
            ns = "default"
            run = uuid.uuid4().hex[:8]
            selector = f"bench={run}"
            names = [f"bench-{run}-{i:04d}" for i in range(count)]
            rv = core.list_namespaced_pod(ns, label_selector=selector).metadata.resource_version

            created: dict[str, float] = {}
            running: dict[str, float] = {}
            deleted: dict[str, float] = {}
            all_running = threading.Event()
            all_deleted = threading.Event()
            watch_error: list[BaseException] = []

            def watcher() -> None:
                w = watch.Watch()
                try:
                    # raw events (deserialize=False): the client's model building is not the emulator's cost
                    for ev in w.stream(
                        core.list_namespaced_pod,
                        ns,
                        label_selector=selector,
                        resource_version=rv,
                        timeout_seconds=600,
                        deserialize=False,
                    ):
                        now = time.perf_counter()
                        obj = ev["object"]
                        name = obj["metadata"]["name"]
                        if ev["type"] == "DELETED":
                            deleted.setdefault(name, now)
                            if len(deleted) == count:
                                all_deleted.set()
                                break
                        elif (obj.get("status") or {}).get("phase") == "Running":
                            running.setdefault(name, now)
                            if len(running) == count:
                                all_running.set()
                except BaseException as e:  # reported by the main thread
                    watch_error.append(e)
                    all_running.set()
                    all_deleted.set()
                finally:
                    w.stop()

            threading.Thread(target=watcher, daemon=True).start()

            def create(name: str) -> None:
                created[name] = time.perf_counter()
                resp = core.create_namespaced_pod(ns, pod_body(name, run), _preload_content=False)
                resp.read()  # a raw reply: skip the client's model building
                resp.release_conn()

            def delete(name: str) -> None:
                resp = core.delete_namespaced_pod(name, ns, _preload_content=False)
                resp.read()
                resp.release_conn()

            t0 = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(create, names))
            t_created = time.perf_counter()
            if not all_running.wait(300) or watch_error:
                raise RuntimeError(f"only {len(running)}/{count} pods Running: {watch_error}")
            t_running = time.perf_counter()
            latencies = [running[n] - created[n] for n in names]
            d0 = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(delete, names))
            if not all_deleted.wait(300) or watch_error:
                raise RuntimeError(f"only {len(deleted)}/{count} pods deleted: {watch_error}")
            d1 = time.perf_counter()
            stats = cluster.stats()
            api.close()
            return {
                "scenario": "pods",
                "layout": layout,
                "profile": profile,
                "pods": count,
                "nodes": nodes,
                "client_threads": workers,
                "cluster_start_s": cluster.startup_s,
                "create_calls_s": t_created - t0,
                "create_rate_per_s": count / (t_created - t0),
                "to_running_s": t_running - t0,
                "pods_running_per_s": count / (t_running - t0),
                "latency_p50_s": percentile(latencies, 50),
                "latency_p95_s": percentile(latencies, 95),
                "latency_max_s": max(latencies),
                "delete_s": d1 - d0,
                "pods_deleted_per_s": count / (d1 - d0),
                "peak_rss_mib": stats["peak_rss_mib"],
            }
        finally:
            cluster.stop()


# -- scenario 2: ImagePullJob fan-out -------------------------------------------------------------------
def run_imagepulljob(profile: str, nodes: int, image: str, parallelism: int | str) -> dict[str, Any]:
    from kubernetes import client, watch

    with tempfile.TemporaryDirectory(prefix="bench-ipj-") as root:
        cluster = Cluster("process", profile, nodes, root)
        try:
            api = cluster.api_client()
            custom = client.CustomObjectsApi(api)
            ns, name = "default", f"prewarm-{uuid.uuid4().hex[:6]}"
            listed = custom.list_namespaced_custom_object(GROUP, "v1alpha1", ns, "imagepulljobs")
            rv = listed["metadata"]["resourceVersion"]
            body = {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "ImagePullJob",
                "metadata": {"name": name},
                "spec": {
                    "image": image,
                    "parallelism": parallelism,
                    "completionPolicy": {"type": "Always", "ttlSecondsAfterFinished": 600},
                },
            }
            t0 = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, "v1alpha1", ns, "imagepulljobs", body)
            t_created = time.perf_counter()
            status: dict[str, Any] = {}
            w = watch.Watch()
            for ev in w.stream(
                custom.list_namespaced_custom_object,
                GROUP,
                "v1alpha1",
                ns,
                "imagepulljobs",
                field_selector=f"metadata.name={name}",
                resource_version=rv,
                timeout_seconds=900,
                deserialize=False,
            ):
                status = ev["object"].get("status") or {}
                if status.get("completionTime"):
                    w.stop()
                    break
            t_done = time.perf_counter()
            if not status.get("completionTime"):
                raise RuntimeError(f"ImagePullJob did not complete: {status}")
            stats = cluster.stats()
            api.close()
            return {
                "scenario": "imagepulljob",
                "layout": "process",
                "profile": profile,
                "nodes": nodes,
                "image": image,
                "parallelism": parallelism,
                "cluster_start_s": cluster.startup_s,
                "create_call_s": t_created - t0,
                "job_wall_s": t_done - t0,
                "nodes_per_s": (status.get("succeeded") or 0) / (t_done - t0),
                "desired": status.get("desired"),
                "succeeded": status.get("succeeded"),
                "failed": status.get("failed"),
                "nodeimage_status_writes": stats["nodeimage_status_writes"],
                "nodeimage_writes": stats["nodeimage_writes"],
                "job_status_writes": stats["job_status_writes"],
                "rss_before_start_mib": cluster.rss_before_start_mib,
                "rss_after_start_mib": cluster.rss_after_start_mib,
                "peak_rss_mib": stats["peak_rss_mib"],
            }
        finally:
            cluster.stop()


# -- driver ---------------------------------------------------------------------------------------------
def child(args: argparse.Namespace) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    if args.scenario == "pods":
        result = run_pods(args.layout, args.profile, args.pods, args.pod_nodes, args.client_threads)
    else:
        result = run_imagepulljob(args.profile, args.nodes, args.image, args.parallelism or args.nodes)
    print("RESULT " + json.dumps(result), flush=True)


def spawn(argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *argv],
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"scenario {argv} failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def fmt(v: Any, digits: int = 2) -> str:
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


LAYOUT = {"process": "own process", "inproc": "in the client's process"}


def table(results: list[dict[str, Any]]) -> str:
    pods = [r for r in results if r["scenario"] == "pods"]
    jobs = [r for r in results if r["scenario"] == "imagepulljob"]
    lines = []
    if pods:
        p = pods[0]
        lines += [
            f"**Pods to Running**: {p['pods']} pods (busybox:1.36 `sleep 3600`, real local processes) "
            f"created through the real `kubernetes` client from {p['client_threads']} threads on a "
            f"{p['nodes']}-node cluster, timed by a watch.",
            "",
            "| profile | cluster | create calls/s | pods Running/s | p50 create→Running | p95 create→Running "
            "| all Running | delete all (until DELETED) | peak RSS |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in pods:
            lines.append(
                f"| {r['profile']} | {LAYOUT[r['layout']]} | {fmt(r['create_rate_per_s'], 0)} "
                f"| {fmt(r['pods_running_per_s'], 1)} | {fmt(r['latency_p50_s'] * 1000, 0)} ms "
                f"| {fmt(r['latency_p95_s'] * 1000, 0)} ms | {fmt(r['to_running_s'])} s "
                f"| {fmt(r['delete_s'])} s | {fmt(r['peak_rss_mib'], 0)} MiB |"
            )
        lines.append("")
    if jobs:
        j = jobs[0]
        lines += [
            f"**ImagePullJob fan-out**: one ImagePullJob for {j['image']} with no selector (every node) on "
            f"a {fmt(j['nodes'])}-node cluster, created and watched (until `status.completionTime`) through "
            "the real client; the cluster runs in its own process (RSS of that process; "
            f"{fmt(j['rss_before_start_mib'], 0)} MiB before the cluster starts).",
            "",
            "| profile | parallelism | cluster start-up | create → completionTime | nodes/s | desired "
            "| succeeded | failed | NodeImage status writes | job status writes | RSS after start-up "
            "| peak RSS |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in jobs:
            lines.append(
                f"| {r['profile']} | {fmt(r['parallelism'])} | {fmt(r['cluster_start_s'])} s "
                f"| {fmt(r['job_wall_s'])} s | {fmt(r['nodes_per_s'], 0)} | {fmt(r['desired'])} "
                f"| {fmt(r['succeeded'])} | {fmt(r['failed'])} | {fmt(r['nodeimage_status_writes'])} "
                f"| {fmt(r['job_status_writes'])} | {fmt(r['rss_after_start_mib'], 0)} MiB "
                f"| {fmt(r['peak_rss_mib'], 0)} MiB |"
            )
        lines.append("")
    return "\n".join(lines)


def plan(args: argparse.Namespace) -> list[list[str]]:
    """The scenario runs, as child argument lists."""
    profiles = [p for p in args.profiles.split(",") if p]
    scenarios = [s for s in args.scenarios.split(",") if s]
    layouts = [x for x in args.layouts.split(",") if x]
    runs = []
    if "pods" in scenarios:
        for layout in layouts:
            for profile in profiles:
                runs.append(["--scenario", "pods", "--layout", layout, "--profile", profile])
    if "imagepulljob" in scenarios:
        for profile in profiles:
            runs.append(["--scenario", "imagepulljob", "--profile", profile])
        if "fast" in profiles and not args.parallelism and not args.quick:
            runs.append(["--scenario", "imagepulljob", "--profile", "fast", "--parallelism", "1"])
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller run, under a minute")
    ap.add_argument("--profiles", default="fast,realistic")
    ap.add_argument("--scenarios", default="pods,imagepulljob")
    ap.add_argument("--layouts", default="process,inproc", help="where the pods scenario's cluster runs")
    ap.add_argument("--pods", type=int, help="pods to create (default 100, quick 30)")
    ap.add_argument("--pod-nodes", type=int, default=1, help="nodes of the pods scenario's cluster")
    ap.add_argument("--client-threads", type=int, default=8)
    ap.add_argument("--nodes", type=int, help="nodes of the ImagePullJob scenario (default 5000, quick 1000)")
    ap.add_argument("--parallelism", help="ImagePullJob parallelism (int or N%%; default: the node count)")
    ap.add_argument("--image", default="busybox:1.36")
    ap.add_argument("--out", default=str(RESULTS), help="folder for emulator.json / emulator.md")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--profile", help=argparse.SUPPRESS)
    ap.add_argument("--layout", default="process", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.parallelism and not args.parallelism.endswith("%"):
        args.parallelism = int(args.parallelism)
    args.pods = args.pods or (30 if args.quick else 100)
    args.nodes = args.nodes or (1000 if args.quick else 5000)
    if args.child:
        child(args)
        return

    info = machine()
    print(f"machine: {info['cpus']} CPUs, {info['cpu_model']}, {info['memory']}, Python {info['python']}")
    common = ["--pods", str(args.pods), "--pod-nodes", str(args.pod_nodes), "--image", args.image]
    common += ["--client-threads", str(args.client_threads), "--nodes", str(args.nodes)]
    if args.parallelism:
        common += ["--parallelism", str(args.parallelism)]
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for run in plan(args):
        print("running " + " ".join(run[1::2]) + " ...", flush=True)
        r = spawn([*common, *run])
        results.append(r)
        print("  " + ", ".join(f"{k}={fmt(v, 3)}" for k, v in r.items() if k != "scenario"), flush=True)
    total = time.perf_counter() - t0
    md = table(results)
    print()
    print(md)
    print(f"total benchmark time: {total:.1f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python " + " ".join(["bench/bench_emulator.py", *sys.argv[1:]])
    doc = {
        "command": cmd,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "total_s": total,
        "results": results,
    }
    (out / "emulator.json").write_text(json.dumps(doc, indent=2) + "\n")
    header = (
        f"Emulator benchmark: `{cmd}` on {info['cpus']} CPUs ({info['cpu_model']}), {info['memory']} RAM, "
        f"Python {info['python']}, kubernetes client {info['kubernetes_client']}, {doc['date']}.\n\n"
    )
    (out / "emulator.md").write_text(header + md)
    print(f"wrote {out / 'emulator.json'} and {out / 'emulator.md'}")


if __name__ == "__main__":
    main()
