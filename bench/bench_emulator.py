"""Benchmark of the local cluster emulator itself (not a timed test): how fast it turns work into status.

    python bench/bench_emulator.py            # full run (~1-2 min on 2 cores)
    python bench/bench_emulator.py --quick    # smaller run (< 1 min)

Scenarios, each in both latency profiles (`fast`: no modeled delays; `realistic`: scheduling, sandbox, image
pull, container start and kruise-daemon report delays, see `airflow_kruise_chain/local/profiles.py`):

1. pods: through the real `kubernetes` client, create P pods (one busybox:1.36 container `sleep 3600` each)
   from a few client threads as fast as possible; a watch (opened at the list's resourceVersion, so nothing is
   missed) records when each pod is first reported Running. Reports pods/s (P / time from first create to last
   Running) and the p50/p95 create->Running latency, then deletes them all and times the deletion (until the
   watch has seen every DELETED).
2. imagepulljob: start a cluster of N nodes (5,000; start-up time measured), create one ImagePullJob
   (apps.kruise.io/v1alpha1, busybox:1.36, no selector = every node, parallelism = N) through the real client,
   and watch it until `status.completionTime` is set. Reports desired/succeeded/failed, the NodeImage status
   writes the kruise-daemon made, wall time and the peak RSS of the process.

Every scenario runs in its own subprocess so that peak RSS and start-up are per scenario. Results go to
`bench/results/emulator.json` and `bench/results/emulator.md`.
"""

from __future__ import annotations

import argparse
import json
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
def peak_rss_mib() -> float:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
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


def start_cluster(profile: str, nodes: int, root: str):
    from airflow_kruise_chain.local import ClusterConfig, LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(ClusterConfig(profile=profile, nodes=nodes, root=root))
    cluster.start()
    return cluster, time.perf_counter() - t0


def api_client(cluster: Any, root: str, pool: int = 16):
    from kubernetes import client, config

    path = cluster.write_kubeconfig(Path(root) / "kubeconfig")
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


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


def run_pods(profile: str, count: int, nodes: int, workers: int) -> dict[str, Any]:
    from kubernetes import client, watch

    with tempfile.TemporaryDirectory(prefix="bench-pods-") as root:
        cluster, startup = start_cluster(profile, nodes, root)
        try:
            api = api_client(cluster, root, pool=workers + 2)
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
                except BaseException as e:  # pragma: no cover - reported below
                    watch_error.append(e)
                    all_running.set()
                    all_deleted.set()
                finally:
                    w.stop()

            t_watch = threading.Thread(target=watcher, daemon=True)
            t_watch.start()

            def create(name: str) -> None:
                created[name] = time.perf_counter()
                resp = core.create_namespaced_pod(ns, pod_body(name, run), _preload_content=False)
                resp.read()  # skip the client's model deserialisation (client-side cost, not the emulator's)
                resp.release_conn()

            t0 = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(create, names))
            t_created = time.perf_counter()
            if not all_running.wait(300):
                raise RuntimeError(f"only {len(running)}/{count} pods Running after 300 s")
            t_running = time.perf_counter()
            if watch_error:
                raise watch_error[0]
            latencies = [running[n] - created[n] for n in names]

            def delete(name: str) -> None:
                resp = core.delete_namespaced_pod(name, ns, _preload_content=False)
                resp.read()
                resp.release_conn()

            d0 = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(delete, names))
            if not all_deleted.wait(300):
                raise RuntimeError(f"only {len(deleted)}/{count} pods deleted after 300 s")
            d1 = time.perf_counter()
            if watch_error:
                raise watch_error[0]
            api.close()
            return {
                "scenario": "pods",
                "profile": profile,
                "pods": count,
                "nodes": nodes,
                "client_threads": workers,
                "cluster_start_s": startup,
                "create_calls_s": t_created - t0,
                "create_rate_per_s": count / (t_created - t0),
                "to_running_s": t_running - t0,
                "pods_running_per_s": count / (t_running - t0),
                "latency_p50_s": percentile(latencies, 50),
                "latency_p95_s": percentile(latencies, 95),
                "latency_max_s": max(latencies),
                "delete_s": d1 - d0,
                "pods_deleted_per_s": count / (d1 - d0),
                "peak_rss_mib": peak_rss_mib(),
            }
        finally:
            cluster.stop()


# -- scenario 2: ImagePullJob fan-out -------------------------------------------------------------------
def run_imagepulljob(profile: str, nodes: int, image: str, parallelism: int | str) -> dict[str, Any]:
    from kubernetes import client, watch

    from airflow_kruise_chain.local import resources as R

    with tempfile.TemporaryDirectory(prefix="bench-ipj-") as root:
        rss0 = current_rss_mib()
        cluster, startup = start_cluster(profile, nodes, root)
        rss_started = current_rss_mib()
        try:
            counts = {"nodeimage_status_writes": 0, "nodeimage_writes": 0, "job_status_writes": 0}

            def count(kind: str, res: Any, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
                if res is R.NODE_IMAGES and old is not None:
                    counts["nodeimage_writes"] += 1
                    if obj.get("status") != old.get("status"):
                        counts["nodeimage_status_writes"] += 1
                elif res is R.IMAGE_PULL_JOBS and old is not None and obj.get("status") != old.get("status"):
                    counts["job_status_writes"] += 1

            cluster.call(lambda: cluster.store.listen(count))
            api = api_client(cluster, root)
            custom = client.CustomObjectsApi(api)
            ns, name = "default", f"prewarm-{uuid.uuid4().hex[:6]}"
            rv = custom.list_namespaced_custom_object(GROUP, "v1alpha1", ns, "imagepulljobs")["metadata"][
                "resourceVersion"
            ]
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
                timeout_seconds=600,
                deserialize=False,
            ):
                status = ev["object"].get("status") or {}
                if status.get("completionTime"):
                    w.stop()
                    break
            t_done = time.perf_counter()
            if not status.get("completionTime"):
                raise RuntimeError(f"ImagePullJob did not complete: {status}")
            writes = cluster.call(lambda: dict(counts))
            api.close()
            return {
                "scenario": "imagepulljob",
                "profile": profile,
                "nodes": nodes,
                "image": image,
                "parallelism": parallelism,
                "cluster_start_s": startup,
                "create_call_s": t_created - t0,
                "job_wall_s": t_done - t0,
                "nodes_per_s": (status.get("succeeded") or 0) / (t_done - t0),
                "desired": status.get("desired"),
                "succeeded": status.get("succeeded"),
                "failed": status.get("failed"),
                **writes,
                "rss_before_start_mib": rss0,
                "rss_after_start_mib": rss_started,
                "peak_rss_mib": peak_rss_mib(),
            }
        finally:
            cluster.stop()


# -- driver ---------------------------------------------------------------------------------------------
def child(args: argparse.Namespace) -> None:
    import logging

    logging.basicConfig(level=logging.WARNING)
    if args.scenario == "pods":
        result = run_pods(args.profile, args.pods, args.pod_nodes, args.client_threads)
    else:
        par: int | str = args.parallelism or args.nodes
        result = run_imagepulljob(args.profile, args.nodes, args.image, par)
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


def table(results: list[dict[str, Any]]) -> str:
    pods = [r for r in results if r["scenario"] == "pods"]
    jobs = [r for r in results if r["scenario"] == "imagepulljob"]
    lines = []
    if pods:
        p = pods[0]
        lines += [
            f"**Pods to Running** ({p['pods']} pods, busybox:1.36 `sleep 3600`, {p['nodes']} node(s), "
            f"{p['client_threads']} client threads, real `kubernetes` client, watch-timed)",
            "",
            "| profile | create calls/s | pods Running/s | p50 create→Running | p95 create→Running "
            "| all Running | delete all (to DELETED) | peak RSS |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in pods:
            lines.append(
                f"| {r['profile']} | {fmt(r['create_rate_per_s'], 0)} | {fmt(r['pods_running_per_s'], 1)} "
                f"| {fmt(r['latency_p50_s'] * 1000, 0)} ms | {fmt(r['latency_p95_s'] * 1000, 0)} ms "
                f"| {fmt(r['to_running_s'])} s | {fmt(r['delete_s'])} s | {fmt(r['peak_rss_mib'], 0)} MiB |"
            )
        lines.append("")
    if jobs:
        j = jobs[0]
        lines += [
            f"**ImagePullJob fan-out** ({fmt(j['nodes'])} nodes, image {j['image']}, no selector, "
            f"parallelism {fmt(j['parallelism'])}, created and watched through the real client)",
            "",
            "| profile | cluster start-up | create → completionTime | nodes/s | desired | succeeded | failed "
            "| NodeImage status writes | job status writes | RSS after start-up | peak RSS |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in jobs:
            lines.append(
                f"| {r['profile']} | {fmt(r['cluster_start_s'])} s | {fmt(r['job_wall_s'])} s "
                f"| {fmt(r['nodes_per_s'], 0)} | {fmt(r['desired'])} | {fmt(r['succeeded'])} "
                f"| {fmt(r['failed'])} | {fmt(r['nodeimage_status_writes'])} | {fmt(r['job_status_writes'])} "
                f"| {fmt(r['rss_after_start_mib'], 0)} MiB | {fmt(r['peak_rss_mib'], 0)} MiB |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller run, under a minute")
    ap.add_argument("--profiles", default="fast,realistic")
    ap.add_argument("--pods", type=int, help="pods to create (default 100, quick 30)")
    ap.add_argument("--pod-nodes", type=int, default=1, help="nodes of the pods scenario's cluster")
    ap.add_argument("--client-threads", type=int, default=8)
    ap.add_argument("--nodes", type=int, help="nodes of the ImagePullJob scenario (default 5000, quick 1000)")
    ap.add_argument("--parallelism", help="ImagePullJob parallelism (int or N%%; default: the node count)")
    ap.add_argument("--image", default="busybox:1.36")
    ap.add_argument("--scenarios", default="pods,imagepulljob")
    ap.add_argument("--out", default=str(RESULTS), help="folder for emulator.json / emulator.md")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scenario", help=argparse.SUPPRESS)
    ap.add_argument("--profile", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.parallelism and not args.parallelism.endswith("%"):
        args.parallelism = int(args.parallelism)
    args.pods = args.pods or (30 if args.quick else 100)
    args.nodes = args.nodes or (1000 if args.quick else 5000)
    if args.child:
        child(args)
        return

    profiles = [p for p in args.profiles.split(",") if p]
    scenarios = [s for s in args.scenarios.split(",") if s]
    info = machine()
    print(f"machine: {info['cpus']} CPUs, {info['cpu_model']}, {info['memory']}, Python {info['python']}")
    results: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    common = ["--pods", str(args.pods), "--pod-nodes", str(args.pod_nodes)]
    common += [
        "--client-threads",
        str(args.client_threads),
        "--nodes",
        str(args.nodes),
        "--image",
        args.image,
    ]
    if args.parallelism:
        common += ["--parallelism", str(args.parallelism)]
    for scenario in scenarios:
        for profile in profiles:
            print(f"running {scenario} / {profile} ...", flush=True)
            r = spawn([*common, "--scenario", scenario, "--profile", profile])
            results.append(r)
            print("  " + ", ".join(f"{k}={fmt(v, 3)}" for k, v in r.items() if k not in ("scenario",)))
    total = time.perf_counter() - t0
    md = table(results)
    print()
    print(md)
    print(f"total benchmark time: {total:.1f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = "python bench/bench_emulator.py" + (" --quick" if args.quick else "")
    doc = {
        "command": cmd,
        "argv": sys.argv[1:],
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": info,
        "total_s": total,
        "results": results,
    }
    (out / "emulator.json").write_text(json.dumps(doc, indent=2) + "\n")
    header = (
        f"Emulator benchmark: `{cmd}` on {info['cpus']} CPUs ({info['cpu_model']}), {info['memory']} RAM, "
        f"Python {info['python']}, {doc['date']}.\n\n"
    )
    (out / "emulator.md").write_text(header + md)
    print(f"wrote {out / 'emulator.json'} and {out / 'emulator.md'}")


if __name__ == "__main__":
    main()
