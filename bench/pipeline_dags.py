"""The pipelines benchmark's DAGs (bench/pipelines.py, bench/scheduler.py): the same N-stage pipeline built
for every mode, and the stage program every mode runs. Imported by each generated DAG file, so it imports
nothing heavy at module level (Airflow, the provider and the Kubernetes clients inside the functions).

Modes: `noop` (Python tasks that only sleep the stage's pause: Airflow's floor), `chain` and its variants
(`chain_variants`), `kpo` / `kpo1` (a KubernetesPodOperator per stage, default / 1 s start-up check),
`all` (one pod, N containers started together) and `podexec` (one pod of the one image, created by the
DAG's first task; one cncf.kubernetes `KubernetesPodExecOperator` per stage execs the stage program in it;
the last task, a teardown, deletes it; `one` image workloads only: an exec cannot change the image, nor a
stage's resources, and seals nothing between stages).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

IMAGE = "ghcr.io/airflow-kruise-chain/bench-stage:{k}"
RECORDS = 20000
PAUSE = 0.2
MEMORY_MB = (4, 8, 16)  # stage k holds MEMORY_MB[k % 3] MiB of string while it runs
POLL = 0.1  # all-at-once: how often a waiting container looks for its predecessor's done-file
LIGHT, HEAVY = (
    "64Mi",
    "1Gi",
)  # stage memory requests: uniform = LIGHT everywhere, skewed = HEAVY in the middle
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
# to hold, records, seconds to pause, pipeline id and, optionally, a file its BENCH lines are appended to
# as well (`podexec`: an exec's output reaches no container log). Stage 1 generates the records; stage k
# reads stage k-1's file, transforms every record and writes its own; it prints its start and end time (ns)
# and a checksum.
STAGE_SCRIPT = r"""k=$1 dir=$2 mb=$3 records=$4 pause=$5 id=$6 marks=${7:-}
mark() { echo "BENCH $*"; if [ -n "$marks" ]; then echo "BENCH $*" >>"$marks"; fi; }
mark "start id=$id stage=$k pod=$HOSTNAME t=$(date +%s.%N)"
if [ "$k" -eq 1 ]; then in=/dev/null; else in=$dir/stage-$((k - 1)).dat; fi
awk -v k="$k" -v mb="$mb" -v n="$records" -v pause="$pause" '
BEGIN { pad = "x"; while (length(pad) < mb * 1048576) pad = pad pad
        if (k == 1) for (i = 1; i <= n; i++) print i, (i * 7919) % 1000003 }
k > 1 { print $1, ($2 * 31 + k) % 1000003 }
END { system("sleep " pause) }' "$in" >"$dir/stage-$k.tmp" || exit 1
mv "$dir/stage-$k.tmp" "$dir/stage-$k.dat"
sum=$(cksum <"$dir/stage-$k.dat")
: >"$dir/stage-$k.done"
mark "end id=$id stage=$k t=$(date +%s.%N) cksum=${sum%% *}"
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
    the go by annotation only, deferrable (`chain-deferrable`, the provider's defaults otherwise;
    `chain-defer-at-once`, `defer_after=0`), start_from_trigger."""
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
        # deferrable with the provider's defaults: what `[operators] default_deferrable = True` gives a stage
        variants["chain-deferrable"] = {"deferrable": True}
        if "defer_after" in params:  # stages that really defer: handed to the trigger right after the swap
            variants["chain-defer-at-once"] = {"deferrable": True, "defer_after": 0}
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
        elif mode == "podexec":
            podexec_tasks(n, pipeline, namespace, data_dir, workload)
        else:
            raise ValueError(f"unknown mode {mode!r}")
    return dag


PODEXEC_IDLE = "trap 'exit 0' TERM; while :; do sleep 1 & wait $!; done"
"""the podexec pod's main process: idles until its deletion's SIGTERM (the stages are execs next to it)"""


def podexec_pod(name: str, image_ref: str, marks_dir: str) -> dict[str, Any]:
    """The podexec pod: the one image idling, the stages' data in an `emptyDir` (as the chain's scratch), the
    benchmark's marks folder (a `hostPath`: instrumentation, not the pipeline's data) at /bench."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench-podexec"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "stage",
                    "image": image_ref,
                    "command": ["/bin/sh", "-c", PODEXEC_IDLE],
                    "resources": {"requests": {"memory": LIGHT}},
                    "volumeMounts": [
                        {"name": "scratch", "mountPath": "/scratch"},
                        {"name": "marks", "mountPath": "/bench"},
                    ],
                }
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "marks", "hostPath": {"path": marks_dir, "type": "Directory"}},
            ],
        },
    }


def podexec_up(name: str, namespace: str, image_ref: str, marks_dir: str) -> None:
    """The podexec DAG's first task: create the pod and wait (one watch) until its container runs."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    from kubernetes import watch

    core = KubernetesHook().core_v1_client
    core.create_namespaced_pod(namespace, podexec_pod(name, image_ref, marks_dir))
    stream = watch.Watch().stream(
        core.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}", timeout_seconds=300
    )
    for event in stream:
        statuses = event["object"].status.container_statuses or []
        if any(s.state and s.state.running for s in statuses):
            return
        if event["object"].status.phase in ("Succeeded", "Failed"):
            raise RuntimeError(
                f"podexec pod {namespace}/{name} ended before the stages: {event['object'].status}"
            )
    raise RuntimeError(f"podexec pod {namespace}/{name} did not start within 300 s")


def podexec_down(name: str, namespace: str) -> None:
    """The podexec DAG's teardown: delete the pod."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    KubernetesHook().core_v1_client.delete_namespaced_pod(name, namespace)


def podexec_tasks(
    n: int, pipeline: str, namespace: str, marks_dir: str, workload: tuple[str, str, float]
) -> None:
    """The podexec pipeline in the current DAG: pod up, N KubernetesPodExecOperator stages, pod down."""
    from airflow.providers.cncf.kubernetes.operators.pod_exec import KubernetesPodExecOperator
    from airflow.sdk import task

    images, resources, pause = workload
    if images != "one" or resources != "uniform":
        raise ValueError(
            f"podexec runs every stage in one running container: workloads of one image and uniform "
            f"resources only, not {workload_label(*workload)}"
        )
    name = "podexec-" + re.sub(r"[^a-z0-9]+", "-", pipeline.lower()).strip("-")[:40].strip("-")
    up = task(task_id="pod_up")(podexec_up)(name, namespace, image(1, images), marks_dir)
    previous: Any = up
    for k in range(1, n + 1):
        stage = KubernetesPodExecOperator(
            task_id=f"s{k:02d}",
            pod_name=name,
            namespace=namespace,
            container_name="stage",
            command=[
                "/bin/sh",
                "-c",
                STAGE_SCRIPT,
                *stage_args(k, "/scratch", pipeline, pause),
                "/bench/marks.log",
            ],
        )
        previous >> stage
        previous = stage
    down = task(task_id="pod_down")(podexec_down)(name, namespace)
    previous >> down.as_teardown(setups=up)


def applicable(mode: str, workload: tuple[str, str, float]) -> bool:
    """Whether `mode` can run `workload` at all (podexec: one image, uniform resources)."""
    return mode != "podexec" or workload[:2] == ("one", "uniform")


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


DAG_HEADER = (
    '"""airflow DAG of the pipelines benchmark (safe-mode discovery looks for both words)."""\n'
    "from bench.pipeline_dags import build_dag, build_warmup_dag  # noqa: F401\n\n"
)
