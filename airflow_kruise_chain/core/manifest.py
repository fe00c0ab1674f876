"""The chain pod (two slots, the runner's init container and volumes), names and selectors."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from . import mounts, sources
from .constants import (
    CHAIN_LABEL,
    DAG_ID_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RUN_ID_LABEL,
    RUNNER_VOLUME,
    SCRATCH_MOUNT,
    SCRATCH_VOLUME,
    SHM_MOUNT,
    SLOTS,
    TERMINATION_LOG,
    TMP_MOUNT,
)
from .errors import ChainConfigError
from .podview import StageRecord, records_annotation
from .resources import slot_resources
from .runnerinstall import HOSTS_SUBPATH, init_container
from .seal import check_pod_template
from .spec import ChainSpec, StageSpec, effective_pull_policy, is_label_value
from .wire import (
    DEFAULT_RUNNER_IMAGE,
    GENERATION_ANNOTATION,
    GENERATION_FIELD,
    META_MOUNT,
    PREPARE_ENV,
    PREPARE_ID_FIELD,
    REPLAY_FIELD,
    RUN_FIELD,
    RUNNER_COMMAND,
    RUNNER_MOUNT,
    RUNNER_STATE,
    SEAL_ANNOTATION,
    SEAL_ENV,
    SLOT_FIELDS,
    STAGE_FIELD,
    STAGES_ANNOTATION,
    STOP_FIELD,
    new_seal,
    slot_annotation,
)

INIT_CONTAINER = "kruise-chain-runner"
STARTUP_COMMAND: tuple[str, ...] = (*RUNNER_COMMAND, "--up")
"""Slot startup: `runner --up` waits (within the probe's timeout, rather than fail: a failed probe is an
`Unhealthy` warning event) until its runner serves the slot (its state is set up: the runner keeps
`<slot>.serving`). The runner's own file, not a script inline: `kubectl describe` shows the probe's command.

A slot has no readiness probe: the kubelet counts a started container without one Ready while it runs
(`prober_manager.go` `UpdatePodStatus`: "no readinessProbe -> always ready"), and the runner is the
container's main process, so Ready means its runner serves the slot, parked or running a stage. A probe that
failed while a stage ran (a slot "not ready" when busy) raised an `Unhealthy` warning each second of every
stage; whether a slot's generation has ended is read from its log (the runner's result line), never from
the pod (`status.StageStatus.confirmed`)."""
_PULL_POLICY_RANK = {"Never": 0, "IfNotPresent": 1, "Always": 2}
RESTRICTED_RUN_AS_USER = 65532
"""The user the containers of a `pod_security="restricted"` chain run as when its `security_context` names
none (the conventional unprivileged "nonroot" user; the runner needs no particular user)."""


SOURCES_FS_GROUP = RESTRICTED_RUN_AS_USER
"""The pod's `fsGroup` when it mounts a Secret or ConfigMap and its `security_context` names none.

The kubelet writes those volumes' files owned by root with their `defaultMode` (the chain's Secrets 0400),
which a runner that is not root (a `restricted` chain, a non-root `runAsUser` or image user) cannot read.
With an fsGroup the kubelet gives the volumes that group and group read (`SetVolumeOwnership`: 0400 becomes
0440) and every container of the pod that group as a supplemental one, so the runner reads them whatever its
user, and no one outside the pod's containers gains access. The same fsGroup also owns the pod's other
volumes (a PersistentVolumeClaim the chain mounts is chowned when the pod starts): name another in
`security_context` to change it."""


UNREADABLE_RUNNER_CAPABILITIES: tuple[str, ...] = ("DAC_OVERRIDE", "DAC_READ_SEARCH", "SYS_PTRACE")
"""Dropped from every container of a chain pod, so that the runner is out of its stages' reach.

A stage runs as its runner's user, so the kernel's ptrace access check (`kernel/ptrace.c`
`__ptrace_may_access`, which also guards `/proc/<pid>/mem`, `environ`, `maps`, `root`, `cwd` and the `fd`
links) lets it at the runner unless the runner is not dumpable. The runner's busybox is execute-only (mode
0111): a process that execs a file its user cannot read becomes not dumpable (`fs/exec.c` `would_dump`, then
`begin_new_exec` sets `suid_dumpable`, 0 unless a node sets `fs.suid_dumpable=1`), and so does every process
it forks. The slots exec the runner script (mode 0555), whose `#!` line names that busybox: the kernel checks
the file it loads, the interpreter (`begin_new_exec` calls `would_dump(bprm, bprm->file)` after
`binfmt_script` made `bprm->file` the interpreter; since the fix "exec: Move would_dump into flush_old_exec",
Linux 5.7 and stable kernels, while 4.10 to 5.6 checked the script only). Only a capability defeats it:
DAC_OVERRIDE or DAC_READ_SEARCH (the file would count as readable: the kernel decides with the creds the
process has at its exec, and runc applies the container's capabilities after it switched to the container's
user and before the exec, `finalizeNamespace`, so a non-root runner holds them then too) and SYS_PTRACE (a
stage could trace a non-dumpable process of its user). Neither DAC_READ_SEARCH nor SYS_PTRACE is in a
runtime's default set; DAC_OVERRIDE is, and a root stage loses it (it can no longer write files of other users
that their modes do not let it write)."""


def container_security_context(chain: ChainSpec) -> dict[str, Any]:
    """What every container of the chain pod sets: no privilege escalation (no_new_privs: a set-user-ID
    program of a stage's image grants nothing, so no stage becomes another user than its runner's, which
    could outlive it and write the runner's state), the drops of `UNREADABLE_RUNNER_CAPABILITIES` (baseline
    allows any drop), and for `pod_security="restricted"` what k8s.io/pod-security-admission's
    restricted checks require (`allowPrivilegeEscalation`, `capabilities_restricted`, `runAsNonRoot`,
    `seccompProfile_restricted`), with a non-root user unless the pod's own security context names one.
    The slots add `SLOT_SECURITY_CONTEXT`."""
    if chain.pod_security != "restricted":
        return {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": list(UNREADABLE_RUNNER_CAPABILITIES)},
        }
    context: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if "runAsUser" not in (chain.security_context or {}):
        context["runAsUser"] = RESTRICTED_RUN_AS_USER
    return context


SLOT_SECURITY_CONTEXT: dict[str, Any] = {"readOnlyRootFilesystem": True}
"""What the slots set besides `container_security_context`: a read-only root filesystem. A same-image swap
keeps the slot's container, and with it the container's writable layer: a stage that could write it
(`/bin/sh`, site-packages, `.pth` files, `$HOME` and rc files, `/tmp`) would change what a later stage of its
slot runs. Read-only, a stage writes only to the volumes: the scratch (shared by design), and the slot's own
`/tmp` and `/dev/shm` (`tmp_volume`, `shm_volume`), which the runner empties after each generation and gives
the next stage empty, with a fresh `$HOME` in `/tmp`."""


HOSTS_MOUNT: dict[str, Any] = {
    "name": RUNNER_VOLUME,
    "mountPath": "/etc/hosts",
    "subPath": HOSTS_SUBPATH,
    "readOnly": True,
}
"""The slots' `/etc/hosts`: the copy of the pod's hosts file the init container made, read-only. Without it
the kubelet mounts its own, writable whatever `readOnlyRootFilesystem`, one file for the whole pod, so a
root stage could change what the other slot's stage and every later one resolve (`runnerinstall.
HOSTS_SUBPATH`). The pod's `/etc/hostname` and `/etc/resolv.conf` are the runtime's, read-only in a
container with a read-only root filesystem (containerd `linuxContainerMounts`, CRI-O
`setupContainerMounts`)."""


def tmp_volume(slot: str) -> str:
    """The emptyDir `slot` mounts at /tmp (its stages' temporary files and `$HOME`), emptied by its runner."""
    return f"kruise-chain-tmp-{slot}"


def shm_volume(slot: str) -> str:
    """The memory-backed emptyDir `slot` mounts at /dev/shm instead of the pod's (shared by every container of
    the pod and kept for its life), emptied by its runner after each generation."""
    return f"kruise-chain-shm-{slot}"


def meta_volume(slot: str) -> str:
    """The downward-API (projected) volume of `slot` alone: its run spec, stop and replay annotations,
    nothing of the other slot's."""
    return f"kruise-chain-meta-{slot}"


def state_volume(slot: str) -> str:
    """The emptyDir of `slot`'s runner records, mounted by that slot only."""
    return f"kruise-chain-state-{slot}"


def _short_hash(*parts: str, length: int = 10) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:length]


def pod_name_for(chain_name: str, dag_id: str, run_id: str, chain_path: str | None = None) -> str:
    """Deterministic pod name: one pod per (DAG, run, chain); a retry or reattach finds the same one.

    `chain_path` is the chain's full task-group path (``group.etl``; the name for a top-level chain): two
    chains of one name in different task groups get different pods."""
    return f"{chain_name}-{_short_hash(dag_id, run_id, chain_path or chain_name)}"


def label_value(raw: str, *, always_hash: bool = False) -> str:
    """`raw` as a valid label value; a short hash keeps it unique when altered (or `always_hash`)."""
    if not always_hash and is_label_value(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw)[:52].strip("-_.")
    return f"{cleaned}-{_short_hash(raw)}" if cleaned else _short_hash(raw)


def chain_labels(dag_id: str, run_id: str, chain: str) -> dict[str, str]:
    """Labels identifying the objects of one chain (its full task-group path) in one DAG run."""
    return {
        DAG_ID_LABEL: label_value(dag_id),
        RUN_ID_LABEL: label_value(run_id, always_hash=True),
        CHAIN_LABEL: label_value(chain),
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def of_run(labels: Mapping[str, str], dag_id: str, run_id: str) -> bool:
    """Whether an object with `labels` is one of the chain objects of DAG run (`dag_id`, `run_id`): its
    labels are those `chain_labels` makes of them (the run id's always with a hash of the whole id)."""
    return labels.get(DAG_ID_LABEL) == label_value(dag_id) and labels.get(RUN_ID_LABEL) == label_value(
        run_id, always_hash=True
    )


def chain_selector(dag_id: str, run_id: str, chain: str) -> str:
    """Label selector matching the objects of one chain in one DAG run."""
    return ",".join(f"{key}={value}" for key, value in chain_labels(dag_id, run_id, chain).items())


def slot_pull_policy(stages: Sequence[StageSpec]) -> str:
    """One pull policy for both slots (it cannot change after creation): the strictest any stage needs."""
    policies = (effective_pull_policy(stage.image, stage.image_pull_policy) for stage in stages)
    return max(policies, key=_PULL_POLICY_RANK.__getitem__)


def _slot_container(slot: str, image: str, pull_policy: str, resources: dict[str, Any]) -> dict[str, Any]:
    def annotation(field: str) -> dict[str, Any]:
        path = f"metadata.annotations['{slot_annotation(slot, field)}']"
        return {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}

    seal_path = f"metadata.annotations['{SEAL_ANNOTATION}']"

    container: dict[str, Any] = {
        "name": slot,
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": list(RUNNER_COMMAND),
        "env": [
            {"name": "KC_SLOT", "value": slot},
            # resolved when the container starts (a restarted runner starts its generation at once); the
            # runner then follows the downwardAPI volume
            {"name": "KC_RUN", "valueFrom": annotation(RUN_FIELD)},
            # the runner empties these after each generation, and makes the stages' HOME in the first afresh
            {"name": "KC_TMP", "value": f"{TMP_MOUNT} {SHM_MOUNT}"},
            # the pod's seal, for the runner only (left out of the stage's env, on no volume): it derives
            # each generation's token from it and the run spec's nonce, so no stage knows a token
            {"name": SEAL_ENV, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": seal_path}}},
            # the prepare this container was created for ("" if none), resolved from the pod whose image it
            # runs: a go into a prepared slot names it, and no other runner of the slot takes that go
            {"name": PREPARE_ENV, "valueFrom": annotation(PREPARE_ID_FIELD)},
        ],
        "volumeMounts": [
            {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_MOUNT},
            # the runner's files: no stage may change them
            {"name": RUNNER_VOLUME, "mountPath": RUNNER_MOUNT, "readOnly": True},
            {"name": state_volume(slot), "mountPath": RUNNER_STATE},
            {"name": meta_volume(slot), "mountPath": META_MOUNT, "readOnly": True},
            {"name": tmp_volume(slot), "mountPath": TMP_MOUNT},
            {"name": shm_volume(slot), "mountPath": SHM_MOUNT},
            dict(HOSTS_MOUNT),
        ],
        "startupProbe": {
            "exec": {"command": list(STARTUP_COMMAND)},
            "periodSeconds": 1,
            "timeoutSeconds": 30,
            "successThreshold": 1,
            "failureThreshold": 10,
        },
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
    }
    if resources:
        container["resources"] = copy.deepcopy(resources)
    return container


def _meta_volume(slot: str) -> dict[str, Any]:
    def item(path: str, field: str) -> dict[str, Any]:
        fieldpath = f"metadata.annotations['{slot_annotation(slot, field)}']"
        return {"path": path, "fieldRef": {"fieldPath": fieldpath}}

    items = [item(slot, RUN_FIELD), *(item(f"{slot}.{field}", field) for field in (STOP_FIELD, REPLAY_FIELD))]
    # projected, not a downwardAPI volume: the same files, written and refreshed alike by the kubelet, but
    # `kubectl describe` prints "DownwardAPI: true" rather than every item (300 bytes less per slot)
    return {
        "name": meta_volume(slot),
        "projected": {"sources": [{"downwardAPI": {"items": items}}], "defaultMode": 0o444},
    }


def deep_merge(base: Any, override: Any) -> Any:
    """Merge `override` over `base`: dicts recursively, lists of named dicts by name; None deletes a key."""
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        merged = dict(base)
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = deep_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(override, list) and _named(base) and _named(override):
        merged_list = list(base)
        index = {item["name"]: i for i, item in enumerate(base)}
        for item in override:
            if item["name"] in index:
                merged_list[index[item["name"]]] = deep_merge(base[index[item["name"]]], item)
            else:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(override)


def _named(items: list[Any]) -> bool:
    return all(isinstance(item, Mapping) and "name" in item for item in items)


MAX_ANNOTATIONS_BYTES = 256 * 1024
"""The API server's limit on the total size of an object's annotations (keys plus values; apimachinery
`ValidateAnnotationsSize`, `TotalAnnotationSizeLimitB`)."""
RUNTIME_ANNOTATIONS_ROOM = 4 * 1024
"""Room kept for annotations the provider adds while the chain runs besides those checked here."""
_LONGEST_ID = 250
"""Longest DAG id and run id Airflow accepts (`ID_LEN`)."""


def slot_annotations(
    slot: str,
    stage: StageSpec,
    generation: int,
    token: str = "0" * 16,
    *,
    restart: bool = False,
    nonce: str | None = None,
    prepare: str = "",
) -> dict[str, str]:
    """The annotations that hand `stage`'s generation `generation` to `slot`'s runner (set by a swap): its
    generation, stage and run spec (`wire.run_spec`; `restart`: the swap also patches the slot's image;
    `nonce`: a sealed pod's, from which the runner derives `token`; `prepare`: a go into a slot prepared
    ahead, which only the runner created for that prepare takes)."""
    spec = stage.run_spec(generation, token, restart=restart, nonce=nonce, prepare=prepare)
    return {
        slot_annotation(slot, GENERATION_FIELD): str(generation),
        slot_annotation(slot, STAGE_FIELD): stage.name,
        slot_annotation(slot, RUN_FIELD): spec,
    }


def _annotations_bytes(annotations: Mapping[str, str]) -> int:
    return sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())


def check_annotations_size(chain: ChainSpec) -> None:
    """Refuse a chain whose pod could outgrow `MAX_ANNOTATIONS_BYTES` while it runs, naming the stages.

    The worst case: the chain's own and the pod's annotations (longest DAG and run ids), the records of all
    its stages (one annotation, `wire.STAGES_ANNOTATION`, each record at its longest), and the two stages
    with the largest command and env in the two slots at once. `chain` must have passed `validate()`.
    """
    pod = build_chain_pod(
        chain,
        pod_name="p" * 63,
        dag_id="d" * _LONGEST_ID,
        run_id="r" * _LONGEST_ID,
        first_images=chain.first_images,
    )
    fixed = dict(pod["metadata"].get("annotations") or {})
    for slot in SLOTS:  # replaced by the stages' own
        for key in SLOT_FIELDS:
            fixed.pop(slot_annotation(slot, key), None)
    records = {
        name: StageRecord(
            generation=10**9,
            slot=SLOTS[0],
            image=stage.image,
            try_number=10**4,
            previous_container_id="containerd://" + "f" * 64,
            swapped_at="2026-01-01T00:00:00Z",
            action="patch",
            previous_reason="CreateContainerConfigError",
            token="f" * 16,
        )
        for stage in chain.stages
        for name in stage.stage_names()
    }
    recorded = _annotations_bytes({STAGES_ANNOTATION: records_annotation(records)})
    sized = sorted(
        (
            (_annotations_bytes(slot_annotations(SLOTS[0], s, 10**9, nonce="f" * 16)), i)
            for i, s in enumerate(chain.stages)
        ),
        reverse=True,
    )
    largest = sized[:2]
    running = sum(size for size, _ in largest)
    if len(largest) == 1:
        running *= 2  # both slots may hold the stage's generations (the slot it left keeps them)
    total = _annotations_bytes(fixed) + recorded + running + RUNTIME_ANNOTATIONS_ROOM
    if total <= MAX_ANNOTATIONS_BYTES:
        return
    over = (
        f"would take the pod's annotations to {total} bytes, over the API server's "
        f"{MAX_ANNOTATIONS_BYTES}-byte limit"
    )
    records_part = f"the records of its {len(records)} stages ({recorded} bytes in {STAGES_ANNOTATION})"
    if recorded > running:
        raise ChainConfigError(
            "stages",
            f"{records_part}, with the chain's annotations and the stages' command and env in the two slots "
            f"({running} bytes), {over}: split the chain into chains of fewer stages",
        )
    size, index = largest[0]
    stage = chain.stages[index]
    other = f" and stage {chain.stages[largest[1][1]].name!r}" if len(largest) > 1 else " twice"
    raise ChainConfigError(
        f"stages[{index}].cmds",
        f"stage {stage.name!r} ({size} bytes of command and env){other} in the two slots, with the "
        f"chain's annotations and {records_part}, {over}: pass large data through the scratch volume or "
        "a ConfigMap, or shorten the chain's annotations",
    )


def build_chain_pod(
    chain: ChainSpec,
    *,
    pod_name: str,
    dag_id: str,
    run_id: str,
    first_images: tuple[str, str],
    chain_path: str | None = None,
) -> dict[str, Any]:
    """The chain pod: two idle slots (generation 0) on `first_images`, scratch and runner volumes, and a new
    seal (`wire.SEAL_ANNOTATION`).

    `chain` must have passed `validate()`. An init container of `chain.runner_image` (a static busybox,
    `runnerinstall.py`) checks the runner script of its ConfigMap against the sum in the pod spec and copies
    it and its busybox into the runner's emptyDir; both slots run them from there, read-only. Each slot has
    its own state emptyDir and its own downwardAPI volume. `chain_path` (the chain's full task-group path,
    default its name) goes into the chain label.
    """
    labels = {**chain.labels, **chain_labels(dag_id, run_id, chain_path or chain.name)}
    annotations = {
        **chain.annotations,
        GENERATION_ANNOTATION: "0",
        SEAL_ANNOTATION: new_seal(),
    }
    for slot in SLOTS:
        annotations.update({slot_annotation(slot, key): "" for key in SLOT_FIELDS})
        annotations[slot_annotation(slot, GENERATION_FIELD)] = "0"
    pull_policy, resources = slot_pull_policy(chain.stages), slot_resources(chain.stages)
    runner_image = chain.runner_image or DEFAULT_RUNNER_IMAGE
    chain_sources = sources.of_stages(chain.stages)
    scratch: dict[str, Any] = {}
    if chain.scratch_size_limit:
        scratch["sizeLimit"] = chain.scratch_size_limit
    spec: dict[str, Any] = {
        "restartPolicy": "Always",
        "containers": [
            _slot_container(slot, image, pull_policy, resources)
            for slot, image in zip(SLOTS, first_images, strict=True)
        ],
        "initContainers": [
            init_container(INIT_CONTAINER, runner_image, effective_pull_policy(runner_image, None))
        ],
        "volumes": [
            {"name": SCRATCH_VOLUME, "emptyDir": scratch},
            {"name": RUNNER_VOLUME, "emptyDir": {}},
            *({"name": state_volume(slot), "emptyDir": {}} for slot in SLOTS),
            *({"name": tmp_volume(slot), "emptyDir": {}} for slot in SLOTS),
            *({"name": shm_volume(slot), "emptyDir": {"medium": "Memory"}} for slot in SLOTS),
            *(_meta_volume(slot) for slot in SLOTS),
            *sources.volumes(chain_sources),
            *(copy.deepcopy(dict(volume)) for volume in chain.volumes),
        ],
    }
    for container in spec["containers"]:  # any stage may run in either slot: both mount every stage's
        container["volumeMounts"] += sources.volume_mounts(chain_sources) + mounts.slot_mounts(chain.stages)
    if chain.node_selector:
        spec["nodeSelector"] = dict(chain.node_selector)
    if chain.tolerations:
        spec["tolerations"] = [dict(t) for t in chain.tolerations]
    if chain.affinity:
        spec["affinity"] = copy.deepcopy(dict(chain.affinity))
    if chain.service_account_name:
        spec["serviceAccountName"] = chain.service_account_name
    if chain.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in chain.image_pull_secrets]
    if chain.security_context:
        spec["securityContext"] = copy.deepcopy(dict(chain.security_context))
    if _mounts_api_data(spec["volumes"]) and "fsGroup" not in (chain.security_context or {}):
        spec.setdefault("securityContext", {})["fsGroup"] = SOURCES_FS_GROUP
    spec["automountServiceAccountToken"] = chain.automount_service_account_token
    context = container_security_context(chain)
    for container in spec["initContainers"]:
        container["securityContext"] = copy.deepcopy(context)
    for container in spec["containers"]:
        container["securityContext"] = {**copy.deepcopy(context), **SLOT_SECURITY_CONTEXT}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name,
            "namespace": chain.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
    if not chain.pod_template:
        return pod
    check_pod_template(chain.pod_template, pod)  # what a template may set (seal.py)
    merged = deep_merge(pod, chain.pod_template)
    _check_sealed(pod, merged)
    return merged


def _mounts_api_data(volumes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `volumes` hold a Secret or a ConfigMap (as a volume or a projected source)."""
    kinds = ("secret", "configMap")
    return any(
        any(kind in volume for kind in kinds)
        or any(
            kind in source
            for source in (volume.get("projected") or {}).get("sources") or ()
            for kind in kinds
        )
        for volume in volumes
    )


_RUNNER_REOPENERS = frozenset({"ALL", *UNREADABLE_RUNNER_CAPABILITIES})


def _capability(name: Any) -> str:
    """A capability name as the runtimes compare it (containerd accepts any case and an optional CAP_)."""
    upper = str(name).upper()
    return upper.removeprefix("CAP_")


def _check_sealed(built: dict[str, Any], merged: dict[str, Any]) -> None:
    """Raise ChainConfigError when `pod_template`, merged over the `built` pod, reopens the runner to its
    stages: a privileged chain container or one that gets back a capability of
    `UNREADABLE_RUNNER_CAPABILITIES`, the init container changed, or the chain's own volumes (the runner's
    files, each slot's state and run spec, the scratch) replaced or mounted otherwise than as built (a
    writable runner volume would let a stage rewrite the next stage's runner)."""
    spec, built_spec = merged["spec"], built["spec"]
    owned = {SCRATCH_VOLUME, RUNNER_VOLUME}
    for slot in SLOTS:
        owned |= {state_volume(slot), meta_volume(slot), tmp_volume(slot), shm_volume(slot)}
    owned_volumes = {v["name"]: v for v in built_spec["volumes"] if v["name"] in owned}
    for volume in spec.get("volumes") or ():
        name = volume.get("name")
        if name == SCRATCH_VOLUME and set(volume) == {"name", "emptyDir"}:
            continue  # the scratch may be any emptyDir (medium: Memory, a sizeLimit)
        if name in owned_volumes and volume != owned_volumes[name]:
            raise ChainConfigError(
                f"pod_template.spec.volumes[{name}]",
                "is the chain's own volume and cannot be replaced (the scratch may only stay an emptyDir)",
            )
    built_containers = {c["name"]: c for c in (*built_spec["initContainers"], *built_spec["containers"])}
    sections = (
        ("initContainers", spec.get("initContainers") or ()),
        ("containers", spec.get("containers") or ()),
    )
    for section, containers in sections:
        for container in containers:
            _check_sealed_container(
                section, container, built_containers.get(container.get("name")), owned_volumes
            )


def _check_sealed_container(
    section: str, container: dict[str, Any], built: dict[str, Any] | None, owned_volumes: Mapping[str, Any]
) -> None:
    where = f"pod_template.spec.{section}[{container.get('name')}]"
    unsized = {k: v for k, v in container.items() if k != "resources"}  # its resources may be set (seal.py)
    if built is not None and built["name"] == INIT_CONTAINER and unsized != built:
        raise ChainConfigError(
            where, "is the runner's installer and cannot be changed; leave it out of pod_template"
        )
    built_mounts = [m for m in (built or {}).get("volumeMounts", ()) if m["name"] in owned_volumes]
    mounts_now = [m for m in container.get("volumeMounts") or () if m.get("name") in owned_volumes]
    if mounts_now != built_mounts:
        raise ChainConfigError(
            f"{where}.volumeMounts",
            "cannot mount the chain's own volumes otherwise than the chain does (the runner's files "
            "read-only, each slot only its own state and run spec): a stage could change "
            "what the next one runs",
        )
    if built is None:
        return
    context = container.get("securityContext") or {}
    capabilities = context.get("capabilities") or {}
    added = {_capability(c) for c in capabilities.get("add") or ()} & _RUNNER_REOPENERS
    dropped = {_capability(c) for c in capabilities.get("drop") or ()}
    if context.get("privileged") or added or not ("ALL" in dropped or _RUNNER_REOPENERS - {"ALL"} <= dropped):
        raise ChainConfigError(
            f"{where}.securityContext",
            "cannot be privileged, add or stop dropping "
            f"{', '.join(UNREADABLE_RUNNER_CAPABILITIES)}: with any of them a stage can read and write its "
            "runner's memory (docs/security.md); leave them to the chain",
        )
    if context.get("allowPrivilegeEscalation") is not False:
        raise ChainConfigError(
            f"{where}.securityContext.allowPrivilegeEscalation",
            "must stay false: a stage that runs a set-user-ID program of its image becomes another user than "
            "its runner, outlives it and can write its state (docs/security.md); leave it to the chain",
        )
    if section == "containers" and context.get("readOnlyRootFilesystem") is not True:
        raise ChainConfigError(
            f"{where}.securityContext.readOnlyRootFilesystem",
            "must stay true: a slot's writable layer outlives its stage (a same-image swap keeps the "
            "container), so a stage could change what a later one runs (docs/security.md); write to $HOME, "
            "/tmp or a volume instead",
        )
