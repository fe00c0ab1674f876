"""Per-stage volume mounts on shared slots (core/mounts.py): declared at chain level, checked at parse, the
union mounted in both slots."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core import ChainConfigError, ChainSpec, StageSpec
from airflow_kruise_chain.core.manifest import build_chain_pod

VOLUMES = [
    {"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
    {"name": "tmp", "emptyDir": {}},
]


def chain(*mounts: list[dict], volumes: list[dict] = VOLUMES) -> ChainSpec:
    stages = [StageSpec(f"s{i}", "busybox:1.36", ["true"], volume_mounts=m) for i, m in enumerate(mounts)]
    return ChainSpec(name="c", namespace="default", stages=stages, volumes=volumes)


def test_both_slots_mount_the_union_of_the_stages_mounts() -> None:
    spec = chain(
        [{"name": "models", "mountPath": "/models", "readOnly": True}],
        [{"name": "models", "mountPath": "/input/"}, {"name": "tmp", "mountPath": "/work"}],
        [],
    )
    spec.validate()
    pod = build_chain_pod(spec, pod_name="p", dag_id="d", run_id="r", first_images=spec.first_images)
    assert {"name": "models", "persistentVolumeClaim": {"claimName": "models"}} in pod["spec"]["volumes"]
    for container in pod["spec"]["containers"]:
        mine = [m for m in container["volumeMounts"] if m["name"] in ("models", "tmp")]
        assert mine == [
            {"name": "models", "mountPath": "/models", "readOnly": True},
            {"name": "models", "mountPath": "/input"},
            {"name": "tmp", "mountPath": "/work"},
        ]


@pytest.mark.parametrize(
    ("mounts", "field", "words"),
    [
        (
            [[{"name": "data", "mountPath": "/d"}]],
            "stages[0].volume_mounts[0].name",
            "not a volume of the chain",
        ),
        (
            [[{"name": "tmp", "mountPath": "/scratch/x"}]],
            "stages[0].volume_mounts[0].mountPath",
            "chain's own",
        ),
        (
            [[{"name": "tmp", "mountPath": "/kruise-chain-x"}]],
            "stages[0].volume_mounts[0].mountPath",
            "chain's own",
        ),
        (  # the slots' own temporary folders, which the runner empties after each generation
            [[{"name": "tmp", "mountPath": "/tmp/cache"}]],
            "stages[0].volume_mounts[0].mountPath",
            "chain's own",
        ),
        ([[{"name": "tmp", "mountPath": "/dev/shm"}]], "stages[0].volume_mounts[0].mountPath", "chain's own"),
        (  # the init container's read-only copy of the pod's hosts file (manifest.HOSTS_MOUNT)
            [[{"name": "tmp", "mountPath": "/etc/hosts", "subPath": "h"}]],
            "stages[0].volume_mounts[0].mountPath",
            "chain's own",
        ),
        ([[{"name": "tmp", "mountPath": "rel"}]], "stages[0].volume_mounts[0].mountPath", "absolute"),
        (
            [[{"name": "tmp", "mountPath": "/a", "mountPropagation": "x"}]],
            "stages[0].volume_mounts[0]",
            "readOnly",
        ),
        (
            [[{"name": "tmp", "mountPath": "/a"}], [{"name": "models", "mountPath": "/a/"}]],
            "stages[1].volume_mounts[0].mountPath",
            "where stage 's0' mounts another volume",
        ),
    ],
)
def test_mounts_a_shared_slot_cannot_hold_are_refused_naming_the_field(mounts, field, words) -> None:
    with pytest.raises(ChainConfigError) as err:
        chain(*mounts).validate()
    assert err.value.field == field and words in err.value.message


@pytest.mark.parametrize(
    ("volumes", "words"),
    [
        ([{"name": "scratch", "emptyDir": {}}], "chain's own"),
        ([{"name": "kc-x", "emptyDir": {}}], "chain's own"),
        ([{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}], "duplicate"),
        ([{"name": "a"}], "pod volume"),
    ],
)
def test_chain_volumes_are_checked(volumes, words) -> None:
    with pytest.raises(ChainConfigError) as err:
        chain([], volumes=volumes).validate()
    assert err.value.field.startswith("volumes[") and words in err.value.message


def test_the_chain_round_trips_its_volumes_and_mounts() -> None:
    spec = chain([{"name": "tmp", "mountPath": "/work"}])
    assert ChainSpec.from_dict(spec.to_dict()) == spec
