"""Per-stage sizing by in-place resize, end to end on the local cluster: stages of 64, 512, 64 and 256 MiB.

The pod is sampled through a watch (every change the API server sends): at every sample one slot is at the
parked minimum, so the pod never reserves more than the running stage plus the parked minimum; each stage
runs with its own size; a stage over its own limit is OOMKilled; a node too small for a stage fails that
stage naming `Infeasible`.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.validation import memory_bytes
from kubernetes import client, config, watch

from airflow_kruise_chain.core.constants import CHAIN_LABEL
from airflow_kruise_chain.core.resources import PARKED_REQUESTS
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

START = __import__("pendulum").datetime(2026, 1, 1, tz="UTC")
MI = 2**20
SIZES = {"small": 64, "large": 512, "tiny": 64, "medium": 256}
"""stage -> MiB requested (and its limit: 1.5 x)"""
HOG = "awk 'BEGIN {{ s = \"x\"; for (i = 0; i < {bits}; i++) s = s s; print length(s) }}'"
"""allocates 2^bits bytes"""


def cluster_with(tmp_path: Path, memory: str, version: str = "1.35.0") -> Iterator[LocalCluster]:
    config_ = ClusterConfig(
        profile="fast",
        allocatable={"cpu": "2", "memory": memory, "pods": "110"},
        root=str(tmp_path / "c"),
        kubernetes_version=version,
    )
    with LocalCluster(config_) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
        yield cluster
        os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


@pytest.fixture
def node_2gi(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    yield from cluster_with(tmp_path, "2Gi")


@pytest.fixture
def node_300mi(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    yield from cluster_with(tmp_path, "300Mi")


class PodSampler:
    """Every version of the chain pod the API server sends on a watch, as (slot requests in bytes, pod)."""

    def __init__(self, cluster: LocalCluster) -> None:
        api = config.new_client_from_config_dict(cluster.kubeconfig())
        self.core = client.CoreV1Api(api)
        self.watch = watch.Watch()
        self.samples: list[tuple[dict[str, int], dict[str, Any]]] = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.stopping = False

    def run(self) -> None:
        try:
            self.sample()
        except Exception:  # the stream cut when the test stops the watch and the cluster
            if not self.stopping:
                raise

    def sample(self) -> None:
        for event in self.watch.stream(
            self.core.list_namespaced_pod, "default", label_selector=CHAIN_LABEL, timeout_seconds=300
        ):
            pod = event["raw_object"]
            requests = {
                c["name"]: memory_bytes(((c.get("resources") or {}).get("requests") or {}).get("memory", "0"))
                for c in pod["spec"]["containers"]
            }
            self.samples.append((requests, pod))

    def __enter__(self) -> PodSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping = True
        self.watch.stop()
        self.thread.join(timeout=10)


def chain_dag(
    dag_id: str,
    hog: str | None = None,
    hog_bits: int = 0,
    failures: Failures | None = None,
    swap_timeout: float = 60,
    prepare_next: bool = True,
) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain(
            "c",
            namespace="default",
            prewarm=False,
            swap_timeout=swap_timeout,
            prepare_next=prepare_next,
            **FAST_POD,
        ) as chain:
            tasks = []
            for name, mib in SIZES.items():
                script = HOG.format(bits=hog_bits) if name == hog else f"echo {name} sized {mib}Mi; sleep 0.3"
                tasks.append(
                    chain.stage(
                        name,
                        image="busybox:1.36",
                        cmds=["/bin/sh", "-c", script],
                        resources={
                            "requests": {"memory": f"{mib}Mi"},
                            "limits": {"memory": f"{mib * 3 // 2}Mi"},
                        },
                        on_failure_callback=failures,
                    )
                )
            for before, after in itertools.pairwise(tasks):
                before >> after
    return dag


def test_each_slot_is_sized_for_its_stage_and_the_idle_one_parked(node_2gi, capfd):
    with PodSampler(node_2gi) as sampler:
        run = run_inline(chain_dag("sizing_ok"))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out
    assert "sizing: in-place" in out

    parked = memory_bytes(PARKED_REQUESTS["memory"])
    samples = [requests for requests, _ in sampler.samples]
    assert len(samples) > 20
    for requests in samples:  # one slot parked at every sample: at most the running stage plus parked
        assert min(requests.values()) == parked, requests
        assert sum(requests.values()) <= max(SIZES.values()) * MI + parked
    # the sized slot followed the stages in order, each with its own request
    sized = [max(r.values()) // MI for r in samples if max(r.values()) > parked]
    order = [size for i, size in enumerate(sized) if i == 0 or sized[i - 1] != size]
    assert order == list(SIZES.values()), order
    # and each stage started with its own size (the slot's status shows what the kubelet applied)
    for name, mib in SIZES.items():
        assert any(
            (c.get("allocatedResources") or {}).get("memory") == f"{mib}Mi"
            for _, pod in sampler.samples
            for c in (pod.get("status") or {}).get("containerStatuses") or []
        ), name


@pytest.mark.parametrize(
    ("hog", "bits"),
    [
        ("large", 30),  # 1 GiB: over the 512Mi stage's own limit (768Mi)
        ("medium", 29),  # 512 MiB: over medium's own 384Mi, under the 768Mi a static slot would have
    ],
)
def test_a_stage_over_its_own_limit_after_the_resize_is_oomkilled(node_2gi, hog, bits):
    failures = Failures()
    with PodSampler(node_2gi) as sampler:
        run = run_inline(chain_dag(f"sizing_oom_{hog}", hog=hog, hog_bits=bits, failures=failures))
    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.small"][0] == "success"
    assert states[f"c.{hog}"][0] == "failed"
    error = str(failures.errors[f"c.{hog}"])
    assert "exit code 137" in error, error  # the kill's cause is in the container status (below)
    own_limit = f"{SIZES[hog] * 3 // 2}Mi"
    killed = [
        c
        for _, pod in sampler.samples
        for c in (pod.get("status") or {}).get("containerStatuses") or []
        if ((c.get("lastState") or {}).get("terminated") or {}).get("reason") == "OOMKilled"
        or ((c.get("state") or {}).get("terminated") or {}).get("reason") == "OOMKilled"
    ]
    assert killed, "no OOMKilled container status seen"
    assert killed[0]["resources"]["limits"]["memory"] == own_limit


def test_a_node_too_small_for_a_stage_fails_it_naming_infeasible(node_300mi, capfd):
    failures = Failures()
    run = run_inline(chain_dag("sizing_infeasible", failures=failures))
    out = capfd.readouterr().out
    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.small"][0] == "success"
    assert states["c.large"][0] == "failed"
    assert states["c.teardown"][0] == "failed"  # it ran (the pod is deleted), then failed the run
    error = str(failures.errors["c.large"])
    assert "Infeasible" in error and "stage 'large'" in error, error
    assert "memory 512Mi" in error and "300Mi allocatable" in error, error
    assert "Infeasible" in out


@pytest.fixture
def node_1gi(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    yield from cluster_with(tmp_path, "1Gi")


def blocker(cluster: LocalCluster, memory: str) -> client.CoreV1Api:
    """A pod holding `memory` of the node's allocatable."""
    core = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "blocker"},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox:1.36",
                        "command": ["sleep", "600"],
                        "resources": {"requests": {"memory": memory}},
                    }
                ],
            },
        },
    )
    return core


def deferred(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Deferred"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


@pytest.mark.parametrize("prepare_next", [False, True], ids=["own-resize", "sized-ahead"])
def test_a_deferred_resize_waits_until_the_node_has_room(node_1gi, capfd, prepare_next):
    """The 512Mi stage does not fit next to a 520Mi pod (512Mi + 4Mi parked + 520Mi > 1Gi): its resize is
    Deferred, the task waits (and says why) until that pod is deleted, then runs the stage. With
    prepare_next (the default) the stage before asked for that resize at its end (sized ahead): the deferral
    may be over before the stage's own task looks, which then waits only if it is not."""
    core = blocker(node_1gi, "520Mi")
    with PodSampler(node_1gi) as sampler:
        freed = threading.Event()

        def free_when_deferred() -> None:
            while not freed.is_set():
                if any(deferred(pod) for _, pod in list(sampler.samples)):
                    core.delete_namespaced_pod("blocker", "default", grace_period_seconds=0)
                    freed.set()
                    return
                freed.wait(0.05)

        helper = threading.Thread(target=free_when_deferred, daemon=True)
        helper.start()
        run = run_inline(chain_dag("sizing_deferred", prepare_next=prepare_next))
        freed.set()
        helper.join()
    out = capfd.readouterr().out
    assert str(run.state) == "success", out
    assert any(deferred(pod) for _, pod in sampler.samples)
    if prepare_next:
        assert "(ahead, for the next stage 'large'" in out
    else:
        assert "waiting: the kubelet deferred resizing slot-" in out
        assert "Node didn't have enough resource: memory" in out


def test_a_resize_deferred_past_the_swap_timeout_fails_the_stage(node_1gi, capfd):
    blocker(node_1gi, "520Mi")
    failures = Failures()
    run = run_inline(chain_dag("sizing_deferred_timeout", failures=failures, swap_timeout=5))
    assert str(run.state) == "failed"
    states = task_states(run)
    assert states["c.small"][0] == "success"
    assert states["c.large"][0] == "failed"
    error = str(failures.errors["c.large"])
    assert "swap timeout" in error and "deferred" in error and "Node didn't have enough resource" in error, (
        error
    )


@pytest.fixture
def k8s_1_33(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    yield from cluster_with(tmp_path, "2Gi", version="1.33.2")


@pytest.fixture
def k8s_1_32(tmp_path: Path, airflow_home: Path) -> Iterator[LocalCluster]:
    yield from cluster_with(tmp_path, "2Gi", version="1.32.4")


def test_before_1_34_a_refused_memory_limit_decrease_keeps_the_limit_and_parks_the_requests(k8s_1_33, capfd):
    """Kubernetes 1.33 serves pods/resize but refuses any NotRequired memory limit decrease (422): parking
    keeps the slot's limit and lowers its requests; every stage still runs."""
    with PodSampler(k8s_1_33) as sampler:
        run = run_inline(chain_dag("sizing_1_33"))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out
    assert "the API server refused to lower slot-" in out
    parked = memory_bytes(PARKED_REQUESTS["memory"])
    for requests, _ in sampler.samples:  # the requests are still parked: the reservation bound holds
        assert min(requests.values()) == parked, requests


def test_without_pods_resize_the_chain_is_sized_statically_and_says_so_once(k8s_1_32, capfd):
    with PodSampler(k8s_1_32) as sampler:
        run = run_inline(chain_dag("sizing_static"))
    out = capfd.readouterr().out
    assert str(run.state) == "success", out
    assert out.count("sizing: static: the cluster serves no pods/resize") == 1
    largest = {"requests": {"memory": "512Mi"}, "limits": {"memory": "768Mi"}}
    for _, pod in sampler.samples:
        assert [c["resources"] for c in pod["spec"]["containers"]] == [largest, largest]
