"""Benchmark: the same N-stage pipeline run every way on the local cluster, side by side (issue 16).

    python bench/pipelines.py            # full run: both profiles, every mode, every workload (see --help)
    python bench/pipelines.py --quick    # fast profile, N = 3 and 10, distinct images, 10 pipelines of N = 3
    python bench/pipelines.py --quick --profiles fast,realistic --workloads distinct,one --copies 1

Modes (same stage program, same data, stage images `ghcr.io/airflow-kruise-chain/bench-stage:<k>`):

- `noop`: Airflow's floor: the same DAG shape of Python tasks that only sleep the stage program's pause.
- `chain`: a `KruiseChain` (provider defaults, prewarm); plus one mode per option the provider offers
  (detected from KruiseChain's signature: the prepared next slot flipped, `chain-deferrable` = deferrable
  with the provider's defaults, `chain-defer-at-once` = also `defer_after=0`, every stage handed to the
  trigger right after its swap, start_from_trigger);
  `--list-modes` shows them. Data in the chain's scratch `emptyDir`.
- `kpo` / `kpo1`: one `KubernetesPodOperator` per stage (apache-airflow-providers-cncf-kubernetes), default
  settings / `startup_check_interval_seconds=1` (tuned). Data through a `hostPath` folder standing in for a
  ReadWriteMany PVC (the local cluster has none).
- `all`: ONE pod whose N containers all start at once and share an `emptyDir`; container k polls (every
  0.1 s) for stage k-1's done-file, then runs the stage. One `KubernetesPodOperator` task, N-container spec.
- `podexec`: ONE pod of the one image, created by the DAG's first task; then one cncf.kubernetes
  `KubernetesPodExecOperator` per stage (apache/airflow#71244: an exec into the running container, no pod
  start); a teardown task deletes it. Workload `one` only (an exec cannot change the image or a stage's
  resources, and seals nothing between stages); other workloads are left out of the plan. Data in the pod's
  `emptyDir`; the stage program's BENCH lines also go to a file (an exec's output reaches no container log).
DAGs: bench/pipeline_dags.py; DAG processes: bench/dag_processes.py.

Workloads (`--workloads`): `distinct` images per stage, `one` image for all, `alternating` between two,
`skewed` resources (the middle stage requests 1Gi, the others 64Mi; uniform: 64Mi each), `long` (5 s stages
instead of 0.2 s).

Every pipeline is an Airflow DAG run with `dag.test()` in a DAG process of its own (own AIRFLOW_HOME/SQLite,
warmed up with one throw-away DAG run, reused across scenarios); a fresh local cluster per scenario runs in
this process and serves them over HTTP. "10 at once" runs 10 DAG processes against one cluster, released
together. Everything is measured from what the cluster and Airflow record, never from provider internals:
- wall: the `dag.test()` call (setup, prewarm and teardown included; Python start-up and parsing not).
- overhead per stage: stage k+1's program start minus stage k's end, from the timestamps the stage program
  prints, read from the containers' CRI log files on the node. Split at the first API request (request log
  of the API server) at or after both stage k's end and task k+1's start_date (Airflow's task instance):
  Airflow's part before it, the chain's part (or KPO's) after it. Airflow's part split again at the task
  instances' records: task tail (stage k's end -> task k's end_date), Airflow's gap (task k's end_date ->
  task k+1's start_date) and task head (task k+1's start_date -> that request; a no-op task's: -> its stage
  start).
- back-off: container-seconds waiting in CrashLoopBackOff (the pod statuses the pod watch saw) and BackOff
  events at the end.
- peak RSS: the metrics API (what metrics-server serves: live in the fast profile, its 15 s scrapes in the
  realistic one) read every 0.1 s, peak of the sum over every container of every pod; "not measured" when
  it had no reading during the run. A stage's own peak: its container's largest reading whose window lies
  within the stage (the provider's rule), else not measured.
- reserved memory: GiB·s of memory requests of the pods that exist (bound, not Succeeded/Failed), from every
  version of every pod (a pod watch: the specs and the in-place resizes, no metrics), as the scheduler
  counts them.
- API requests per stage by verb (the benchmark's own sampling excluded; the metrics API's reads, the stage
  monitor's memory samples, counted apart as `metrics`); pods created (201 answers).
Results go to bench/results/<out>.{md,json}; MET/MISSED lines against issue 16's targets (bench/figures.py).
The run under the real scheduler is bench/scheduler.py.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository on the path, for `bench.figures`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import figures
from bench.dag_processes import Workers, tail
from bench.observe import Sampler, reserved_memory
from bench.pipeline_dags import (
    DAG_HEADER,
    MEMORY_MB,
    RECORDS,
    WORKLOADS,
    applicable,
    chain_variants,
    workload_label,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
GRACE_WAIT = 25.0  # a gap this long is a kill that waited out the 30 s grace period (docs/how-it-works.md)
UA = "kruise-chain-bench"
BASE_MODES = ("noop", "chain", "kpo", "kpo1", "all", "podexec")
MODE_NAMES = {
    "noop": "no-op tasks (floor)",
    "chain": "chain",
    "chain-deferrable": "chain, deferrable (provider defaults)",
    "chain-defer-at-once": "chain, deferred at once",
    "chain-annotation": "chain, go by annotation only",
    "kpo": "KPO, pod per task",
    "kpo1": "KPO, startup check 1 s",
    "all": "all at once",
    "podexec": "KubernetesPodExecOperator, one pod",
}


def expected_checksum(n: int) -> str:
    """cksum of the last stage's file, computed here without the cluster."""
    values = [(i, (i * 7919) % 1000003) for i in range(1, RECORDS + 1)]
    for k in range(2, n + 1):
        values = [(i, (v * 31 + k) % 1000003) for i, v in values]
    text = "".join(f"{i} {v}\n" for i, v in values).encode()
    return subprocess.run(["cksum"], input=text, capture_output=True, check=True).stdout.split()[0].decode()


# -- observing the cluster -------------------------------------------------------------------------------
class Tap:
    """Records every API request (the local cluster's request hook, which answers None: nothing changes)."""

    def __init__(self) -> None:
        self.records: list[tuple[float, str, str, str, str]] = []

    def __call__(self, request: Any) -> None:
        self.records.append(
            (
                time.time(),
                request.method,
                request.path,
                request.query_string,
                request.headers.get("User-Agent", ""),
            )
        )
        return None


def classify(method: str, path: str, query: str) -> str:
    """write / watch / log / list / get / discovery."""
    if method != "GET":
        return "write"
    if re.search(r"(^|&)watch=(true|1)(&|$)", query, re.IGNORECASE) or "/watch/" in path:
        return "watch"
    rest = figures.resource_parts(path)
    if rest is None:
        return "discovery"
    if rest[0] == "namespaces" and len(rest) >= 3:
        rest = rest[2:]
    if rest[-1] == "log" and len(rest) == 3:
        return "log"
    return "list" if len(rest) == 1 else "get"


LINE = re.compile(r"^(\S+) (stdout|stderr) [PF] BENCH (start|end) (.*)$")


def read_timeline(cluster_root: Path) -> list[dict[str, Any]]:
    """Every BENCH line of every container instance, from the node's CRI log files."""
    events = []
    for log in (cluster_root / "pods").glob("*/containers/*/*/0.log"):
        container = log.parent.parent.name
        for raw in log.read_text(errors="replace").splitlines():
            m = LINE.match(raw)
            if not m:
                continue
            fields = dict(kv.split("=", 1) for kv in m.group(4).split() if "=" in kv)
            events.append({"kind": m.group(3), "container": container, "uid": log.parents[3].name, **fields})
    return events


def read_noop_timeline(shared: Path) -> list[dict[str, Any]]:
    """The BENCH lines written to files in the runs' data folders: the no-op tasks', and the podexec stages'
    (`marks.log`)."""
    events = []
    for log in [*shared.glob("*/noop-*.log"), *shared.glob("*/marks.log")]:
        for raw in log.read_text(errors="replace").splitlines():
            kind, rest = raw.removeprefix("BENCH ").split(" ", 1)
            fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
            events.append({"kind": kind, "container": "", "uid": "", **fields})
    return events


# -- one scenario ----------------------------------------------------------------------------------------
def create_namespace(url: str, name: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    conn.request(
        "POST",
        "/api/v1/namespaces",
        body=body,
        headers={"Content-Type": "application/json", "User-Agent": UA},
    )
    resp = conn.getresponse()
    resp.read()
    conn.close()
    if resp.status not in (200, 201, 409):
        raise RuntimeError(f"creating namespace {name}: HTTP {resp.status}")


def run_scenario(
    profile: str,
    mode: str,
    n: int,
    copies: int,
    workers: Workers,
    work: Path,
    timeout: float,
    workload: tuple[str, str, float] = WORKLOADS["distinct"],
    chain_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from kruise_local import ClusterConfig, LocalCluster

    procs = workers.ensure(copies)
    label = workload_label(*workload)
    root = work / f"{profile}-{mode}-{label.replace('/', '-')}-n{n}-x{copies}"
    root.mkdir(parents=True)
    with LocalCluster(ClusterConfig(profile=profile, root=str(root / "cluster"))) as cluster:
        cluster.write_kubeconfig(workers.kubeconfig)
        tap = Tap()
        cluster.fault = tap  # the request hook: records, never answers
        jobs = []
        for i, w in enumerate(procs):
            pipeline = f"{profile}-{mode}-{label.replace('/', '-')}-n{n}-{i}"
            namespace = f"bench-{i}"
            create_namespace(cluster.url, namespace)
            data = root / "shared" / pipeline
            data.mkdir(parents=True)
            data.chmod(0o777)
            job = {
                "dag_source": DAG_HEADER
                + f"dag = build_dag({mode!r}, {n}, {pipeline!r}, {namespace!r}, {str(data)!r}, "
                f"{tuple(workload)!r}, {chain_options or {}!r})\n",
                "ready": str(root / f"ready-{i}"),
                "go": str(root / "go"),
                "result": str(root / f"result-{i}.json"),
            }
            workers.submit(w, job)
            jobs.append({"pipeline": pipeline, "namespace": namespace, "worker": w, **job})
        deadline = time.time() + 120
        while not all(Path(j["ready"]).exists() for j in jobs):
            dead = [j for j in jobs if j["worker"]["proc"].poll() is not None]
            if dead or time.time() > deadline:
                raise RuntimeError(f"DAG process not ready: {tail(jobs[0]['worker']['dir'] / 'worker.log')}")
            time.sleep(0.02)
        sampler = Sampler(cluster.url)
        sampler.start()
        time.sleep(0.3)  # a baseline sample before anything starts
        (root / "go").touch()
        deadline = time.time() + timeout
        while not all(Path(j["result"]).exists() for j in jobs):
            dead = [j for j in jobs if j["worker"]["proc"].poll() is not None]
            if dead or time.time() > deadline:
                sampler.stop()
                raise RuntimeError(
                    ("a DAG process died" if dead else f"timeout ({timeout:.0f} s)")
                    + f": {tail((dead or jobs)[0]['worker']['dir'] / 'worker.log')}"
                )
            time.sleep(0.05)
        time.sleep(0.3)
        sampler.stop()
        backoff_events = sampler.backoff_events()
        results = [
            {
                **json.loads(Path(j["result"]).read_text()),
                "pipeline": j["pipeline"],
                "namespace": j["namespace"],
            }
            for j in jobs
        ]
        timeline = read_timeline(root / "cluster") + read_noop_timeline(root / "shared")
        pods_created = sum(
            1 for m, p, code in cluster.audit if m == "POST" and p.endswith("/pods") and code == 201
        )
        requests = [(t, m, p, q) for t, m, p, q, ua in tap.records if not ua.startswith(UA)]
        (root / "requests.log").write_text("".join(f"{t:.6f} {m} {p}?{q}\n" for t, m, p, q in requests))
        cluster.fault = None
    row = analyse(profile, mode, n, copies, results, timeline, sampler, requests, pods_created)
    row["workload"] = label
    row["backoff_events"] = backoff_events
    return row


# -- analysis --------------------------------------------------------------------------------------------
def analyse(
    profile: str,
    mode: str,
    n: int,
    copies: int,
    results: list[dict[str, Any]],
    timeline: list[dict[str, Any]],
    sampler: Sampler,
    requests: list[tuple[float, str, str, str]],
    pods_created: int,
) -> dict[str, Any]:
    expected = expected_checksum(n)
    end = max((r["end"] for r in results), default=None)
    problems = []
    by_pipeline: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    starts: Counter[tuple[str, int]] = Counter()
    for e in timeline:
        key = (e["id"], int(e["stage"]))
        if e["kind"] == "start":
            starts[key] += 1
        stage = by_pipeline[e["id"]].setdefault(int(e["stage"]), {})
        stage[e["kind"]] = float(e["t"])
        stage["pod"], stage["container"] = stage.get("pod") or e.get("pod"), e["container"]
        if e["kind"] == "end":
            stage["cksum"] = e.get("cksum")
    gaps: list[float] = []
    split_client: list[float] = []
    split_cluster: list[float] = []
    task_tails: list[float] = []  # stage k's end -> task k's end_date
    task_heads: list[float] = []  # task k+1's start_date -> its first API request (no-op: its stage start)
    own_parts: list[float] = []  # that request -> the go (chain: pod patch or exec; KPO: pod create)
    kubelet_parts: list[float] = []  # the go -> stage k+1's start (node, kubelet, runner)
    startup: list[float] = []
    per_pipeline = []
    for r in results:
        if r["state"] != "success":
            problems.append(
                f"{r['pipeline']}: DAG run {r['state']}: "
                + ", ".join(f"{t}={s}" for t, s in r["tasks"].items() if s != "success")
            )
        stages = by_pipeline.get(r["pipeline"], {})
        complete = all("start" in stages.get(k, {}) and "end" in stages.get(k, {}) for k in range(1, n + 1))
        if not complete:
            problems.append(f"{r['pipeline']}: only {len(stages)} of {n} stages recorded")
            continue
        reruns = sum(starts[(r["pipeline"], k)] - 1 for k in range(1, n + 1))
        if reruns:
            problems.append(f"{r['pipeline']}: {reruns} stage re-runs")
        if mode != "noop" and stages[n].get("cksum") != expected:
            problems.append(
                f"{r['pipeline']}: final checksum {stages[n].get('cksum')} != expected {expected}"
            )
        pgaps = [stages[k + 1]["start"] - stages[k]["end"] for k in range(1, n)]
        gaps += pgaps
        # the pipeline's requests: its namespace's, plus cluster-scoped ones (discovery) when it ran alone
        mine_full = [
            (t, m, p)
            for t, m, p, _ in requests
            if f"/namespaces/{r['namespace']}/" in p + "/" or (copies == 1 and "/namespaces/" not in p)
        ]
        mine = [t for t, _, _ in mine_full]
        ti = r.get("ti") or {}
        for k in range(1, n):
            if mode == "all":
                break  # one task: no switch between stages for Airflow or a request to make
            task_start = (ti.get(f"s{k + 1:02d}") or [None])[0]
            split = figures.split_gap(stages[k]["end"], stages[k + 1]["start"], task_start, mine)
            if split is not None:
                split_client.append(split[0])
                split_cluster.append(split[1])
                first = stages[k]["end"] + split[0]
                go = figures.go_request(first, stages[k + 1]["start"], mine_full)
                if go is not None:
                    own_parts.append(go - first)
                    kubelet_parts.append(stages[k + 1]["start"] - go)
            elif mode == "noop":
                split_client.append(stages[k + 1]["start"] - stages[k]["end"])
            else:
                continue
            # Airflow's part by the task instances' records: task k's tail, Airflow's gap, task k+1's head
            until = stages[k]["end"] + split[0] if split is not None else stages[k + 1]["start"]
            task_end = (ti.get(f"s{k:02d}") or [None, None])[1]
            steps = figures.airflow_steps(stages[k]["end"], task_end, task_start, until)
            if steps is not None:
                task_tails.append(steps[0])  # steps[1], Airflow's gap, is task_gap_median_s (every pair)
                task_heads.append(steps[2])
        startup.append(stages[1]["start"] - r["start"])
        per_pipeline.append(
            {
                "pipeline": r["pipeline"],
                "wall_s": r["end"] - r["start"],
                "first_stage_after_s": stages[1]["start"] - r["start"],
                "after_last_stage_s": r["end"] - stages[n]["end"],
                "stage_seconds": [stages[k]["end"] - stages[k]["start"] for k in range(1, n + 1)],
                "gaps_s": pgaps,
            }
        )
    # memory: peaks as metrics-server served them (None: not measured), reservations from the pods' versions
    ns_of = {r["pipeline"]: r["namespace"] for r in results}
    memory = figures.memory_figures(sampler.samples, sampler.readings, by_pipeline, ns_of)
    reserved = figures.reserved_figures(sampler.events, reserved_memory, list(ns_of.values()), end)
    # API requests
    kinds = Counter(classify(m, p, q) for _, m, p, q in requests)
    verbs = Counter(figures.request_group(m, p, q) for _, m, p, q in requests)
    ti_gaps = []  # Airflow's record: task k+1 start - task k end
    for r in results:
        ti = r.get("ti") or {}
        for k in range(1, n):
            a, b = ti.get(f"s{k:02d}"), ti.get(f"s{k + 1:02d}")
            if a and b and a[1] is not None and b[0] is not None:
                ti_gaps.append(b[0] - a[1])
    paths = Counter(
        f"{m} {re.sub(r'/namespaces/[^/]+', '/namespaces/NS', p)}"
        + (" (watch)" if classify(m, p, q) == "watch" else "")
        for _, m, p, q in requests
    )
    stages_total = n * copies
    walls = [r["end"] - r["start"] for r in results]
    row = {
        "profile": profile,
        "mode": mode,
        "stages": n,
        "copies": copies,
        "wall_s": max(r["end"] for r in results) - min(r["start"] for r in results) if results else None,
        "wall_mean_s": statistics.fmean(walls) if walls else None,
        "first_stage_after_s": statistics.fmean(startup) if startup else None,
        "overhead_median_s": statistics.median(gaps) if gaps else None,
        "overhead_p95_s": figures.percentile(gaps, 95) if gaps else None,
        "overhead_max_s": max(gaps) if gaps else None,
        "overhead_grace_waits": sum(1 for g in gaps if g >= GRACE_WAIT),
        "overhead_median_without_grace_waits_s": statistics.median([g for g in gaps if g < GRACE_WAIT])
        if any(g < GRACE_WAIT for g in gaps)
        else None,
        "overhead_p95_without_grace_waits_s": figures.percentile([g for g in gaps if g < GRACE_WAIT], 95),
        "teardown_grace_waits": sum(1 for p in per_pipeline if p["after_last_stage_s"] >= GRACE_WAIT),
        "overhead_to_request_median_s": figures.median(split_client),
        "overhead_to_request_p95_s": figures.percentile(split_client, 95) if split_client else None,
        "overhead_request_to_start_median_s": figures.median(split_cluster),
        "overhead_request_to_start_p95_s": figures.percentile(split_cluster, 95) if split_cluster else None,
        "chain_part_median_s": figures.median(split_cluster) if mode != "noop" else 0.0,
        "own_part_median_s": figures.median(own_parts),
        "own_part_p95_s": figures.percentile(own_parts, 95) if own_parts else None,
        "kubelet_part_median_s": figures.median(kubelet_parts),
        "kubelet_part_p95_s": figures.percentile(kubelet_parts, 95) if kubelet_parts else None,
        "task_gap_median_s": figures.median(ti_gaps),
        "task_tail_median_s": figures.median(task_tails),
        "task_tail_p95_s": figures.percentile(task_tails, 95) if task_tails else None,
        "task_head_median_s": figures.median(task_heads),
        "task_head_p95_s": figures.percentile(task_heads, 95) if task_heads else None,
        "backoff_container_s": figures.integrate(
            [(t, sum(v.values())) for t, v in figures.pod_series(sampler.events, figures.backoff_count)], end
        ),
        **reserved,
        **memory,
        "metrics_samples": len(sampler.samples),
        "pod_relists": sampler.relists,
        "api_requests": len(requests),
        "api_requests_per_stage": len(requests) / stages_total,
        "api_by_kind_per_stage": {k: v / stages_total for k, v in sorted(kinds.items())},
        "api_by_verb_per_stage": {k: v / stages_total for k, v in sorted(verbs.items())},
        "api_by_path": dict(paths.most_common()),
        "pods_created": pods_created,
        "expected_checksum": expected,
        "pipelines": per_pipeline,
        "problems": problems,
    }
    return row


# -- report ----------------------------------------------------------------------------------------------
def fmt(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


COLUMNS = (
    "profile", "workload", "mode", "N", "at once", "wall s", "overhead/stage s median (p95)",
    "Airflow part s median (p95)", "chain part s median (p95)",
    "chain part: to the go / go to start s median (p95)",
    "Airflow part: task tail / Airflow gap / task head s median",
    "back-off container·s / events", "peak RSS MiB (metrics-server; stages measured)",
    "reserved GiB·s per pipeline (peak MiB)",
    "API req/stage",
    "get / list / watch / create / patch / update / delete / metrics / prewarm per stage", "pods", "ok",
)  # fmt: skip
VERBS = ("get", "list", "watch", "create", "patch", "update", "delete", "metrics", "prewarm")


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        verbs = r["api_by_verb_per_stage"]
        wall = fmt(r["wall_s"], 1)
        if r["copies"] > 1:
            wall += f" ({fmt(r['wall_mean_s'], 1)} each)"
        cells = [
            r["profile"],
            r["workload"],
            MODE_NAMES.get(r["mode"], r["mode"]),
            str(r["stages"]),
            str(r["copies"]),
            wall,
            f"{fmt(r['overhead_median_s'], 3)} ({fmt(r['overhead_p95_s'], 3)})",
            f"{fmt(r['overhead_to_request_median_s'], 3)} ({fmt(r['overhead_to_request_p95_s'], 3)})",
            f"{fmt(r['overhead_request_to_start_median_s'], 3)} "
            f"({fmt(r['overhead_request_to_start_p95_s'], 3)})",
            f"{fmt(r.get('own_part_median_s'), 3)} ({fmt(r.get('own_part_p95_s'), 3)}) / "
            f"{fmt(r.get('kubelet_part_median_s'), 3)} ({fmt(r.get('kubelet_part_p95_s'), 3)})",
            " / ".join(
                fmt(r.get(k), 3) for k in ("task_tail_median_s", "task_gap_median_s", "task_head_median_s")
            ),
            f"{fmt(r['backoff_container_s'], 1)} / {r['backoff_events']}",
            figures.memory_cell(r),
            f"{fmt(r['reserved_gib_s'], 2)} ({fmt(r['reserved_peak_mib'], 0)})",
            fmt(r["api_requests_per_stage"], 1),
            " / ".join(fmt(verbs.get(k, 0.0), 1) for k in VERBS),
            str(r["pods_created"]),
            "yes" if not r["problems"] else "NO",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    cpu, mem = "", ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    from importlib.metadata import version

    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory": mem,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "airflow": version("apache-airflow"),
        "cncf_kubernetes": version("apache-airflow-providers-cncf-kubernetes"),
    }


def plan(args: argparse.Namespace) -> list[tuple[str, str, str, int, int]]:
    """(profile, mode, workload, N, pipelines at once) of every scenario, in order. Without --stages the
    workloads other than `distinct` run at N = 10 only (N = 3 with --quick), to keep the full run short. A
    mode that cannot run a workload (podexec: one image only) is left out of it."""
    runs = []
    for profile in args.profiles:
        for workload in args.workloads:
            stages = args.stages
            if not args.stages_given and workload != "distinct":
                stages = [3] if args.quick else [10]
            for n in stages:
                for mode in args.modes:
                    if applicable(mode, WORKLOADS[workload]):
                        runs.append((profile, mode, workload, n, 1))
        if args.copies > 1:
            for mode in args.modes:
                if applicable(mode, WORKLOADS[args.workloads[0]]):
                    runs.append((profile, mode, args.workloads[0], args.copies_stages, args.copies))
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fast profile, N = 3 and 10, 10 pipelines of N = 3")
    ap.add_argument("--profiles", help="comma-separated (default fast,realistic; quick: fast)")
    ap.add_argument("--stages", help="comma-separated N (default 3,10,50; quick: 3,10)")
    ap.add_argument(
        "--modes",
        help="comma-separated, from noop, kpo, kpo1 (startup_check_interval_seconds=1), all, chain and the "
        "chain variants the provider offers (default: all of them; --list-modes shows them)",
    )
    ap.add_argument("--list-modes", action="store_true", help="print the modes this provider offers")
    ap.add_argument(
        "--workloads",
        help="comma-separated, from "
        + ", ".join(f"{k} ({workload_label(*v)})" for k, v in WORKLOADS.items())
        + " (default: all; quick: distinct)",
    )
    ap.add_argument(
        "--copies", type=int, default=10, help="pipelines at once in the concurrency rows (1: none)"
    )
    ap.add_argument("--copies-stages", type=int, help="N of the concurrency rows (default 10; quick: 3)")
    ap.add_argument("--timeout", type=float, default=2400, help="seconds allowed per scenario")
    ap.add_argument(
        "--out", help="file name stem under bench/results (default pipelines; quick: pipelines-quick)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, Airflow homes)")
    args = ap.parse_args()
    args.profiles = (args.profiles or ("fast" if args.quick else "fast,realistic")).split(",")
    args.stages_given = bool(args.stages)
    args.stages = [int(s) for s in (args.stages or ("3,10" if args.quick else "3,10,50")).split(",")]
    variants = chain_variants()
    modes = {**{m: {} for m in BASE_MODES}, **variants}
    if args.list_modes:
        print("\n".join(f"{m}: {MODE_NAMES.get(m, m)} {o or ''}" for m, o in modes.items()))
        return 0
    args.modes = args.modes.split(",") if args.modes else list(modes)
    args.workloads = (args.workloads or ("distinct" if args.quick else ",".join(WORKLOADS))).split(",")
    for m in args.modes:
        if m not in modes:
            ap.error(f"--modes: unknown mode {m!r}; this provider offers {', '.join(modes)}")
    for w in args.workloads:
        if w not in WORKLOADS:
            ap.error(f"--workloads: unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    args.copies_stages = args.copies_stages or (3 if args.quick else 10)
    stem = args.out or ("pipelines-quick" if args.quick else "pipelines")

    info = machine()
    print(
        f"machine: {info['cpus']} CPUs, {info['cpu_model']}, {info['memory']}, Python {info['python']}, "
        f"Airflow {info['airflow']}, cncf.kubernetes {info['cncf_kubernetes']}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="bench-pipelines-"))
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    failures = []
    workers = None
    try:
        workers = Workers(work)
        print(f"airflow db migrate: {time.perf_counter() - t0:.1f} s", flush=True)
        for profile, mode, workload, n, copies in plan(args):
            t = time.perf_counter()
            print(f"{profile:9s} {workload:11s} {mode:24s} N={n:<3d} x{copies:<3d} ...", end=" ", flush=True)
            try:
                row = run_scenario(
                    profile, mode, n, copies, workers, work, args.timeout, WORKLOADS[workload], modes[mode]
                )
            except Exception as e:  # one broken scenario must not lose the others
                print(f"FAILED: {e}", flush=True)
                failures.append(f"{profile} {workload} {mode} N={n} x{copies}: {e}")
                continue
            rows.append(row)
            print(
                f"{time.perf_counter() - t:5.1f} s: wall {fmt(row['wall_s'], 1)} s, overhead/stage "
                f"{fmt(row['overhead_median_s'], 3)} s (Airflow {fmt(row['overhead_to_request_median_s'], 3)}"
                f" = tail {fmt(row['task_tail_median_s'], 3)} + gap {fmt(row['task_gap_median_s'], 3)}"
                f" + head {fmt(row['task_head_median_s'], 3)}; + chain "
                f"{fmt(row['overhead_request_to_start_median_s'], 3)}), peak MiB "
                f"{figures.memory_cell(row)}, {fmt(row['reserved_gib_s'], 2)} GiB·s, back-off "
                f"{fmt(row['backoff_container_s'], 1)} s, "
                f"{fmt(row['api_requests_per_stage'], 1)} req/stage, {row['pods_created']} pods"
                + (f"; PROBLEMS: {row['problems']}" if row["problems"] else ""),
                flush=True,
            )
    finally:
        if workers is not None:
            workers.stop()
        if args.keep:
            print(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    total = time.perf_counter() - t0
    command = "python bench/pipelines.py" + "".join(f" {a}" for a in sys.argv[1:])
    md = table(rows)
    chain_modes = [m for m in args.modes if m.startswith("chain")]
    lines = figures.targets_v4(rows, chain_modes) + figures.targets(rows, chain_modes)
    header = (
        f"Pipelines benchmark: `{command}` on {info['cpus']} CPUs ({info['cpu_model']}), {info['memory']} "
        f"RAM, Python {info['python']}, Airflow {info['airflow']}, "
        f"cncf.kubernetes {info['cncf_kubernetes']}, {time.strftime('%Y-%m-%d')}; total {total:.0f} s.\n\n"
    )
    notes = (
        f"\nStage program: {RECORDS} records, the workload's pause (0.2 s, long: 5 s), holds "
        f"{'/'.join(map(str, MEMORY_MB))} MiB "
        f"(stage k: {MEMORY_MB[0]} if k%3=0, ...). Overhead per stage = stage k+1 start - stage k end "
        "(stage program timestamps). 'at once' > 1: wall = first start to last end (mean per pipeline), "
        "peak = all pods of all pipelines (largest single pipeline). ok = every DAG run succeeded, every "
        "stage ran exactly once and the last stage's checksum equals the expected one.\n"
    )
    text = header + md + notes + "\n" + "\n".join(f"- {line}" for line in lines) + "\n"
    if failures:
        text += "\nFailed scenarios:\n" + "\n".join(f"- {f}" for f in failures) + "\n"
    print()
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(text)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps(
            {
                "command": command,
                "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "machine": info,
                "total_s": total,
                "targets": lines,
                "failures": failures,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS / (stem + '.md')} and {RESULTS / (stem + '.json')}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
