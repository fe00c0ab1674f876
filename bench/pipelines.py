"""Benchmark: the same N-stage pipeline run every way on the local cluster, side by side (issue 16).

    python bench/pipelines.py            # full run: both profiles, every mode, every workload (see --help)
    python bench/pipelines.py --quick    # fast profile, N = 3 and 10, distinct images, 10 pipelines of N = 3
    python bench/pipelines.py --quick --profiles fast,realistic --workloads distinct,one --copies 1

Modes (same stage program, same data, stage images `ghcr.io/airflow-kruise-chain/bench-stage:<k>`):

- `noop`: Airflow's floor: the same DAG shape of Python tasks that only sleep the stage program's pause.
- `chain`: a `KruiseChain` (provider defaults, prewarm); plus one mode per option the provider offers
  (detected from KruiseChain's signature: the prepared next slot flipped, `chain-deferrable` = deferrable
  with `defer_after=0`, every stage handed to the trigger right after its swap, start_from_trigger);
  `--list-modes` shows them. Data in the chain's scratch `emptyDir`.
- `kpo` / `kpo1`: one `KubernetesPodOperator` per stage (apache-airflow-providers-cncf-kubernetes), default
  settings / `startup_check_interval_seconds=1` (tuned). Data through a `hostPath` folder standing in for a
  ReadWriteMany PVC (the local cluster has none).
- `all`: ONE pod whose N containers all start at once and share an `emptyDir`; container k polls (every
  0.1 s) for stage k-1's done-file, then runs the stage. One `KubernetesPodOperator` task, N-container spec.

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
from bench.observe import Sampler, reserved_memory

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
IMAGE = "ghcr.io/airflow-kruise-chain/bench-stage:{k}"
RECORDS = 20000
PAUSE = 0.2
MEMORY_MB = (4, 8, 16)  # stage k holds MEMORY_MB[k % 3] MiB of string while it runs
POLL = 0.1  # all-at-once: how often a waiting container looks for its predecessor's done-file
GRACE_WAIT = 25.0  # a gap this long is a kill that waited out the 30 s grace period (docs/how-it-works.md)
UA = "kruise-chain-bench"
LIGHT, HEAVY = (
    "64Mi",
    "1Gi",
)  # stage memory requests: uniform = LIGHT everywhere, skewed = HEAVY in the middle
BASE_MODES = ("noop", "chain", "kpo", "kpo1", "all")
MODE_NAMES = {
    "noop": "no-op tasks (floor)",
    "chain": "chain",
    "chain-deferrable": "chain, deferred at once",
    "chain-annotation": "chain, go by annotation only",
    "kpo": "KPO, pod per task",
    "kpo1": "KPO, startup check 1 s",
    "all": "all at once",
}
# named workloads: (images, resources, pause); "distinct" is the base the others vary one thing of
WORKLOADS = {
    "distinct": ("distinct", "uniform", PAUSE),
    "one": ("one", "uniform", PAUSE),
    "alternating": ("alternating", "uniform", PAUSE),
    "skewed": ("distinct", "skewed", PAUSE),
    "long": ("distinct", "uniform", 5.0),
}
PREPARE_OPTIONS = ("prepare_next", "prepare_next_slot", "prepared_slot", "prepare_next_stage", "next_slot")

# The stage program (POSIX sh + awk), identical in every mode. Arguments: stage number, data folder, MiB
# to hold, records, seconds to pause, pipeline id. Stage 1 generates the records; stage k reads stage k-1's
# file, transforms every record and writes its own; it prints its start and end time (ns) and a checksum.
STAGE_SCRIPT = r"""k=$1 dir=$2 mb=$3 records=$4 pause=$5 id=$6
echo "BENCH start id=$id stage=$k pod=$HOSTNAME t=$(date +%s.%N)"
if [ "$k" -eq 1 ]; then in=/dev/null; else in=$dir/stage-$((k - 1)).dat; fi
awk -v k="$k" -v mb="$mb" -v n="$records" -v pause="$pause" '
BEGIN { pad = "x"; while (length(pad) < mb * 1048576) pad = pad pad
        if (k == 1) for (i = 1; i <= n; i++) print i, (i * 7919) % 1000003 }
k > 1 { print $1, ($2 * 31 + k) % 1000003 }
END { system("sleep " pause) }' "$in" >"$dir/stage-$k.tmp" || exit 1
mv "$dir/stage-$k.tmp" "$dir/stage-$k.dat"
sum=$(cksum <"$dir/stage-$k.dat")
: >"$dir/stage-$k.done"
echo "BENCH end id=$id stage=$k t=$(date +%s.%N) cksum=${sum%% *}"
"""
# all-at-once: the container starts with the pod and waits for its predecessor before the same program
WAIT_SCRIPT = (
    'if [ "$1" -gt 1 ]; then while [ ! -e "$2/stage-$(($1 - 1)).done" ]; do sleep '
    + str(POLL)
    + "; done; fi\n"
)


def workload_label(images: str, resources: str, pause: float) -> str:
    return f"{images}/{resources}/{pause:g}s"


def image(k: int, images: str = "distinct") -> str:
    """Stage k's image: its own (distinct), stage 1's (one), or stage 1's and 2's in turn (alternating)."""
    if images == "one":
        return IMAGE.format(k=1)
    if images == "alternating":
        return IMAGE.format(k=2 - k % 2)
    if images == "distinct":
        return IMAGE.format(k=k)
    raise ValueError(f"images must be distinct, one or alternating, not {images!r}")


def memory_request(k: int, n: int, resources: str) -> str:
    """Stage k's memory request: LIGHT for every stage (uniform), HEAVY for the middle stage (skewed)."""
    if resources not in ("uniform", "skewed"):
        raise ValueError(f"resources must be uniform or skewed, not {resources!r}")
    return HEAVY if resources == "skewed" and k == (n + 1) // 2 else LIGHT


def stage_args(k: int, data: str, pipeline: str, pause: float = PAUSE) -> list[str]:
    return ["stage", str(k), data, str(MEMORY_MB[k % 3]), str(RECORDS), str(pause), pipeline]


def chain_variants() -> dict[str, dict[str, Any]]:
    """The chain's modes: `chain` (provider defaults) and, for each option the provider offers (detected
    from KruiseChain's signature, never assumed), the chain with it flipped: the prepared next slot on/off,
    deferrable, start_from_trigger."""
    import inspect

    from airflow_kruise_chain.chain import KruiseChain

    params = inspect.signature(KruiseChain.__init__).parameters
    variants: dict[str, dict[str, Any]] = {"chain": {}}
    for name in PREPARE_OPTIONS:
        if name in params and isinstance(params[name].default, bool):
            default = params[name].default
            variants[f"chain-{name}-{'off' if default else 'on'}"] = {name: not default}
    if "go_via_exec" in params:  # the go by the annotation alone, against the default exec + annotation
        variants["chain-annotation"] = {"go_via_exec": False}
    if "deferrable" in params:
        # stages that really defer: handed to the trigger right after the swap, not followed on the worker
        # first (a short stage would end within the default `defer_after` and never defer)
        variants["chain-deferrable"] = {
            "deferrable": True,
            **({"defer_after": 0} if "defer_after" in params else {}),
        }
        if "start_from_trigger" in params:
            variants["chain-start-from-trigger"] = {"deferrable": True, "start_from_trigger": True}
    return variants


# -- the DAGs ------------------------------------------------------------------------------------------
def noop_stage(k: int, data: str, pipeline: str, pause: float) -> None:
    """Airflow's floor: a Python task that only marks its start and end (in the run's data folder, in the
    stage program's BENCH format) around a sleep as long as the stage program's pause."""
    with open(os.path.join(data, f"noop-{k:03d}.log"), "a") as out:
        out.write(f"BENCH start id={pipeline} stage={k} pod= t={time.time():.6f}\n")
        time.sleep(pause)
        out.write(f"BENCH end id={pipeline} stage={k} t={time.time():.6f} cksum=-\n")


def build_dag(
    mode: str,
    n: int,
    pipeline: str,
    namespace: str,
    data_dir: str = "",
    workload: tuple[str, str, float] = WORKLOADS["distinct"],
    chain_options: dict[str, Any] | None = None,
) -> Any:
    """The benchmark pipeline as an Airflow DAG (imported by the generated DAG file of each run)."""
    import pendulum
    from airflow.sdk import DAG

    images, resources, pause = workload
    dag_id = "bench_" + re.sub(r"[^A-Za-z0-9_]", "_", pipeline)

    def requests(k: int) -> dict[str, str]:
        return {"memory": memory_request(k, n, resources)}

    with DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
        if mode == "noop":
            from airflow.sdk import task

            previous = None
            for k in range(1, n + 1):
                t = task(task_id=f"s{k:02d}")(noop_stage)(k, data_dir, pipeline, pause)
                if previous is not None:
                    previous >> t
                previous = t
        elif mode.startswith("chain"):
            from airflow_kruise_chain.chain import KruiseChain

            options = {"prewarm": True, **(chain_options or {})}
            with KruiseChain("bench", namespace=namespace, **options) as chain:
                previous = None
                for k in range(1, n + 1):
                    task = chain.stage(
                        f"s{k:02d}",
                        image=image(k, images),
                        cmds=["/bin/sh", "-c", STAGE_SCRIPT, *stage_args(k, "/scratch", pipeline, pause)],
                        resources={"requests": requests(k)},
                    )
                    if previous is not None:
                        previous >> task
                    previous = task
        elif mode in ("kpo", "kpo1"):
            from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
            from kubernetes.client import models as k8s

            volume = k8s.V1Volume(
                name="data", host_path=k8s.V1HostPathVolumeSource(path=data_dir, type="Directory")
            )
            mount = k8s.V1VolumeMount(name="data", mount_path="/data")
            tuned = {"startup_check_interval_seconds": 1} if mode == "kpo1" else {}
            previous = None
            for k in range(1, n + 1):
                task = KubernetesPodOperator(
                    task_id=f"s{k:02d}",
                    name=f"s{k:02d}",
                    namespace=namespace,
                    image=image(k, images),
                    cmds=["/bin/sh", "-c"],
                    arguments=[STAGE_SCRIPT, *stage_args(k, "/data", pipeline, pause)],
                    volumes=[volume],
                    volume_mounts=[mount],
                    container_resources=k8s.V1ResourceRequirements(requests=requests(k)),
                    **tuned,
                )
                if previous is not None:
                    previous >> task
                previous = task
        elif mode == "all":
            from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
            from kubernetes.client import models as k8s

            mount = k8s.V1VolumeMount(name="data", mount_path="/data")
            argv = [
                ["/bin/sh", "-c", WAIT_SCRIPT + STAGE_SCRIPT, *stage_args(k, "/data", pipeline, pause)]
                for k in range(1, n + 1)
            ]
            containers = [
                k8s.V1Container(
                    name=f"stage-{k:02d}",
                    image=image(k, images),
                    command=argv[k - 1],
                    volume_mounts=[mount],
                    resources=k8s.V1ResourceRequirements(requests=requests(k)),
                )
                for k in range(1, n + 1)
            ]
            pod = k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(),
                spec=k8s.V1PodSpec(
                    containers=containers,
                    restart_policy="Never",
                    volumes=[k8s.V1Volume(name="data", empty_dir=k8s.V1EmptyDirVolumeSource())],
                ),
            )
            KubernetesPodOperator(
                task_id="all",
                name="all-at-once",
                namespace=namespace,
                image=image(1, images),
                cmds=argv[0],
                base_container_name="stage-01",
                container_logs=True,
                full_pod_spec=pod,
            )
        else:
            raise ValueError(f"unknown mode {mode!r}")
    return dag


def build_warmup_dag() -> Any:
    """A one-task DAG each DAG process runs first, so that dag.test()'s one-time start-up (the in-process
    Execution API) is not counted in the pipeline's wall time."""
    import pendulum
    from airflow.sdk import DAG, task

    with DAG(
        "bench_warmup", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False
    ) as dag:

        @task
        def nothing() -> None:
            return None

        nothing()
    return dag


def expected_checksum(n: int) -> str:
    """cksum of the last stage's file, computed here without the cluster."""
    values = [(i, (i * 7919) % 1000003) for i in range(1, RECORDS + 1)]
    for k in range(2, n + 1):
        values = [(i, (v * 31 + k) % 1000003) for i, v in values]
    text = "".join(f"{i} {v}\n" for i, v in values).encode()
    return subprocess.run(["cksum"], input=text, capture_output=True, check=True).stdout.split()[0].decode()


# -- one DAG run (child process) -------------------------------------------------------------------------
def worker(folder: str) -> None:
    """A DAG process: warms dag.test() up once, then runs the DAG of each job file the benchmark drops in
    `folder` (job-0.json, job-1.json, ...): loads it, says ready, waits for the go file, runs `dag.test()`."""
    import importlib.util

    here = Path(folder)
    dags = here / "dags"

    def load(path: Path, name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    warm = load(dags / "warmup.py", "bench_warmup").dag.test()
    (dags / "warmup.py").unlink()
    if str(warm.state) != "success":
        raise RuntimeError(f"warm-up DAG run ended {warm.state}")
    (here / "warm").touch()
    seq = 0
    while True:
        job_file = here / f"job-{seq}.json"
        while not job_file.exists():
            time.sleep(0.02)
        job = json.loads(job_file.read_text())
        if job.get("stop"):
            return
        dag_file = dags / "job.py"
        dag_file.write_text(job["dag_source"])
        dag = load(dag_file, f"bench_job_{seq}").dag
        Path(job["ready"]).touch()
        go = Path(job["go"])
        while not go.exists():
            time.sleep(0.002)
        t0 = time.time()
        try:
            run = dag.test()
            t1 = time.time()
            tis = run.get_task_instances()
            states = {ti.task_id: str(ti.state) for ti in tis}
            times = {  # Airflow's record of each task instance's start and end, by id without task group
                ti.task_id.rsplit(".", 1)[-1]: [
                    d.timestamp() if d else None for d in (ti.start_date, ti.end_date)
                ]
                for ti in tis
            }
            result = {"start": t0, "end": t1, "state": str(run.state), "tasks": states, "ti": times}
        except Exception as e:  # reported by the benchmark; the worker lives on
            result = {"start": t0, "end": time.time(), "state": f"error: {e!r}", "tasks": {}, "ti": {}}
        dag_file.unlink()
        Path(job["result"]).write_text(json.dumps(result))
        seq += 1


class Workers:
    """DAG processes, each with its own AIRFLOW_HOME (a copy of one migrated SQLite database); started as
    needed and reused across scenarios (Python start-up and dag.test()'s first-use cost are paid once)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.kubeconfig = work / "kubeconfig"  # rewritten for each scenario's cluster
        self.template = work / "airflow-template"
        self.template.mkdir(parents=True)
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            env=child_env(self.template, None),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs: list[dict[str, Any]] = []

    def ensure(self, count: int) -> list[dict[str, Any]]:
        for w in self.procs:
            if w["proc"].poll() is not None:
                raise RuntimeError(f"DAG process {w['dir'].name} died: {tail(w['dir'] / 'worker.log')}")
        while len(self.procs) < count:
            folder = self.work / f"worker-{len(self.procs)}"
            (folder / "dags").mkdir(parents=True)
            shutil.copy(self.template / "airflow.db", folder / "airflow.db")
            (folder / "dags" / "warmup.py").write_text(DAG_HEADER + "dag = build_warmup_dag()\n")
            log = open(folder / "worker.log", "wb")  # closed in stop()
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(folder)],
                env=child_env(folder, self.kubeconfig),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
            )
            self.procs.append({"dir": folder, "proc": proc, "log": log, "seq": 0})
        deadline = time.time() + 600
        for w in self.procs[:count]:
            while not (w["dir"] / "warm").exists():
                if w["proc"].poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"DAG process did not start: {tail(w['dir'] / 'worker.log')}")
                time.sleep(0.05)
        return self.procs[:count]

    def submit(self, w: dict[str, Any], job: dict[str, Any]) -> None:
        tmp = w["dir"] / "job.tmp"
        tmp.write_text(json.dumps(job))
        tmp.rename(w["dir"] / f"job-{w['seq']}.json")
        w["seq"] += 1

    def stop(self) -> None:
        for w in self.procs:
            if w["proc"].poll() is None:
                self.submit(w, {"stop": True})
        for w in self.procs:
            try:
                w["proc"].wait(timeout=30)
            except subprocess.TimeoutExpired:
                w["proc"].kill()
                w["proc"].wait()
            w["log"].close()


DAG_HEADER = (
    '"""airflow DAG of the pipelines benchmark (safe-mode discovery looks for both words)."""\n'
    "from bench.pipelines import build_dag, build_warmup_dag  # noqa: F401\n\n"
)


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
    """The no-op tasks' BENCH lines, from the runs' data folders."""
    events = []
    for log in shared.glob("*/noop-*.log"):
        for raw in log.read_text(errors="replace").splitlines():
            kind, rest = raw.removeprefix("BENCH ").split(" ", 1)
            fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
            events.append({"kind": kind, "container": "", "uid": "", **fields})
    return events


# -- one scenario ----------------------------------------------------------------------------------------
def child_env(home: Path, kubeconfig: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        }
    )
    if kubeconfig is not None:
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
    return env


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


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


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
    "get / list / watch / create / patch / update / delete / metrics per stage", "pods", "ok",
)  # fmt: skip
VERBS = ("get", "list", "watch", "create", "patch", "update", "delete", "metrics")


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
    workloads other than `distinct` run at N = 10 only (N = 3 with --quick), to keep the full run short."""
    runs = []
    for profile in args.profiles:
        for workload in args.workloads:
            stages = args.stages
            if not args.stages_given and workload != "distinct":
                stages = [3] if args.quick else [10]
            for n in stages:
                for mode in args.modes:
                    runs.append((profile, mode, workload, n, 1))
        if args.copies > 1:
            for mode in args.modes:
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
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
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
