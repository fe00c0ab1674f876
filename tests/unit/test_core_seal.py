"""What a chain's `pod_template` may set (`core/seal.py`): an allow-list checked at parse time, naming the
field it refuses; what it allows keeps the pod within Pod Security baseline (restricted for a restricted
chain), judged by the local cluster's checks (k8s.io/pod-security-admission's, which the API enforces)."""

from __future__ import annotations

from typing import Any

import pytest
from kruise_local.pod_security_checks import evaluate

from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec, build_chain_pod

RUN = "airflow-kruise-chain/slot-b.run"


def build(template: dict[str, Any] | None, **options: Any) -> dict[str, Any]:
    chain = ChainSpec(
        name="etl",
        namespace="data",
        stages=[StageSpec("a", "busybox:1.36", ["true"]), StageSpec("b", "alpine:3.20", ["true"])],
        volumes=[{"name": "data", "emptyDir": {}}],
        pod_template=template,
        **options,
    )
    chain.validate()
    return build_chain_pod(chain, pod_name="p", dag_id="d", run_id="r", first_images=chain.first_images)


def violations(pod: dict[str, Any], level: str) -> list[str]:
    return [reason for reason, _ in evaluate(level, 35, pod["metadata"], pod["spec"])]


def _slot(**fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "slot-a", **fields}]}}


ALLOWED = {
    "metadata": {"labels": {"team": "data"}, "annotations": {"owner": "me"}},
    "spec": {
        "priorityClassName": "high",
        "terminationGracePeriodSeconds": 5,
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "runtimeClassName": "runc",
        "dnsPolicy": "ClusterFirst",
        "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
        "imagePullSecrets": [{"name": "pull"}],
        "securityContext": {
            "runAsUser": 1000,
            "fsGroup": 2000,
            "seccompProfile": {"type": "RuntimeDefault"},
            "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}],
        },
        "volumes": [
            {"name": "extra", "emptyDir": {}},
            {
                "name": "info",
                "downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
        ],
        "containers": [
            {
                "name": "slot-a",
                "workingDir": "/work",
                "ports": [{"containerPort": 8080}],
                "volumeMounts": [
                    {"name": "extra", "mountPath": "/extra"},
                    {"name": "info", "mountPath": "/info"},
                ],
                "securityContext": {
                    "runAsUser": 1000,
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            },
            {"name": "logger", "image": "busybox:1.36", "command": ["sleep", "infinity"]},
        ],
        "initContainers": [
            {"name": "kruise-chain-runner", "resources": {"limits": {"memory": "64Mi", "cpu": "100m"}}},
            {"name": "warm", "image": "busybox:1.36", "command": ["true"], "volumeMounts": []},
            {"name": "proxy", "image": "busybox:1.36", "restartPolicy": "Always", "command": ["sleep", "9"]},
        ],
    },
}


def test_what_a_template_may_set_keeps_the_pod_within_baseline() -> None:
    pod = build(ALLOWED)
    assert violations(pod, "baseline") == []
    spec = pod["spec"]
    assert spec["priorityClassName"] == "high" and spec["runtimeClassName"] == "runc"
    slot = spec["containers"][0]
    assert slot["ports"] == [{"containerPort": 8080}] and slot["workingDir"] == "/work"
    assert [c["name"] for c in spec["initContainers"]] == ["kruise-chain-runner", "warm", "proxy"]
    assert spec["initContainers"][0]["resources"]["limits"]["memory"] == "64Mi"


def test_a_restricted_chains_template_keeps_it_restricted() -> None:
    template = {
        "spec": {
            "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
            "containers": [{"name": "slot-b", "ports": [{"containerPort": 80}]}],
        }
    }
    assert violations(build(template, pod_security="restricted"), "restricted") == []


REFUSED = [
    # capabilities: only baseline's, less DAC_OVERRIDE; names as a runtime reads them
    (
        _slot(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        "[slot-a].securityContext.capabilities.add[0]",
    ),
    (
        _slot(securityContext={"capabilities": {"add": [" SYS_PTRACE"]}}),
        "[slot-a].securityContext.capabilities.add[0]",
    ),
    (
        _slot(securityContext={"capabilities": {"add": ["dac_override"]}}),
        "securityContext.capabilities.add[0]",
    ),
    (
        _slot(securityContext={"capabilities": {"drop": ["ALL "]}}),
        "[slot-a].securityContext.capabilities.drop[0]",
    ),
    # the runner's environment, files and hooks
    (_slot(envFrom=[{"configMapRef": {"name": "cm"}}]), "[slot-a].envFrom"),
    (_slot(env=[{"name": "KC_META", "value": "/tmp"}]), "[slot-a].env"),
    (_slot(lifecycle={"postStart": {"exec": {"command": ["sh", "-c", "x"]}}}), "[slot-a].lifecycle"),
    (_slot(command=["sh"]), "[slot-a].command"),
    (_slot(readinessProbe={"exec": {"command": ["true"]}}), "[slot-a].readinessProbe"),
    (_slot(resources={"limits": {"memory": "1Gi"}}), "[slot-a].resources"),
    (
        {
            "spec": {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "slot-a",
                        "volumeMounts": [
                            {"name": "x", "mountPath": "/kruise-chain-meta/slot-a", "subPath": "s"}
                        ],
                    }
                ],
            }
        },
        "[slot-a].volumeMounts[0].mountPath",
    ),
    (
        {
            "spec": {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "slot-b",
                        "volumeMounts": [
                            {"name": "x", "mountPath": "/kruise-chain/bin/runner", "subPath": "r"}
                        ],
                    }
                ],
            }
        },
        "[slot-b].volumeMounts[0].mountPath",
    ),
    (  # a writable hosts file for every later stage
        {
            "spec": {
                "volumes": [{"name": "x", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "slot-a",
                        "volumeMounts": [{"name": "x", "mountPath": "/etc/hosts", "subPath": "h"}],
                    }
                ],
            }
        },
        "[slot-a].volumeMounts[0].mountPath",
    ),
    (
        {
            "spec": {
                "containers": [
                    {"name": "slot-a", "volumeMounts": [{"name": "data", "mountPath": "/scratch/x"}]}
                ]
            }
        },
        "[slot-a].volumeMounts[0].mountPath",
    ),
    # the run specs: annotations
    (
        {
            "spec": {
                "volumes": [
                    {
                        "name": "all",
                        "downwardAPI": {
                            "items": [{"path": "a", "fieldRef": {"fieldPath": "metadata.annotations"}}]
                        },
                    }
                ]
            }
        },
        "volumes[all].items[0]",
    ),
    (
        {
            "spec": {
                "volumes": [
                    {
                        "name": "p",
                        "projected": {
                            "sources": [
                                {
                                    "downwardAPI": {
                                        "items": [
                                            {
                                                "path": "r",
                                                "fieldRef": {"fieldPath": f"metadata.annotations['{RUN}']"},
                                            }
                                        ]
                                    }
                                }
                            ]
                        },
                    }
                ]
            }
        },
        "volumes[p].items[0]",
    ),
    (
        {
            "spec": {
                "containers": [
                    {
                        "name": "side",
                        "image": "i:1",
                        "env": [
                            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations"}}}
                        ],
                    }
                ]
            }
        },
        "containers[side].env[0]",
    ),
    (
        {"metadata": {"annotations": {"airflow-kruise-chain/slot-a.run": "x"}}},
        "annotations['airflow-kruise-chain/slot-a.run']",
    ),
    (
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}},
        "labels['app.kubernetes.io/managed-by']",
    ),
    ({"metadata": {"ownerReferences": []}}, "metadata.ownerReferences"),
    # privilege
    (
        {"spec": {"containers": [{"name": "side", "image": "i:1", "securityContext": {"privileged": True}}]}},
        "containers[side].securityContext.privileged",
    ),
    (
        {
            "spec": {
                "initContainers": [{"name": "init", "image": "i:1", "securityContext": {"privileged": True}}]
            }
        },
        "initContainers[init].securityContext.privileged",
    ),
    (
        _slot(securityContext={"allowPrivilegeEscalation": True}),
        "[slot-a].securityContext.allowPrivilegeEscalation",
    ),
    (
        {
            "spec": {
                "containers": [
                    {"name": "side", "image": "i:1", "securityContext": {"allowPrivilegeEscalation": True}}
                ]
            }
        },
        "securityContext.allowPrivilegeEscalation",
    ),
    (_slot(securityContext={"procMount": "Unmasked"}), "[slot-a].securityContext.procMount"),
    (
        {"spec": {"initContainers": [{"name": "kruise-chain-runner", "image": "evil:1"}]}},
        "initContainers[kruise-chain-runner].image",
    ),
    # host namespaces and paths
    ({"spec": {"hostIPC": True}}, "spec.hostIPC"),
    ({"spec": {"hostNetwork": True}}, "spec.hostNetwork"),
    ({"spec": {"hostPID": True}}, "spec.hostPID"),
    ({"spec": {"shareProcessNamespace": True}}, "spec.shareProcessNamespace"),
    ({"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}, "volumes[h].hostPath"),
    ({"spec": {"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}}, "volumes[n].nfs"),
    (_slot(ports=[{"containerPort": 80, "hostPort": 80}]), "[slot-a].ports[0].hostPort"),
    # confinement
    (
        {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
        "spec.securityContext.seccompProfile",
    ),
    (
        _slot(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        "[slot-a].securityContext.seccompProfile",
    ),
    (
        _slot(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        "[slot-a].securityContext.appArmorProfile",
    ),
    (
        {
            "metadata": {
                "annotations": {"container.apparmor.security.beta.kubernetes.io/slot-a": "unconfined"}
            }
        },
        "annotations['container.apparmor.security.beta.kubernetes.io/slot-a']",
    ),
    (
        {"spec": {"securityContext": {"seLinuxOptions": {"user": "system_u"}}}},
        "spec.securityContext.seLinuxOptions",
    ),
    (
        {"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}}},
        "spec.securityContext.sysctls",
    ),
    # the chain's own
    ({"spec": {"restartPolicy": "Never"}}, "spec.restartPolicy"),
    ({"spec": {"resources": {"limits": {"memory": "1Gi"}}}}, "spec.resources"),
    ({"spec": {"ephemeralContainers": []}}, "spec.ephemeralContainers"),
    ({"kind": "Deployment"}, "pod_template.kind"),
]


@pytest.mark.parametrize(("template", "field"), REFUSED)
def test_what_could_undo_the_seal_is_refused_naming_the_field(template: dict[str, Any], field: str) -> None:
    with pytest.raises(ChainConfigError) as caught:
        build(template)
    assert caught.value.field.startswith("pod_template") and caught.value.field.endswith(field), caught.value


def test_a_restricted_chains_non_root_user_and_read_only_root_stay() -> None:
    with pytest.raises(ChainConfigError) as caught:
        build(_slot(securityContext={"runAsNonRoot": False}), pod_security="restricted")
    assert caught.value.field == "pod_template.spec.containers[slot-a].securityContext.runAsNonRoot"
    with pytest.raises(ChainConfigError) as caught:  # the slots' layer is read-only (a stage cannot plant)
        build(_slot(securityContext={"readOnlyRootFilesystem": False}))
    assert caught.value.field == "pod_template.spec.containers[slot-a].securityContext.readOnlyRootFilesystem"
