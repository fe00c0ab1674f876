"""`kubectl describe` of a chain pod stays small (issue 22 b, issue 36), end to end on the local cluster: the
pod holds no runner script (its init container, of the public busybox image, reads it from the runner's
ConfigMap as env and checks it in one line of shell; `tests/e2e/test_runner_configmap.py` tests that
delivery)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pendulum
import pytest
from kruise_local import resources as R

from airflow_kruise_chain.core.runnerinstall import INSTALL_COMMAND, configmap_name, runner_script
from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE
from tests.e2e.inline import FAST_POD, pod_events, run_inline, task_states

pytestmark = pytest.mark.slow

START = pendulum.datetime(2026, 1, 1, tz="UTC")
DESCRIBE_LIMIT = 6 * 1024 + 448
"""the pod as built in `kubectl describe` (all but its annotations and its events): 6,329 B at a06c62a, of
which 202 B the slots' KC_PREPARE (an env line each naming the slot's prepare-id annotation; 6,127 B without),
142 B the slots' KC_SEAL (an env line each naming the pod's seal annotation; 5,985 B without), 107 B the
slots' read-only /etc/hosts (a mount line each: `/etc/hosts from kruise-chain (ro,path="hosts")`) and its copy
in the init container's line (5,878 B without them, at 1f4b4a0; 5,638 B when first measured with each slot's
own /tmp and /dev/shm), of which ~840 B each slot's own /tmp and /dev/shm volumes, their mounts and the
runner's KC_TMP (issue 37: a slot's root filesystem is read-only; 4,796 B before), and the init container's
one line of shell and its ConfigMap reference ~280 B more than the runner image's one path was (4,512 B; 5.4
KB with the runner script inline as a file, 4.7 KB with `busybox sh runner.sh` commands). The limit was 6,336
B until the KC_PREPARE lines (stop 47) left it 7 B of room; it keeps ~260 B, as before them"""
WHOLE_LIMIT = 8 * 1024 + 256
"""the whole `kubectl describe` (kubectl 1.32) of the 4-stage run's pod on a node that pulls its three images:
its annotations and its own events (the kubelet's 13, 1.3 KB) included: 8,249 B at a06c62a, of which 202 B the
slots' KC_PREPARE (8,047 B without), 220 B the pod's seal and the slots' KC_SEAL (7,827 B without), 107 B the
slots' /etc/hosts (7,480 B when first measured with the slots' /tmp and /dev/shm, 6,640 B before them, 6,398 B
with the runner image, 8.2 KB at stop 31, 7.2 KB before the records went into one annotation and the commands
became one path each)"""
WARM_LIMIT = 8 * 1024
"""the same for the same DAG's next pod, on a node that holds the images (the kubelet pulls nothing: 10
events): 7,989 B at a06c62a, of which 202 B the slots' KC_PREPARE (7,787 B without), 220 B the pod's seal and
the slots' KC_SEAL (7,567 B without), 107 B the slots' read-only /etc/hosts (a mount line each) and its copy
in the init container's line (7,460 B without them; 7,220 B when first measured with the slots' /tmp and
/dev/shm, 6,378 B before them, 6,116 B with the runner image); the margin covers longer event ages on a slow
machine. A kubectl of 1.35 or later prints each event's `spec.containers{NAME}:` before its message
(kubernetes/kubernetes#133627), ~30 B an event"""
ANNOTATIONS_LIMIT = 768
"""a 4-stage run's annotations in `kubectl describe`: the chain's own, the pod's seal and the stage records'
one line, 644 B, the same for any number of stages (566 B before the seal; 1,218 B with one record annotation
per stage, ~215 B each; 1.9 KB while the run specs stayed, 1.4 KB with the dag-id, run-id and sizing
annotations)"""
RUNS = [
    ("extract", "slot-a", "busybox:1.36"),
    ("transform", "slot-b", "alpine:3.20"),
    ("load", "slot-a", "busybox:1.36"),
    ("check", "slot-b", "alpine:3.20"),
]


def chain_dag(dag_id: str, **options: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **options) as chain:
            one = chain.stage("one", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo one"])
            two = chain.stage("two", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo two"])
            one >> two
    return dag


def realistic_dag(dag_id: str) -> Any:
    """4 stages: two images, one stage with a few env vars, the last one failing (exit 3)."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    env = {"MODE": "strict", "TARGET_TABLE": "analytics.daily_orders", "BATCH_SIZE": "5000", "DRY_RUN": "0"}
    with DAG(dag_id, schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, keep_pod=True, **FAST_POD) as chain:
            extract = chain.stage("extract", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo extract"])
            transform = chain.stage(
                "transform",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", 'echo "$MODE $TARGET_TABLE"'],
                env=env,
            )
            load = chain.stage("load", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo load"])
            check = chain.stage(
                "check",
                image="alpine:3.20",
                cmds=["/bin/sh", "-c", "echo bad >&2; exit 3"],
                env={"STRICT": "yes"},
            )
            extract >> transform >> load >> check
    return dag


def describe(cluster: Any, tmp_path: Path, name: str) -> str:
    """`kubectl describe pod NAME` in the default namespace, through the real kubectl."""
    kubeconfig = cluster.write_kubeconfig(tmp_path / "describe-kubeconfig")
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "describe", "pod", "-n", "default", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_describe_of_a_chain_pod_is_small_and_holds_no_script(e2e_cluster, capfd, tmp_path: Path):
    history = pod_events(e2e_cluster)
    run = run_inline(realistic_dag("runner_image_describe"))
    out = capfd.readouterr().out
    assert str(run.state) == "failed", out[-3000:]  # check's own exit code 3
    assert [task_states(run)[f"c.{s}"][0] for s in ("extract", "transform", "load", "check")] == [
        "success",
        "success",
        "success",
        "failed",
    ]
    pod = next(o for k, r, o in history if r is R.PODS and k == "ADDED")
    assert pod["spec"]["initContainers"][0]["image"] == DEFAULT_RUNNER_IMAGE
    described = describe(e2e_cluster, tmp_path, pod["metadata"]["name"])
    # the same DAG again: its new pod lands on a node that holds the three images (as every chain pod does
    # after the first on a node, the next stages' images prewarmed): the kubelet pulls nothing
    added = len(history)
    again = run_inline(realistic_dag("runner_image_describe"))
    assert str(again.state) == "failed"
    second = next(o for k, r, o in history[added:] if r is R.PODS and k == "ADDED")
    warm = describe(e2e_cluster, tmp_path, second["metadata"]["name"])
    assert "Pulling" not in warm and warm.count("already present on machine") == 3, warm
    with capfd.disabled():
        print(f"\ndescribe of the next pod, images on the node: {len(warm.encode())} bytes")
    assert len(warm.encode()) < WARM_LIMIT, warm
    assert "kruise-chain-runner" in described and DEFAULT_RUNNER_IMAGE in described  # the init container
    for line in runner_script().splitlines():  # nothing of the script: one line names its ConfigMap
        assert len(line) < 30 or line not in described
    assert f"KC_RUNNER:         <set to the key 'runner' of config map '{configmap_name()}'>" in described
    # the pod as built: all but its annotations and its events (the kubelet's: 13 here, 1.3 KB)
    built = re.sub(r"\nAnnotations:.*?\n(?=Status:)|\nEvents:.*", "\n", described, flags=re.S)
    assert len(built.encode()) < DESCRIBE_LIMIT, built
    # the whole of it, as a user reads it: the pod's own events are in (the kubelet's: pulls, starts; a 1.35
    # kubelet words a start "Container started", the container being the event's fieldPath, #134043)
    events = described[described.index("\nEvents:") :]
    assert "Scheduled" in events and "Container started" in events, events
    assert len(described.encode()) < WHOLE_LIMIT, described
    # no script inline: the init container runs one line of busybox's shell (the check and the install), the
    # slots the runner and the startup probe the runner's `--up` (the kernel runs each through its `#!` line)
    assert "Startup:        exec [/kruise-chain/bin/runner --up]" in described
    commands = re.findall(r"\n    Command:\n((?:      \S.*\n)+)", described)
    init = "".join(f"      {part}\n" for part in INSTALL_COMMAND)
    assert commands == [init] + ["      /kruise-chain/bin/runner\n"] * 2, commands
    assert "busybox sh" not in described and "runner.sh" not in described
    assert "KC_GENERATION" not in described and "sizing" not in described
    # what the run added: the stage records, ONE annotation of one line (kubectl prints its key and one line
    # cut at 138 characters, whatever the number of stages), newest first: the last stage's record head
    # (which generation ran in which slot, its try, how and on which image); no run spec (the swaps and the
    # kept pod's teardown retire them), so no stage's command or env is left
    notes = described[described.index("\nAnnotations:") : described.index("\nStatus:")]
    with capfd.disabled():
        print(
            f"\nkubectl describe of the 4-stage run's pod: {len(described.encode())} bytes, its annotations "
            f"{len(notes.encode())} bytes, the pod as built {len(built.encode())} bytes"
        )
    newest = '{"check":{"generation":4,"slot":"slot-b","try":1,"action":"go","image":"alpine:3.20"'
    assert re.search(rf"airflow-kruise-chain/stages:\n\s+{re.escape(newest)}", notes), notes
    assert "airflow-kruise-chain/stage." not in notes, notes  # no annotation per stage
    name = pod["metadata"]["name"]
    last = [o for _k, r, o in history if r is R.PODS and o["metadata"]["name"] == name][-1]
    records = json.loads(last["metadata"]["annotations"]["airflow-kruise-chain/stages"])
    assert list(records) == [stage for stage, _slot, _image in reversed(RUNS)]
    for generation, (stage, slot, image) in enumerate(RUNS, start=1):
        head = {"generation": generation, "slot": slot, "try": 1, "action": "go", "image": image}
        assert list(records[stage].items())[:5] == list(head.items()), records
    assert ".run:" not in notes and "kc_" not in notes, notes
    # the pod's seal: its annotation alone shows it; the slots' env names where it comes from
    seal = pod["metadata"]["annotations"]["airflow-kruise-chain/seal"]
    assert described.count(seal) == 1 and seal in notes and described.count("KC_SEAL:") == 2, described
    assert not [value for value in ("strict", "analytics.daily_orders", "exit 3") if value in described]
    assert len(notes.encode()) < ANNOTATIONS_LIMIT, notes
