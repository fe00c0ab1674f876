"""What a chain's `pod_template` may set: an allow-list, checked before the template is merged over the built
chain pod (`manifest.build_chain_pod`, at parse time); anything else is refused naming the field.

The chain pod keeps each stage sealed (docs/security.md): the runner out of the stages' reach (no capability
that reopens it, no shared process namespace, no privilege escalation), the runner's files, each slot's state
and run spec as the chain built them, no stage seeing another slot's run spec. A template may tune the pod
around that, never undo it:

- the pod's scheduling, identity and timing (`POD_FIELDS`: node selection, tolerations, priority, DNS, host
  aliases, the runtime class, the grace period, image pull secrets, service account...);
- its labels and annotations, except the chain's own (`airflow-kruise-chain/...`, the managed-by label) and
  AppArmor or seccomp annotations that unconfine a container;
- the pod's security context within Pod Security baseline (`POD_SECURITY_FIELDS`: users, groups, fsGroup, a
  seccomp or AppArmor profile that is not Unconfined, baseline's SELinux types, its safe sysctls);
- for each slot, its `ports` (no host port), `workingDir` (the stages' working folder), `volumeMounts` of
  the chain's own volumes as built and of other volumes anywhere but the chain's paths, and a
  `securityContext` that keeps the seal (`_check_context`: never privileged, no privilege escalation, no
  added capability but baseline's less `DAC_OVERRIDE`, no Unconfined profile, the read-only root filesystem
  and `runAsNonRoot` the chain set kept);
- for the runner's installer, its `resources` only (a namespace's quota may ask for them);
- containers and init containers of its own (sidecars, native sidecars, init steps: `USER_CONTAINER_FIELDS`),
  within the same security context rules, mounting none of the chain's volumes (their mounts are checked on
  the merged pod) and reading no annotation of the chain;
- volumes of the types Pod Security restricted allows (`VOLUME_SOURCES`); a downwardAPI volume or projected
  source may not expose the pod's annotations (both slots' run specs are there).

Refused, besides anything not listed: host namespaces, `shareProcessNamespace` (the runner would not be pid 1
and a stage would see the other slot's processes), ephemeral containers, the pod's `restartPolicy` and
pod-level `resources` (the chain's), and in a slot its command, env, probes, lifecycle hooks, resources
(per stage) and anything else that is the runner's. The merged pod then meets Pod Security baseline
(tests/unit/test_core_seal.py judges it with the local cluster's checks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .constants import MANAGED_BY_LABEL, TERMINATION_LOG
from .errors import ChainConfigError
from .wire import PREFIX, RUNNER_MOUNT

POD_FIELDS = frozenset(
    {
        "activeDeadlineSeconds",
        "affinity",
        "automountServiceAccountToken",
        "containers",
        "dnsConfig",
        "dnsPolicy",
        "enableServiceLinks",
        "hostAliases",
        "hostUsers",
        "hostname",
        "imagePullSecrets",
        "initContainers",
        "nodeName",
        "nodeSelector",
        "os",
        "preemptionPolicy",
        "priority",
        "priorityClassName",
        "readinessGates",
        "resourceClaims",
        "runtimeClassName",
        "schedulerName",
        "schedulingGates",
        "securityContext",
        "serviceAccountName",
        "setHostnameAsFQDN",
        "subdomain",
        "terminationGracePeriodSeconds",
        "tolerations",
        "topologySpreadConstraints",
        "volumes",
    }
)
REFUSED_POD_FIELDS = {
    "hostNetwork": "the node's network namespace (Pod Security baseline forbids host namespaces)",
    "hostPID": "the node's process namespace: a stage would see, and could reach, every process of the node",
    "hostIPC": "the node's IPC namespace (Pod Security baseline forbids host namespaces)",
    "shareProcessNamespace": "one process namespace for the pod: the runner would not be pid 1 and a stage "
    "would see the other slot's processes",
    "ephemeralContainers": "added through the ephemeralcontainers subresource, not at creation",
    "restartPolicy": "the chain's: Always (a slot's runner outlives its stages)",
    "resources": "pod-level resources: the chain sizes each slot for the stage it runs",
}
POD_SECURITY_FIELDS = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "fsGroup",
        "fsGroupChangePolicy",
        "supplementalGroups",
        "supplementalGroupsPolicy",
        "seccompProfile",
        "appArmorProfile",
        "seLinuxOptions",
        "seLinuxChangePolicy",
        "sysctls",
    }
)
CONTAINER_SECURITY_FIELDS = frozenset(
    {
        "allowPrivilegeEscalation",
        "appArmorProfile",
        "capabilities",
        "privileged",
        "procMount",
        "readOnlyRootFilesystem",
        "runAsGroup",
        "runAsNonRoot",
        "runAsUser",
        "seLinuxOptions",
        "seccompProfile",
    }
)
SLOT_FIELDS = frozenset({"name", "ports", "securityContext", "volumeMounts", "workingDir"})
INSTALLER_FIELDS = frozenset({"name", "resources"})
USER_CONTAINER_FIELDS = frozenset(
    {
        "name",
        "image",
        "imagePullPolicy",
        "command",
        "args",
        "workingDir",
        "env",
        "envFrom",
        "resources",
        "resizePolicy",
        "volumeMounts",
        "securityContext",
        "ports",
        "startupProbe",
        "readinessProbe",
        "livenessProbe",
        "lifecycle",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "stdin",
        "stdinOnce",
        "tty",
    }
)
VOLUME_SOURCES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
    }
    | {"secret"}
)
"""Pod Security restricted's volume types (`volumes_restricted`, with the image volumes of 1.31+): none gives
the pod a path of the node"""
ADDABLE_CAPABILITIES = frozenset(
    {"AUDIT_WRITE", "CHOWN", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID"}
    | {"SETPCAP", "SETUID", "SYS_CHROOT"}
)
"""Pod Security baseline's capabilities (`capabilities_baseline`) less DAC_OVERRIDE, which makes the runner's
execute-only busybox count as readable (manifest.UNREADABLE_RUNNER_CAPABILITIES)"""
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
    }
)
"""the sysctls Pod Security baseline allows in every version (`check_sysctls.go`, 1.0)"""
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
_CAPABILITY = re.compile(r"(CAP_)?([A-Z][A-Z0-9_]*)")
_PROFILE_KINDS = ("RuntimeDefault", "Localhost")
_UNCONFINING_ANNOTATIONS = ("container.apparmor.security.beta.kubernetes.io/", "seccomp.security.alpha.")


def check_pod_template(template: Any, built: Mapping[str, Any]) -> None:
    """Raise ChainConfigError naming the first field of `template` that a chain's `pod_template` may not set
    (module docstring) over the chain pod `built`."""
    if not isinstance(template, Mapping):
        raise ChainConfigError("pod_template", "must be a dict in the Kubernetes Pod shape")
    for key, value in template.items():
        if (key == "apiVersion" and value == "v1") or (key == "kind" and value == "Pod"):
            continue
        if key not in ("metadata", "spec"):
            raise ChainConfigError(f"pod_template.{key}", "a pod_template may set metadata and spec only")
    _check_metadata(template.get("metadata") or {})
    spec = template.get("spec") or {}
    built_spec = built["spec"]
    _only(spec, POD_FIELDS, "pod_template.spec", REFUSED_POD_FIELDS)
    if spec.get("hostUsers") not in (None, False):
        raise ChainConfigError("pod_template.spec.hostUsers", "may only be false (a user namespace)")
    if spec.get("os") not in (None, {"name": "linux"}):
        raise ChainConfigError("pod_template.spec.os", "the chain's runner is a Linux program: linux only")
    _check_pod_security(spec.get("securityContext") or {})
    built_volumes = {v["name"] for v in built_spec["volumes"]}
    for i, volume in enumerate(_items(spec, "volumes")):
        if volume.get("name") not in built_volumes:
            _check_volume(f"pod_template.spec.volumes[{volume.get('name', i)}]", volume)
    built_containers = {c["name"]: c for c in built_spec["containers"]}
    for container in _items(spec, "containers"):
        where = f"pod_template.spec.containers[{container.get('name')}]"
        if container.get("name") in built_containers:
            _check_slot(where, container, built_containers[container["name"]])
        else:
            _check_user_container(where, container, init=False)
    installers = {c["name"] for c in built_spec["initContainers"]}
    for container in _items(spec, "initContainers"):
        where = f"pod_template.spec.initContainers[{container.get('name')}]"
        if container.get("name") in installers:
            _only(container, INSTALLER_FIELDS, where, {})
        else:
            _check_user_container(where, container, init=True)


def _items(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key) or []
    if not isinstance(items, Sequence) or not all(isinstance(i, Mapping) for i in items):
        raise ChainConfigError(f"pod_template.spec.{key}", "must be a list of dicts")
    return list(items)


def _only(obj: Any, allowed: frozenset[str], where: str, why: Mapping[str, str]) -> None:
    if not isinstance(obj, Mapping):
        raise ChainConfigError(where, "must be a dict")
    for key in obj:
        if key in why:
            raise ChainConfigError(f"{where}.{key}", f"may not be set in a chain pod: {why[key]}")
        if key not in allowed:
            raise ChainConfigError(
                f"{where}.{key}",
                f"is not among what a chain's pod_template may set here ({', '.join(sorted(allowed))}): "
                "it is the chain's, or could undo a stage's seal (docs/security.md)",
            )


def _check_metadata(metadata: Any) -> None:
    _only(metadata, frozenset({"labels", "annotations"}), "pod_template.metadata", {})
    for part in ("labels", "annotations"):
        for key, value in (metadata.get(part) or {}).items():
            where = f"pod_template.metadata.{part}[{key!r}]"
            if str(key).startswith(PREFIX) or key == MANAGED_BY_LABEL:
                raise ChainConfigError(where, "is the chain's own (its identity and its stages' run specs)")
            if str(key).startswith(_UNCONFINING_ANNOTATIONS) and "unconfined" in str(value).lower():
                raise ChainConfigError(where, "would run a container unconfined (Pod Security baseline)")


def _check_profile(where: str, profile: Any) -> None:
    if profile is not None and (
        not isinstance(profile, Mapping) or profile.get("type") not in _PROFILE_KINDS
    ):
        raise ChainConfigError(where, "must be RuntimeDefault or Localhost: Unconfined is not allowed")


def _check_selinux(where: str, options: Any) -> None:
    if options is None:
        return
    if not isinstance(options, Mapping) or options.get("user") or options.get("role"):
        raise ChainConfigError(where, "may set type and level only (Pod Security baseline)")
    if options.get("type", "") not in SELINUX_TYPES:
        raise ChainConfigError(f"{where}.type", f"must be one of {', '.join(sorted(SELINUX_TYPES - {''}))}")


def _check_pod_security(context: Any) -> None:
    where = "pod_template.spec.securityContext"
    _only(context, POD_SECURITY_FIELDS, where, {"windowsOptions": "the chain's pod runs on Linux"})
    _check_profile(f"{where}.seccompProfile", context.get("seccompProfile"))
    _check_profile(f"{where}.appArmorProfile", context.get("appArmorProfile"))
    _check_selinux(f"{where}.seLinuxOptions", context.get("seLinuxOptions"))
    for sysctl in context.get("sysctls") or []:
        if not isinstance(sysctl, Mapping) or sysctl.get("name") not in SAFE_SYSCTLS:
            raise ChainConfigError(
                f"{where}.sysctls", f"only the safe sysctls: {', '.join(sorted(SAFE_SYSCTLS))}"
            )


def _capability(where: str, name: Any) -> str:
    """A capability name as the runtimes take it (any case, CAP_ optional); anything else is refused."""
    found = _CAPABILITY.fullmatch(str(name).upper()) if isinstance(name, str) else None
    if found is None:
        raise ChainConfigError(where, f"{name!r} is not a capability name")
    return found.group(2)


def _check_context(where: str, context: Any, built: Mapping[str, Any]) -> None:
    """A container's securityContext that keeps the seal (the chain's `built` one for a slot, else {})."""
    _only(context, CONTAINER_SECURITY_FIELDS, where, {"windowsOptions": "the chain's pod runs on Linux"})
    if context.get("privileged") not in (None, False):
        raise ChainConfigError(
            f"{where}.privileged", "a privileged container reaches the node and every runner"
        )
    if context.get("allowPrivilegeEscalation") not in (None, False):
        raise ChainConfigError(
            f"{where}.allowPrivilegeEscalation",
            "must stay false: a set-user-ID program would make a stage another user than its runner",
        )
    if context.get("procMount") not in (None, "Default"):
        raise ChainConfigError(f"{where}.procMount", "must be Default (Pod Security baseline)")
    for field in ("readOnlyRootFilesystem", "runAsNonRoot"):
        if built.get(field) is True and context.get(field) not in (None, True):
            raise ChainConfigError(f"{where}.{field}", "is set true by the chain and must stay true")
    _check_profile(f"{where}.seccompProfile", context.get("seccompProfile"))
    _check_profile(f"{where}.appArmorProfile", context.get("appArmorProfile"))
    _check_selinux(f"{where}.seLinuxOptions", context.get("seLinuxOptions"))
    capabilities = context.get("capabilities") or {}
    _only(capabilities, frozenset({"add", "drop"}), f"{where}.capabilities", {})
    for i, name in enumerate(capabilities.get("drop") or []):
        _capability(f"{where}.capabilities.drop[{i}]", name)
    for i, name in enumerate(capabilities.get("add") or []):
        if _capability(f"{where}.capabilities.add[{i}]", name) not in ADDABLE_CAPABILITIES:
            raise ChainConfigError(
                f"{where}.capabilities.add[{i}]",
                f"{name!r} may not be added: only {', '.join(sorted(ADDABLE_CAPABILITIES))} (Pod Security "
                "baseline's less DAC_OVERRIDE, with which a stage reads its runner's memory)",
            )


def _check_ports(where: str, ports: Any) -> None:
    for i, port in enumerate(ports or []):
        if isinstance(port, Mapping) and port.get("hostPort"):
            raise ChainConfigError(
                f"{where}.ports[{i}].hostPort", "a port of the node (Pod Security baseline)"
            )


def _reserved(path: str, built_paths: Sequence[str]) -> bool:
    path = path.rstrip("/") or "/"
    tops = [*built_paths, TERMINATION_LOG]
    return path.startswith(RUNNER_MOUNT) or any(
        path == t or path.startswith(t.rstrip("/") + "/") for t in tops
    )


def _check_slot(where: str, container: Mapping[str, Any], built: Mapping[str, Any]) -> None:
    _only(container, SLOT_FIELDS, where, {})
    _check_ports(where, container.get("ports"))
    _check_context(
        f"{where}.securityContext", container.get("securityContext") or {}, built["securityContext"]
    )
    built_mounts = {m["name"]: m for m in built.get("volumeMounts") or []}
    paths = [m["mountPath"] for m in built.get("volumeMounts") or []]
    for i, mount in enumerate(container.get("volumeMounts") or []):
        path = str(mount.get("mountPath", built_mounts.get(mount.get("name"), {}).get("mountPath", "")))
        if mount.get("name") not in built_mounts and _reserved(path, paths):
            raise ChainConfigError(
                f"{where}.volumeMounts[{i}].mountPath",
                f"{path!r} is the chain's (its runner, state, run spec, scratch, temporary folders or "
                "/etc/hosts): mount elsewhere",
            )


def _check_user_container(where: str, container: Mapping[str, Any], init: bool) -> None:
    _only(container, USER_CONTAINER_FIELDS | ({"restartPolicy"} if init else set()), where, {})
    if init and container.get("restartPolicy") not in (None, "Always"):
        raise ChainConfigError(f"{where}.restartPolicy", "may only be Always (a native sidecar)")
    _check_ports(where, container.get("ports"))
    _check_context(f"{where}.securityContext", container.get("securityContext") or {}, {})
    for i, env in enumerate(container.get("env") or []):
        ref = ((env or {}).get("valueFrom") or {}).get("fieldRef") or {}
        _check_field_path(f"{where}.env[{i}]", ref.get("fieldPath"))


def _check_field_path(where: str, path: Any) -> None:
    """A downward-API field: not the pod's annotations whole, nor one of the chain's (the run specs)."""
    if path == "metadata.annotations" or (
        isinstance(path, str) and path.startswith(f"metadata.annotations['{PREFIX}")
    ):
        raise ChainConfigError(
            where,
            "may not expose the chain's annotations: each slot's run spec is its own (docs/security.md)",
        )


def _check_volume(where: str, volume: Mapping[str, Any]) -> None:
    sources = [k for k in volume if k != "name"]
    if "hostPath" in sources:
        raise ChainConfigError(f"{where}.hostPath", "a path of the node (Pod Security baseline forbids it)")
    for kind in sources:
        if kind not in VOLUME_SOURCES:
            raise ChainConfigError(
                f"{where}.{kind}", f"volume types a chain pod may have: {', '.join(sorted(VOLUME_SOURCES))}"
            )
    downward = [volume.get("downwardAPI") or {}]
    downward += [s.get("downwardAPI") or {} for s in (volume.get("projected") or {}).get("sources") or []]
    for items in downward:
        for i, item in enumerate(items.get("items") or []):
            _check_field_path(f"{where}.items[{i}]", ((item or {}).get("fieldRef") or {}).get("fieldPath"))
