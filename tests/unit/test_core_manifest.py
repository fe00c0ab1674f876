"""The chain pod (slots, the runner's init container and volumes), names and selectors."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from kubernetes.client import ApiClient

from airflow_kruise_chain.core import (
    ChainConfigError,
    ChainSpec,
    StageSpec,
    build_chain_pod,
    chain_labels,
    chain_selector,
    label_value,
    pod_name_for,
    runner_script,
)
from airflow_kruise_chain.core.manifest import deep_merge, of_run, slot_pull_policy
from airflow_kruise_chain.core.resources import slot_resources
from airflow_kruise_chain.core.wire import RUNNER_COMMAND

RUN_ID = "manual__2024-05-01T10:00:00.123456+00:00"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def make_chain(**kwargs) -> ChainSpec:
    stages = kwargs.pop(
        "stages",
        [
            StageSpec("extract", "acme/extract:1.4", cmds=["extract"]),
            StageSpec("transform", "acme/transform:2.0", cmds=["transform"]),
            StageSpec("load", "acme/load:1.1", cmds=["load"]),
        ],
    )
    spec = ChainSpec(name="etl", namespace="data", stages=stages, **kwargs)
    spec.validate()
    return spec


def make_pod(spec: ChainSpec, dag_id: str = "nightly", run_id: str = RUN_ID) -> dict:
    return build_chain_pod(
        spec,
        pod_name=pod_name_for(spec.name, dag_id, run_id),
        dag_id=dag_id,
        run_id=run_id,
        first_images=spec.first_images,
    )


def as_v1_pod_and_back(pod: dict) -> dict:
    """Round trip through the client's V1Pod model: a misspelt or misplaced field would be dropped."""
    client = ApiClient()

    class Response:
        data = json.dumps(pod)

    return client.sanitize_for_serialization(client.deserialize(Response(), "V1Pod"))


def test_pod_is_a_valid_v1_pod() -> None:
    pod = make_pod(make_chain(scratch_size_limit="1Gi", node_selector={"pool": "etl"}))
    assert as_v1_pod_and_back(pod) == pod


def test_pod_layout() -> None:
    pod = make_pod(make_chain(scratch_size_limit="1Gi"))
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["slot-a", "slot-b"]
    assert [c["image"] for c in spec["containers"]] == ["acme/extract:1.4", "acme/transform:2.0"]
    (init,) = spec["initContainers"]
    assert init["image"] == "busybox:1.37.0-musl"  # the official static busybox: nothing to build
    # no script in the pod: the runner comes from its ConfigMap (named by its content) as env, checked
    # against the sum the pod spec carries before anything is installed; one line of the image's shell
    assert init["command"][:2] == ["/bin/sh", "-c"] and "\n" not in init["command"][2]
    assert runner_script().startswith("#!/kruise-chain/bin/busybox sh\n")
    digest = hashlib.sha256(runner_script().encode()).hexdigest()
    assert init["env"] == [
        {
            "name": "KC_RUNNER",
            "valueFrom": {"configMapKeyRef": {"name": f"kruise-chain-runner-{digest[:16]}", "key": "runner"}},
        },
        {"name": "KC_RUNNER_SHA256", "value": digest},
    ]
    assert init["volumeMounts"] == [{"name": "kruise-chain", "mountPath": "/kruise-chain"}]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["scratch"] == {"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}
    assert volumes["kruise-chain"] == {"name": "kruise-chain", "emptyDir": {}}
    for container in spec["containers"]:
        slot = container["name"]
        assert container["command"] == ["/kruise-chain/bin/runner"]
        assert "args" not in container
        # sealed: the runner's files read-only, the slot's own state and run spec, nothing of the other slot
        assert container["volumeMounts"] == [
            {"name": "scratch", "mountPath": "/scratch"},
            {"name": "kruise-chain", "mountPath": "/kruise-chain", "readOnly": True},
            {"name": f"kruise-chain-state-{slot}", "mountPath": "/kruise-chain-state"},
            {"name": f"kruise-chain-meta-{slot}", "mountPath": "/kruise-chain-meta", "readOnly": True},
            # the slot's own temporary folders, emptied by its runner after each generation
            {"name": f"kruise-chain-tmp-{slot}", "mountPath": "/tmp"},
            {"name": f"kruise-chain-shm-{slot}", "mountPath": "/dev/shm"},
            # the init container's copy of the pod's hosts file, read-only: the kubelet's own is writable
            {"name": "kruise-chain", "mountPath": "/etc/hosts", "subPath": "hosts", "readOnly": True},
        ]
        assert volumes[f"kruise-chain-state-{slot}"] == {"name": f"kruise-chain-state-{slot}", "emptyDir": {}}
        assert volumes[f"kruise-chain-tmp-{slot}"] == {"name": f"kruise-chain-tmp-{slot}", "emptyDir": {}}
        shm = {"name": f"kruise-chain-shm-{slot}", "emptyDir": {"medium": "Memory"}}
        assert volumes[f"kruise-chain-shm-{slot}"] == shm
        # sealed: no writable layer (a same-image swap keeps it), no privilege escalation
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        meta = volumes[f"kruise-chain-meta-{slot}"]["projected"]
        assert meta["defaultMode"] == 0o444 and len(meta["sources"]) == 1
        assert meta["sources"][0]["downwardAPI"]["items"] == [
            {"path": path, "fieldRef": {"fieldPath": f"metadata.annotations['airflow-kruise-chain/{key}']"}}
            for path, key in (
                (slot, f"{slot}.run"),
                *((f"{slot}.{f}", f"{slot}.{f}") for f in ("stop", "replay")),
            )
        ]
        env = {e["name"]: e for e in container["env"]}
        assert env["KC_SLOT"]["value"] == slot
        field_ref = env["KC_RUN"]["valueFrom"]["fieldRef"]
        assert field_ref["fieldPath"] == f"metadata.annotations['airflow-kruise-chain/{slot}.run']"
        # the runner reads no other (its generation is in KC_RUN) but the folders it empties (the stages'
        # HOME is /tmp/.kruise-chain-home), the pod's seal, which no volume shows, and the id of the prepare
        # the container was created for (a go into a prepared slot names it)
        assert set(env) == {"KC_SLOT", "KC_RUN", "KC_TMP", "KC_SEAL", "KC_PREPARE"}
        prepare_ref = env["KC_PREPARE"]["valueFrom"]["fieldRef"]
        assert prepare_ref["fieldPath"] == f"metadata.annotations['airflow-kruise-chain/{slot}.prepare-id']"
        seal_ref = env["KC_SEAL"]["valueFrom"]["fieldRef"]
        assert seal_ref["fieldPath"] == "metadata.annotations['airflow-kruise-chain/seal']"
        assert "airflow-kruise-chain/seal" not in json.dumps(spec["volumes"])
        assert env["KC_TMP"]["value"] == "/tmp /dev/shm"
        # Ready while its runner serves it, running a stage too: no readiness probe to fail while one runs
        assert "readinessProbe" not in container
        probe = container["startupProbe"]
        # the runner's own file waits for it, no inline script (`kubectl describe` prints the command)
        assert probe["exec"]["command"] == ["/kruise-chain/bin/runner", "--up"]
        assert probe["timeoutSeconds"] > 1  # it waits for the runner rather than fail
        assert container["terminationMessagePath"] == "/dev/termination-log"


def test_runner_image_is_configurable() -> None:
    pod = make_pod(make_chain(runner_image="registry.example/mirror/busybox:1.37.0-musl"))
    assert pod["spec"]["initContainers"][0]["image"] == "registry.example/mirror/busybox:1.37.0-musl"
    with pytest.raises(ChainConfigError, match="runner_image"):
        make_chain(runner_image="Not An Image")


def test_pod_metadata_starts_idle() -> None:
    pod = make_pod(make_chain(labels={"team": "data"}, annotations={"note": "x"}))
    meta = pod["metadata"]
    assert meta["namespace"] == "data"
    assert meta["labels"] == {"team": "data", **chain_labels("nightly", RUN_ID, "etl")}
    annotations = meta["annotations"]
    assert annotations["note"] == "x"
    assert annotations["airflow-kruise-chain/generation"] == "0"
    assert annotations["airflow-kruise-chain/slot-a.generation"] == "0"
    assert annotations["airflow-kruise-chain/slot-b.generation"] == "0"
    assert annotations["airflow-kruise-chain/slot-a.run"] == ""
    # the pod's seal (its runners derive each generation's token from it): random, a pod's own
    seal = annotations["airflow-kruise-chain/seal"]
    assert len(seal) == 32 and int(seal, 16) >= 0
    assert make_pod(make_chain())["metadata"]["annotations"]["airflow-kruise-chain/seal"] != seal
    # the DAG run is in the labels (`of_run`), not again in annotations
    assert not {"airflow-kruise-chain/run-id", "airflow-kruise-chain/dag-id"} & set(annotations)
    assert of_run(meta["labels"], "nightly", RUN_ID)
    assert not of_run(meta["labels"], "nightly", RUN_ID + "x") and not of_run(meta["labels"], "other", RUN_ID)


def test_pass_throughs() -> None:
    spec = make_chain(
        node_selector={"pool": "etl"},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "etl", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
        },
        service_account_name="etl-runner",
        image_pull_secrets=["regcred"],
        security_context={"fsGroup": 1000},
    )
    pod_spec = make_pod(spec)["spec"]
    assert pod_spec["nodeSelector"] == {"pool": "etl"}
    assert pod_spec["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in pod_spec["affinity"]
    assert pod_spec["serviceAccountName"] == "etl-runner"
    assert pod_spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod_spec["securityContext"] == {"fsGroup": 1000}
    bare = make_pod(make_chain())["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "serviceAccountName", "imagePullSecrets"} & set(
        bare
    )


def test_slot_resources_are_the_envelope_of_all_stages() -> None:
    stages = [
        StageSpec("a", "i/a:1", cmds=["a"], resources={"requests": {"cpu": "500m", "memory": "1Gi"}}),
        StageSpec("b", "i/b:1", cmds=["b"], resources={"limits": {"cpu": "2", "memory": "512Mi"}}),
        StageSpec(
            "c", "i/c:1", cmds=["c"], resources={"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
        ),
        StageSpec("d", "i/d:1", cmds=["d"]),
    ]
    # memory: requested without a limit by "a" -> no limit; cpu: "a" and "c" have no limit -> none either.
    assert slot_resources(stages) == {
        "requests": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    bounded = [
        StageSpec(
            "a", "i/a:1", cmds=["a"], resources={"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}}
        ),
        StageSpec("b", "i/b:1", cmds=["b"], resources={"requests": {"cpu": "100m"}, "limits": {"cpu": "1"}}),
    ]
    assert slot_resources(bounded) == {"requests": {"cpu": "250m"}, "limits": {"cpu": "1"}}
    assert slot_resources([StageSpec("a", "i/a:1", cmds=["a"])]) == {}
    pod = make_pod(make_chain(stages=bounded))
    assert all(c["resources"] == slot_resources(bounded) for c in pod["spec"]["containers"])


def test_slot_pull_policy_is_the_strictest_needed() -> None:
    def stages(*pairs):
        return [
            StageSpec(f"s{i}", image, cmds=["x"], image_pull_policy=p) for i, (image, p) in enumerate(pairs)
        ]

    assert slot_pull_policy(stages(("a:1", None), ("b:2", None))) == "IfNotPresent"
    assert slot_pull_policy(stages(("a:1", None), ("b", None))) == "Always"
    assert slot_pull_policy(stages(("a:latest", "IfNotPresent"), ("b:1", "Never"))) == "IfNotPresent"
    assert slot_pull_policy(stages(("a:1", "Never"), ("b:1", "Never"))) == "Never"


def test_pod_template_is_merged_last() -> None:
    template = {
        "metadata": {"labels": {"extra": "yes"}},
        "spec": {
            "priorityClassName": "high",
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "slot-a", "securityContext": {"runAsNonRoot": True}},
                {"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
            ],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
        },
    }
    pod = make_pod(make_chain(scratch_size_limit="64Mi", pod_template=template))
    spec = pod["spec"]
    assert spec["priorityClassName"] == "high"
    assert pod["metadata"]["labels"]["extra"] == "yes"
    assert pod["metadata"]["labels"]["airflow-kruise-chain/chain"] == "etl"
    assert [c["name"] for c in spec["containers"]] == ["slot-a", "slot-b", "sidecar"]
    assert spec["containers"][0]["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["DAC_OVERRIDE", "DAC_READ_SEARCH", "SYS_PTRACE"]},
        "readOnlyRootFilesystem": True,
    }
    assert spec["containers"][0]["command"] == list(RUNNER_COMMAND)
    assert spec["volumes"][0] == {"name": "scratch", "emptyDir": {"sizeLimit": "64Mi", "medium": "Memory"}}
    assert as_v1_pod_and_back(pod) == pod


@pytest.mark.parametrize(
    ("template", "field"),
    [
        ({"spec": {"containers": [{"name": "slot-a", "securityContext": None}]}}, "[slot-a].securityContext"),
        (
            {"spec": {"containers": [{"name": "slot-b", "securityContext": {"capabilities": None}}]}},
            "[slot-b].securityContext",
        ),
        (
            {"spec": {"containers": [{"name": "slot-a", "securityContext": {"capabilities": {"drop": []}}}]}},
            "[slot-a].securityContext",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "slot-a", "securityContext": {"capabilities": {"add": ["cap_sys_ptrace"]}}}
                    ]
                }
            },
            "[slot-a].securityContext.capabilities.add[0]",
        ),
        (
            {"spec": {"containers": [{"name": "slot-b", "securityContext": {"privileged": True}}]}},
            "[slot-b].securityContext.privileged",
        ),
        (
            {
                "spec": {
                    "initContainers": [
                        {"name": "kruise-chain-runner", "securityContext": {"privileged": True}}
                    ]
                }
            },
            "initContainers[kruise-chain-runner].securityContext",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {"name": "slot-a", "volumeMounts": [{"name": "kruise-chain", "readOnly": False}]}
                    ]
                }
            },
            "[slot-a].volumeMounts",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {
                            "name": "slot-a",
                            "volumeMounts": [{"name": "kruise-chain-state-slot-b", "mountPath": "/x"}],
                        }
                    ]
                }
            },
            "[slot-a].volumeMounts",
        ),
        (
            {
                "spec": {
                    "containers": [
                        {
                            "name": "side",
                            "image": "i:1",
                            "volumeMounts": [{"name": "kruise-chain", "mountPath": "/k"}],
                        }
                    ]
                }
            },
            "[side].volumeMounts",
        ),
        (
            {"spec": {"volumes": [{"name": "kruise-chain", "hostPath": {"path": "/"}}]}},
            "volumes[kruise-chain]",
        ),
        ({"spec": {"volumes": [{"name": "scratch", "hostPath": {"path": "/"}}]}}, "volumes[scratch]"),
        (  # a set-user-ID program would make a stage another user than its runner
            {
                "spec": {
                    "containers": [{"name": "slot-a", "securityContext": {"allowPrivilegeEscalation": True}}]
                }
            },
            "[slot-a].securityContext.allowPrivilegeEscalation",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "slot-b", "securityContext": {"allowPrivilegeEscalation": None}}]
                }
            },
            "[slot-b].securityContext.allowPrivilegeEscalation",
        ),
        (
            {
                "spec": {
                    "initContainers": [
                        {"name": "kruise-chain-runner", "securityContext": {"allowPrivilegeEscalation": True}}
                    ]
                }
            },
            "initContainers[kruise-chain-runner].securityContext",
        ),
        (  # the layer would outlive the stage
            {
                "spec": {
                    "containers": [{"name": "slot-a", "securityContext": {"readOnlyRootFilesystem": False}}]
                }
            },
            "[slot-a].securityContext.readOnlyRootFilesystem",
        ),
        (
            {
                "spec": {
                    "containers": [{"name": "slot-b", "securityContext": {"readOnlyRootFilesystem": None}}]
                }
            },
            "[slot-b].securityContext.readOnlyRootFilesystem",
        ),
        (  # another slot's temporary folder, or one kept across stages
            {
                "spec": {
                    "containers": [
                        {
                            "name": "slot-a",
                            "volumeMounts": [{"name": "kruise-chain-tmp-slot-b", "mountPath": "/x"}],
                        }
                    ]
                }
            },
            "[slot-a].volumeMounts",
        ),
        (
            {"spec": {"volumes": [{"name": "kruise-chain-shm-slot-a", "hostPath": {"path": "/dev/shm"}}]}},
            "volumes[kruise-chain-shm-slot-a]",
        ),
    ],
)
def test_pod_template_cannot_reopen_the_runner(template: dict, field: str) -> None:
    """A template that would let a stage reach its runner (its memory, its files, the other slot's state) is
    refused naming the field, before any pod exists."""
    with pytest.raises(ChainConfigError) as caught:
        make_pod(make_chain(pod_template=template))
    assert caught.value.field.startswith("pod_template.spec.") and caught.value.field.endswith(field)


def test_deep_merge_rules() -> None:
    base = {"a": {"b": 1, "c": 2}, "l": [1, 2], "n": [{"name": "x", "v": 1}], "keep": True}
    merged = deep_merge(
        base, {"a": {"c": None, "d": 3}, "l": [3], "n": [{"name": "x", "w": 2}, {"name": "y"}]}
    )
    assert merged == {
        "a": {"b": 1, "d": 3},
        "l": [3],
        "n": [{"name": "x", "v": 1, "w": 2}, {"name": "y"}],
        "keep": True,
    }
    assert base["a"] == {"b": 1, "c": 2}  # inputs are not modified


def test_pod_name_is_deterministic_and_per_run() -> None:
    name = pod_name_for("etl", "nightly", RUN_ID)
    assert name == pod_name_for("etl", "nightly", RUN_ID)
    assert name != pod_name_for("etl", "nightly", RUN_ID + "x")
    assert name != pod_name_for("etl", "other", RUN_ID)
    assert name != pod_name_for("etl2", "nightly", RUN_ID)
    longest = pod_name_for("c" * 40, "d" * 250, RUN_ID)
    for candidate in (name, longest):
        assert len(candidate) <= 63 and DNS_LABEL.fullmatch(candidate)


def test_labels_are_valid_and_selector_matches_them() -> None:
    labels = chain_labels("d" * 250, RUN_ID, "etl")
    assert all(len(v) <= 63 and LABEL_VALUE.fullmatch(v) for v in labels.values())
    assert labels["app.kubernetes.io/managed-by"] == "airflow-kruise-chain"
    assert labels["airflow-kruise-chain/chain"] == "etl"
    assert labels["airflow-kruise-chain/run-id"].startswith("manual__2024-05-01T10-00-00.123456-00-00-")
    selector = dict(part.split("=", 1) for part in chain_selector("d" * 250, RUN_ID, "etl").split(","))
    assert selector == labels
    assert chain_labels("d" * 250, RUN_ID, "etl") != chain_labels("d" * 251, RUN_ID, "etl")


def test_label_value() -> None:
    assert label_value("nightly_etl.v2") == "nightly_etl.v2"
    assert label_value("a:b") != label_value("a+b")
    assert re.fullmatch(r"[0-9a-f]{10}", label_value(":::"))
    assert label_value("nightly", always_hash=True).startswith("nightly-")


@pytest.mark.parametrize("images", [("acme/a:1", "acme/b:1"), ("acme/a:1", "acme/a:1")])
def test_first_images_are_used(images: tuple[str, str]) -> None:
    pod = build_chain_pod(make_chain(), pod_name="p", dag_id="d", run_id="r", first_images=images)
    assert tuple(c["image"] for c in pod["spec"]["containers"]) == images


def test_the_runner_is_execute_only_and_no_container_can_read_or_trace_it():
    from airflow_kruise_chain.core.manifest import UNREADABLE_RUNNER_CAPABILITIES

    pod = make_pod(make_chain())
    containers = [*pod["spec"]["initContainers"], *pod["spec"]["containers"]]
    for c in containers:
        assert set(UNREADABLE_RUNNER_CAPABILITIES) <= set(c["securityContext"]["capabilities"]["drop"])
    # the runner's busybox execute-only, the runner readable (its shell reads it) and executable (the slots
    # exec it through its `#!` line, which runs the execute-only busybox: the kernel checks the interpreter
    # it loads, fs/exec.c begin_new_exec would_dump(bprm, bprm->file)); tests/unit/test_core_runner_nonroot.py
    # runs the line and checks the modes
    install = pod["spec"]["initContainers"][0]["command"][2]
    assert "cd /kruise-chain;" in install and ";chmod 555 runner;chmod 111 busybox;" in install
    assert ";mv -f runner busybox bin;" in install  # then the seal probe (test_core_seal_probe.py)
