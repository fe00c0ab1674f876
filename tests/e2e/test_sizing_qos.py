"""The chain pod's QoS class under in-place sizing, end to end on the local cluster (real client).

A Guaranteed chain (requests == limits for cpu and memory in every stage) is created Guaranteed and stays
so at every version of the pod a watch delivers, with two stages running at once (one in each slot) and
one after them; the parked minimum keeps requests == limits. A resize the API server refuses (422) fails
with an error naming the stage, what it asked for and the fix.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kruise_local import resources as R
from kruise_local.testing import wait_for
from kruise_local.validation import pod_qos_class
from kubernetes import client, config, watch

from airflow_kruise_chain.core.constants import CHAIN_LABEL
from airflow_kruise_chain.core.errors import ChainError
from airflow_kruise_chain.core.podview import ChainPod
from airflow_kruise_chain.core.resources import SIZING_ANNOTATION, ChainSizing
from airflow_kruise_chain.core.sizing import SlotSizer
from airflow_kruise_chain.hooks.kruise import KruiseHook
from airflow_kruise_chain.operators.chain import ChainSetupOperator, KruiseChainOperator
from tests.e2e.inline import FAST_POD, in_thread, start_markers
from tests.provider.support import make_context

pytestmark = pytest.mark.slow

GATED = r"""
echo "$STAGE waiting"
while [ ! -f "$CHAIN_SCRATCH/go-$STAGE" ]; do sleep 0.1; done
echo "$STAGE done"
"""
SIZES = {"a": ("200m", "96Mi"), "b": ("300m", "128Mi"), "c": ("100m", "64Mi")}
"""stage -> (cpu, memory), requested and limited alike"""


def resources(name: str) -> dict[str, dict[str, str]]:
    cpu, memory = SIZES[name]
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def stage(name: str) -> KruiseChainOperator:
    return KruiseChainOperator(
        task_id=name,
        chain_name="c",
        namespace="default",
        stage_name=name,
        image="busybox:1.36",
        cmds=["/bin/sh", "-c", GATED],
        env={"STAGE": name},
        container_resources=resources(name),
        swap_timeout=60,
    )


class Pods:
    """Every version of the chain pods the API server sends on a watch."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.watch = watch.Watch()
        self.samples: list[dict[str, Any]] = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            for event in self.watch.stream(
                self.core.list_namespaced_pod, "default", label_selector=CHAIN_LABEL, timeout_seconds=300
            ):
                self.samples.append(event["raw_object"])
        except Exception:  # the stream is cut when the test ends
            pass

    def __enter__(self) -> Pods:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.watch.stop()
        self.thread.join(timeout=10)


def test_a_guaranteed_chain_stays_guaranteed_with_two_stages_at_once(e2e_cluster):
    cluster = e2e_cluster
    core = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
    stages = [
        {"name": n, "image": "busybox:1.36", "cmds": ["/bin/sh", "-c", GATED], "resources": resources(n)}
        for n in SIZES
    ]
    chain = {"name": "c", "namespace": "default", "stages": stages, **FAST_POD}
    with Pods(core) as pods:
        pod_name = ChainSetupOperator(task_id="setup", chain=chain).execute(make_context("g", "run-1"))["pod"]
        pod = cluster.call(lambda: cluster.store.peek(R.PODS, "default", pod_name))
        uid = pod["metadata"]["uid"]
        scratch = cluster.root / "pods" / uid / "volumes" / "scratch"
        sizing = ChainSizing.from_pod(ChainPod.of(pod))
        assert sizing is not None and sizing.qos == "Guaranteed"
        parked = sizing.parked
        assert parked["requests"] == parked["limits"]  # the parked minimum is Guaranteed too

        def started() -> list[str]:
            return [s for _, s, _ in start_markers(cluster, uid)]

        runs = {}
        for name in ("a", "b"):  # two stages at once: one in each slot, each sized for itself
            runs[name] = in_thread(lambda name=name: stage(name).execute(make_context("g", "run-1")))
            wait_for(lambda name=name: name in started(), 60, 0.1, f"{name} to start")
        both = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(pod_name, "default"))
        running = [c["resources"] for c in both["spec"]["containers"]]
        assert sorted(map(canonical, running)) == sorted(canonical(resources(n)) for n in ("a", "b"))
        for name in ("a", "b"):
            (scratch / f"go-{name}").write_text("")
            runs[name]["thread"].join(timeout=60)
            assert "error" not in runs[name], runs[name].get("error")
        (scratch / "go-c").write_text("")
        result = stage("c").execute(make_context("g", "run-1"))
        assert result["exit_code"] == 0
        time.sleep(0.5)  # the last park reaches the watch
    assert started() == ["a", "b", "c"]
    assert len(pods.samples) > 10
    for sample in pods.samples:  # Guaranteed at every version of the pod, by its status and its spec
        assert sample["status"].get("qosClass") == "Guaranteed", sample["status"]
        assert pod_qos_class(sample) == "Guaranteed", sample["spec"]
        for ctr in sample["spec"]["containers"] + sample["spec"]["initContainers"]:
            assert ctr["resources"]["requests"] == ctr["resources"]["limits"], ctr
    # each stage was applied with its own size; the slots end parked
    applied = {
        str(c.get("resources"))
        for sample in pods.samples
        for c in sample["status"].get("containerStatuses") or []
    }
    for name in SIZES:
        assert any(all(q in a for q in SIZES[name]) for a in applied), (name, applied)
    last = pods.samples[-1]["spec"]["containers"]
    assert [c["resources"] for c in last] == [parked, parked]


def test_a_resize_the_api_server_refuses_names_the_stage_the_request_and_the_fix(e2e_cluster):
    """A QoS-changing resize (the chain's sizing annotation edited by hand) is refused with 422: the stage
    fails naming itself, the resources it asked for and what to do, not with the bare API error."""
    cluster = e2e_cluster
    core = client.CoreV1Api(config.new_client_from_config_dict(cluster.kubeconfig()))
    parked = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}}
    burstable = {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m", "memory": "128Mi"}}
    sizing = ChainSizing(qos="Guaranteed", parked=parked, stages={"big": burstable})
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "p", "annotations": {SIZING_ANNOTATION: sizing.annotation()}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": n, "image": "busybox:1.36", "command": ["sleep", "600"], "resources": parked}
                    for n in ("slot-a", "slot-b")
                ],
            },
        },
    )
    wait_for(
        lambda: core.read_namespaced_pod("p", "default").status.phase == "Running", 60, 0.1, "pod running"
    )
    pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod("p", "default"))
    assert pod["status"]["qosClass"] == "Guaranteed"
    sizer = SlotSizer(KruiseHook(), "p", "default", lambda _line: None)
    with pytest.raises(ChainError) as err:
        sizer.size(ChainPod.of(pod), "big", "slot-b", "slot-a", True, time.monotonic() + 30)
    message = str(err.value)
    assert "stage 'big'" in message and "slot-b" in message, message
    assert "requests cpu=100m, memory=64Mi" in message, message
    assert "422" in message and "QOS" in message.upper(), message
    assert "sizing='static'" in message, message
