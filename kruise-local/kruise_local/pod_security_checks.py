"""The Pod Security Standards' checks, as k8s.io/pod-security-admission's `policy` package defines them
(`staging/src/k8s.io/pod-security-admission/policy/check_<id>.go`, release-1.35 inventory), and its
registry (`policy/registry.go`).

Each check is a check ID, a level (baseline or restricted) and versioned revisions: the revision that applies
to a policy version is the newest whose minimum version is at or below it. Restricted is every baseline
check (minus those a restricted revision overrides) plus the restricted checks; baseline check IDs run first,
then restricted ones, each group in sorted order (`registry.go` `populate`), which is the order of the
reasons in a refusal. A check returns None (allowed) or `(ForbiddenReason, ForbiddenDetail)` worded as its
check file words it. Every container means init containers, containers and ephemeral containers, in that
order (`visitor.go` `visitContainers`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Result = tuple[str, str] | None
CheckFn = Callable[[Obj, Obj], Result]

BASELINE, RESTRICTED = "baseline", "restricted"


def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _containers(spec: Obj) -> Iterator[Obj]:
    """`visitor.go` `visitContainers`: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for c in _l(spec.get(key)):
            if isinstance(c, dict):
                yield c


def _sc(container: Obj) -> Obj:
    return _d(container.get("securityContext"))


def _name(container: Obj) -> str:
    return str(container.get("name", ""))


def join_quote(items: list[str]) -> str:
    """`helpers.go` `joinQuote`: `"a", "b"`."""
    return ", ".join(f'"{item}"' for item in items)


def pluralize(singular: str, plural: str, count: int) -> str:
    """`helpers.go` `pluralize`."""
    return singular if count == 1 else plural


def _go_quote(value: str) -> str:
    """Go's `%q` of a string (close enough for the printable values pods carry)."""
    return json.dumps(value, ensure_ascii=False)


def _setters(bad: list[str], containers: list[str]) -> list[str]:
    """`pod` and/or `container(s) "a", "b"`, as several checks list who set a bad value."""
    if containers:
        bad = [*bad, f"{pluralize('container', 'containers', len(containers))} {join_quote(containers)}"]
    return bad


def _windows(spec: Obj) -> bool:
    return _d(spec.get("os")).get("name") == "windows"


def _user_namespace(spec: Obj) -> bool:
    """`helpers.go` `relaxPolicyForUserNamespacePod` (1.35: no feature gate): `hostUsers: false`."""
    return spec.get("hostUsers") is False


# --- baseline -----------------------------------------------------------------------------------------


def app_armor_profile(meta: Obj, spec: Obj) -> Result:
    """`check_appArmorProfile.go` `appArmorProfile_1_0`: the field (pod and containers) must be
    RuntimeDefault or Localhost; the deprecated annotation empty, `runtime/default` or `localhost/*`."""
    bad_setters: list[str] = []
    bad_values: set[str] = set()
    pod_profile = _d(_d(spec.get("securityContext")).get("appArmorProfile"))
    if pod_profile and pod_profile.get("type") not in ("RuntimeDefault", "Localhost"):
        bad_setters.append("pod")
        bad_values.add(str(pod_profile.get("type", "")))
    containers = []
    for c in _containers(spec):
        profile = _d(_sc(c).get("appArmorProfile"))
        if profile and profile.get("type") not in ("RuntimeDefault", "Localhost"):
            containers.append(_name(c))
            bad_values.add(str(profile.get("type", "")))
    bad_setters = _setters(bad_setters, containers)
    annotations = sorted(
        f"{k}={_go_quote(str(v))}"
        for k, v in _d(meta.get("annotations")).items()
        if k.startswith("container.apparmor.security.beta.kubernetes.io/")
        and not (v in ("", "runtime/default") or str(v).startswith("localhost/"))
    )
    values = sorted(bad_values) + annotations
    if annotations:
        bad_setters.append(pluralize("annotation", "annotations", len(annotations)))
    if not bad_setters:
        return None
    return (
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values)),
        f"{' and '.join(bad_setters)} must not set AppArmor profile type to {join_quote(values)}",
    )


_CAPABILITIES_ALLOWED_1_0 = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID "
    "SYS_CHROOT".split()
)


def capabilities_baseline(meta: Obj, spec: Obj) -> Result:
    """`check_capabilities_baseline.go` `capabilitiesBaseline_1_0`: only the default set may be added."""
    bad, caps = [], set()
    for c in _containers(spec):
        added = [str(x) for x in _l(_d(_sc(c).get("capabilities")).get("add"))]
        extra = [x for x in added if x not in _CAPABILITIES_ALLOWED_1_0]
        if extra:
            bad.append(_name(c))
            caps.update(extra)
    if not bad:
        return None
    return (
        "non-default capabilities",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must not include "
        f"{join_quote(sorted(caps))} in securityContext.capabilities.add",
    )


def host_namespaces(meta: Obj, spec: Obj) -> Result:
    """`check_hostNamespaces.go` `hostNamespaces_1_0`: hostNetwork, hostPID and hostIPC must be false."""
    shared = sorted(key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key) is True)
    return ("host namespaces", ", ".join(shared)) if shared else None


def host_path_volumes(meta: Obj, spec: Obj) -> Result:
    """`check_hostPathVolumes.go` `hostPathVolumes_1_0`: no hostPath volume."""
    names = [
        str(v.get("name", "")) for v in _l(spec.get("volumes")) if isinstance(v, dict) and "hostPath" in v
    ]
    if not names:
        return None
    return "hostPath volumes", f"{pluralize('volume', 'volumes', len(names))} {join_quote(names)}"


def host_ports(meta: Obj, spec: Obj) -> Result:
    """`check_hostPorts.go` `hostPorts_1_0`: no container port with a hostPort."""
    bad, ports = [], set()
    for c in _containers(spec):
        used = [
            str(p.get("hostPort")) for p in _l(c.get("ports")) if isinstance(p, dict) and p.get("hostPort")
        ]
        if used:
            bad.append(_name(c))
            ports.update(used)
    if not bad:
        return None
    return (
        "hostPort",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} "
        f"{pluralize('uses', 'use', len(bad))} {pluralize('hostPort', 'hostPorts', len(ports))} "
        f"{', '.join(sorted(ports))}",
    )


def _handler_hosts(handler: Any) -> list[str]:
    handler = _d(handler)
    return [
        str(_d(handler.get(kind)).get("host"))
        for kind in ("httpGet", "tcpSocket")
        if _d(handler.get(kind)).get("host")
    ]


def host_probes_and_host_lifecycle(meta: Obj, spec: Obj) -> Result:
    """`check_hostProbesAndhostLifecycle.go` `hostProbesAndHostLifecycleV1Dot34`: no `host` in a probe's or
    a lifecycle handler's httpGet or tcpSocket."""
    bad: list[str] = []
    hosts: set[str] = set()
    for c in _containers(spec):
        found = [
            h
            for key in ("livenessProbe", "readinessProbe", "startupProbe")
            for h in _handler_hosts(c.get(key))
        ]
        lifecycle = _d(c.get("lifecycle"))
        found += [h for key in ("postStart", "preStop") for h in _handler_hosts(lifecycle.get(key))]
        if found:
            if _name(c) not in bad:
                bad.append(_name(c))
            hosts.update(found)
    if not bad:
        return None
    bad.sort()
    return (
        "probe or lifecycle host",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} "
        f"{pluralize('uses', 'use', len(bad))} "
        f"{pluralize('probe or lifecycle host', 'probe or lifecycle hosts', len(hosts))} "
        f"{join_quote(sorted(hosts))}",
    )


def privileged(meta: Obj, spec: Obj) -> Result:
    """`check_privileged.go` `privileged_1_0`: no privileged container."""
    bad = [_name(c) for c in _containers(spec) if _sc(c).get("privileged") is True]
    if not bad:
        return None
    return (
        "privileged",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must not set "
        "securityContext.privileged=true",
    )


def proc_mount(meta: Obj, spec: Obj) -> Result:
    """`check_procMount_baseline.go` `procMount_1_0`: procMount unset or Default."""
    bad, types = [], set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(_name(c))
            types.add(str(mount))
    if not bad:
        return None
    return (
        "procMount",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must not set "
        f"securityContext.procMount to {join_quote(sorted(types))}",
    )


def proc_mount_1_35_baseline(meta: Obj, spec: Obj) -> Result:
    """`check_procMount_baseline.go` `procMount1_35baseline`: a user-namespace pod may set any procMount."""
    return None if _user_namespace(spec) else proc_mount(meta, spec)


def _se_linux(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        """`check_seLinuxOptions.go`: type one of the allowed container types, no user, no role."""
        bad_types: set[str] = set()
        flags = {"user": False, "role": False}

        def valid(opts: Obj) -> bool:
            ok = True
            if str(opts.get("type") or "") not in allowed:
                ok = False
                bad_types.add(str(opts.get("type") or ""))
            for key in ("user", "role"):
                if opts.get(key):
                    ok, flags[key] = False, True
            return ok

        setters = []
        pod_opts = _d(spec.get("securityContext")).get("seLinuxOptions")
        if isinstance(pod_opts, dict) and not valid(pod_opts):
            setters.append("pod")
        containers = [
            _name(c)
            for c in _containers(spec)
            if isinstance(_sc(c).get("seLinuxOptions"), dict) and not valid(_sc(c)["seLinuxOptions"])
        ]
        setters = _setters(setters, containers)
        if not setters:
            return None
        data = []
        if bad_types:  # upstream words user and role only alongside a bad type
            data.append(f"{pluralize('type', 'types', len(bad_types))} {join_quote(sorted(bad_types))}")
            data += [f"{key} may not be set" for key in ("user", "role") if flags[key]]
        return (
            "seLinuxOptions",
            f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
        )

    return check


_SELINUX_1_0 = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
se_linux_options_1_0 = _se_linux(_SELINUX_1_0)
se_linux_options_1_31 = _se_linux(_SELINUX_1_0 | {"container_engine_t"})

_SECCOMP_POD_ANNOTATION = "seccomp.security.alpha.kubernetes.io/pod"
_SECCOMP_CONTAINER_PREFIX = "container.seccomp.security.alpha.kubernetes.io/"


def seccomp_profile_baseline_1_0(meta: Obj, spec: Obj) -> Result:
    """`check_seccompProfile_baseline.go` `seccompProfileBaseline_1_0`: the alpha annotations, if set, name
    runtime/default, docker/default or localhost/*."""
    annotations = _d(meta.get("annotations"))
    keys = [_SECCOMP_POD_ANNOTATION] + [_SECCOMP_CONTAINER_PREFIX + _name(c) for c in _containers(spec)]
    forbidden = sorted(
        {
            f"{k}={_go_quote(str(annotations[k]))}"
            for k in keys
            if k in annotations
            and not (
                annotations[k] in ("runtime/default", "docker/default")
                or str(annotations[k]).startswith("localhost/")
            )
        }
    )
    if not forbidden:
        return None
    return (
        "seccompProfile",
        f"forbidden {pluralize('annotation', 'annotations', len(forbidden))} {', '.join(forbidden)}",
    )


def _seccomp(spec: Obj, required: bool) -> Result:
    """`check_seccompProfile_baseline.go` `seccompProfileBaseline_1_19` (`required` False) and
    `check_seccompProfile_restricted.go` `seccompProfileRestricted_1_19` (True)."""
    setters: list[str] = []
    bad_values: set[str] = set()
    pod_set = False
    pod_profile = _d(spec.get("securityContext")).get("seccompProfile")
    if isinstance(pod_profile, dict):
        if pod_profile.get("type") in ("RuntimeDefault", "Localhost"):
            pod_set = True
        else:
            setters.append("pod")
            bad_values.add(str(pod_profile.get("type", "")))
    explicit, implicit = [], []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if isinstance(profile, dict):
            if profile.get("type") not in ("RuntimeDefault", "Localhost"):
                explicit.append(_name(c))
                bad_values.add(str(profile.get("type", "")))
        elif not pod_set:
            implicit.append(_name(c))
    setters = _setters(setters, explicit)
    if setters:
        return (
            "seccompProfile",
            f"{' and '.join(setters)} must not set securityContext.seccompProfile.type to "
            f"{join_quote(sorted(bad_values))}",
        )
    if required and implicit:
        return (
            "seccompProfile",
            f"pod or {pluralize('container', 'containers', len(implicit))} {join_quote(implicit)} must set "
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
        )
    return None


def seccomp_profile_baseline_1_19(meta: Obj, spec: Obj) -> Result:
    return _seccomp(spec, required=False)


_SYSCTLS_1_0 = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
    }
)
_SYSCTLS_1_27 = _SYSCTLS_1_0 | {"net.ipv4.ip_local_reserved_ports"}
_SYSCTLS_1_29 = _SYSCTLS_1_27 | {
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
_SYSCTLS_1_32 = _SYSCTLS_1_29 | {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}


def _sysctls(allowed: frozenset[str]) -> CheckFn:
    def check(meta: Obj, spec: Obj) -> Result:
        """`check_sysctls.go`: only the safe sysctls of the policy version."""
        names = [
            str(s.get("name"))
            for s in _l(_d(spec.get("securityContext")).get("sysctls"))
            if isinstance(s, dict) and s.get("name") not in allowed
        ]
        return ("forbidden sysctls", ", ".join(names)) if names else None

    return check


def windows_host_process(meta: Obj, spec: Obj) -> Result:
    """`check_windowsHostProcess.go` `windowsHostProcess_1_0`: windowsOptions.hostProcess not true."""

    def host_process(sc: Obj) -> bool:
        return _d(sc.get("windowsOptions")).get("hostProcess") is True

    setters = ["pod"] if host_process(_d(spec.get("securityContext"))) else []
    setters = _setters(setters, [_name(c) for c in _containers(spec) if host_process(_sc(c))])
    if not setters:
        return None
    return (
        "hostProcess",
        f"{' and '.join(setters)} must not set securityContext.windowsOptions.hostProcess=true",
    )


# --- restricted ---------------------------------------------------------------------------------------


def allow_privilege_escalation(meta: Obj, spec: Obj) -> Result:
    """`check_allowPrivilegeEscalation.go` `allowPrivilegeEscalation_1_8`: every container sets
    allowPrivilegeEscalation=false."""
    bad = [_name(c) for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return (
        "allowPrivilegeEscalation != false",
        f"{pluralize('container', 'containers', len(bad))} {join_quote(bad)} must set "
        "securityContext.allowPrivilegeEscalation=false",
    )


def capabilities_restricted(meta: Obj, spec: Obj) -> Result:
    """`check_capabilities_restricted.go` `capabilitiesRestricted_1_22`: every container drops ALL and adds
    nothing but NET_BIND_SERVICE."""
    missing_drop, adding, forbidden = [], [], set()
    for c in _containers(spec):
        caps = _sc(c).get("capabilities")
        if not isinstance(caps, dict):
            missing_drop.append(_name(c))
            continue
        if "ALL" not in _l(caps.get("drop")):
            missing_drop.append(_name(c))
        extra = [str(x) for x in _l(caps.get("add")) if x != "NET_BIND_SERVICE"]
        if extra:
            adding.append(_name(c))
            forbidden.update(extra)
    details = []
    if missing_drop:
        details.append(
            f"{pluralize('container', 'containers', len(missing_drop))} {join_quote(missing_drop)} must set "
            'securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{pluralize('container', 'containers', len(adding))} {join_quote(adding)} must not include "
            f"{join_quote(sorted(forbidden))} in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


_ALLOWED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "image",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
_RESTRICTED_VOLUMES = (
    "hostPath gcePersistentDisk awsElasticBlockStore gitRepo nfs iscsi glusterfs rbd flexVolume cinder "
    "cephfs flocker fc azureFile vsphereVolume quobyte azureDisk photonPersistentDisk portworxVolume scaleIO "
    "storageos"
).split()


def restricted_volumes(meta: Obj, spec: Obj) -> Result:
    """`check_restrictedVolumes.go` `restrictedVolumes_1_0`: only configMap, csi, downwardAPI, emptyDir,
    ephemeral, image (1.33+ binaries, at every policy version), persistentVolumeClaim, projected, secret."""
    bad, types = [], set()
    for v in _l(spec.get("volumes")):
        if not isinstance(v, dict) or any(key in v for key in _ALLOWED_VOLUMES):
            continue
        bad.append(str(v.get("name", "")))
        types.add(next((t for t in _RESTRICTED_VOLUMES if t in v), "unknown"))
    if not bad:
        return None
    return (
        "restricted volume types",
        f"{pluralize('volume', 'volumes', len(bad))} {join_quote(bad)} {pluralize('uses', 'use', len(bad))} "
        f"{pluralize('restricted volume type', 'restricted volume types', len(types))} "
        f"{join_quote(sorted(types))}",
    )


def run_as_non_root(meta: Obj, spec: Obj) -> Result:
    """`check_runAsNonRoot.go` `runAsNonRoot_1_0`: runAsNonRoot=true on the pod or every container, and
    false nowhere."""
    setters = []
    pod_value = _d(spec.get("securityContext")).get("runAsNonRoot")
    if pod_value is False:
        setters.append("pod")
    explicit, implicit = [], []
    for c in _containers(spec):
        value = _sc(c).get("runAsNonRoot")
        if value is False:
            explicit.append(_name(c))
        elif value is None and pod_value is not True:
            implicit.append(_name(c))
    setters = _setters(setters, explicit)
    if setters:
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {pluralize('container', 'containers', len(implicit))} {join_quote(implicit)} must set "
            "securityContext.runAsNonRoot=true",
        )
    return None


def run_as_user(meta: Obj, spec: Obj) -> Result:
    """`check_runAsUser.go` `runAsUser_1_23`: runAsUser is not 0 on the pod or any container."""
    setters = ["pod"] if _d(spec.get("securityContext")).get("runAsUser") == 0 else []
    setters = _setters(setters, [_name(c) for c in _containers(spec) if _sc(c).get("runAsUser") == 0])
    return ("runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0") if setters else None


def seccomp_profile_restricted(meta: Obj, spec: Obj) -> Result:
    return _seccomp(spec, required=True)


def _not_windows(check: CheckFn) -> CheckFn:
    """The 1.25 revisions: a pod with `spec.os.name: windows` is exempt (its API validation forbids the
    Linux-only fields)."""

    def revised(meta: Obj, spec: Obj) -> Result:
        return None if _windows(spec) else check(meta, spec)

    revised.__doc__ = check.__doc__
    return revised


def _not_user_namespace(check: CheckFn) -> CheckFn:
    """The 1.35 revisions of runAsNonRoot and runAsUser: skipped for a pod with `hostUsers: false`."""

    def revised(meta: Obj, spec: Obj) -> Result:
        return None if _user_namespace(spec) else check(meta, spec)

    revised.__doc__ = check.__doc__
    return revised


# --- registry -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Revision:
    """`checks.go` `VersionedCheck`."""

    minimum: int
    """the first policy minor version (1.x) this revision applies to"""
    check: CheckFn
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """`checks.go` `Check`."""

    id: str
    level: str
    revisions: tuple[Revision, ...]


CHECKS: tuple[Check, ...] = (
    Check("appArmorProfile", BASELINE, (Revision(0, app_armor_profile),)),
    Check("capabilities_baseline", BASELINE, (Revision(0, capabilities_baseline),)),
    Check("hostNamespaces", BASELINE, (Revision(0, host_namespaces),)),
    Check("hostPathVolumes", BASELINE, (Revision(0, host_path_volumes),)),
    Check("hostPorts", BASELINE, (Revision(0, host_ports),)),
    Check("hostProbesAndHostLifecycle", BASELINE, (Revision(34, host_probes_and_host_lifecycle),)),
    Check("privileged", BASELINE, (Revision(0, privileged),)),
    Check("procMount", BASELINE, (Revision(0, proc_mount), Revision(35, proc_mount_1_35_baseline))),
    Check(
        "seLinuxOptions", BASELINE, (Revision(0, se_linux_options_1_0), Revision(31, se_linux_options_1_31))
    ),
    Check(
        "seccompProfile_baseline",
        BASELINE,
        (Revision(0, seccomp_profile_baseline_1_0), Revision(19, seccomp_profile_baseline_1_19)),
    ),
    Check(
        "sysctls",
        BASELINE,
        (
            Revision(0, _sysctls(_SYSCTLS_1_0)),
            Revision(27, _sysctls(_SYSCTLS_1_27)),
            Revision(29, _sysctls(_SYSCTLS_1_29)),
            Revision(32, _sysctls(_SYSCTLS_1_32)),
        ),
    ),
    Check("windowsHostProcess", BASELINE, (Revision(0, windows_host_process),)),
    Check(
        "allowPrivilegeEscalation",
        RESTRICTED,
        (Revision(8, allow_privilege_escalation), Revision(25, _not_windows(allow_privilege_escalation))),
    ),
    Check(
        "capabilities_restricted",
        RESTRICTED,
        (
            Revision(22, capabilities_restricted, ("capabilities_baseline",)),
            Revision(25, _not_windows(capabilities_restricted), ("capabilities_baseline",)),
        ),
    ),
    Check("procMount_restricted", RESTRICTED, (Revision(35, proc_mount, ("procMount",)),)),
    Check("restrictedVolumes", RESTRICTED, (Revision(0, restricted_volumes, ("hostPathVolumes",)),)),
    Check(
        "runAsNonRoot",
        RESTRICTED,
        (Revision(0, run_as_non_root), Revision(35, _not_user_namespace(run_as_non_root))),
    ),
    Check(
        "runAsUser", RESTRICTED, (Revision(23, run_as_user), Revision(35, _not_user_namespace(run_as_user)))
    ),
    Check(
        "seccompProfile_restricted",
        RESTRICTED,
        (
            Revision(19, seccomp_profile_restricted, ("seccompProfile_baseline",)),
            Revision(25, _not_windows(seccomp_profile_restricted), ("seccompProfile_baseline",)),
        ),
    ),
)

MAX_VERSION = max(r.minimum for c in CHECKS for r in c.revisions)
"""`registry.go` `populate`: the newest minimum version of any check; `latest` evaluates as this one"""


def _revision(check: Check, minor: int) -> Revision | None:
    found = None
    for revision in check.revisions:
        if revision.minimum <= minor:
            found = revision
    return found


def checks_for(level: str, minor: int) -> list[CheckFn]:
    """`registry.go` `EvaluatePod`'s checks for a level at policy version 1.`minor` (already clamped to
    the registry's newest): baseline IDs sorted, then restricted IDs sorted, the overridden baseline ones
    left out of restricted."""
    chosen = {c.id: (c, r) for c in CHECKS if (r := _revision(c, minor)) is not None}
    if level == BASELINE:
        ids = sorted(i for i, (c, _) in chosen.items() if c.level == BASELINE)
    else:
        overridden = {o for c, r in chosen.values() if c.level == RESTRICTED for o in r.overrides}
        ids = sorted(i for i, (c, _) in chosen.items() if c.level == BASELINE and i not in overridden)
        ids += sorted(i for i, (c, _) in chosen.items() if c.level == RESTRICTED)
    return [chosen[i][1].check for i in ids]


def evaluate(level: str, minor: int, meta: Obj, spec: Obj) -> list[tuple[str, str]]:
    """The forbidden (reason, detail) pairs of a pod's metadata and spec at a level and policy version."""
    if level not in (BASELINE, RESTRICTED):
        return []
    return [result for check in checks_for(level, minor) if (result := check(meta, spec)) is not None]


def forbidden_detail(results: list[tuple[str, str]]) -> str:
    """`checks.go` `AggregateCheckResult.ForbiddenDetail`: `reason (detail), reason, ...`."""
    return ", ".join(f"{reason} ({detail})" if detail else reason for reason, detail in results)


def forbidden_reason(results: list[tuple[str, str]]) -> str:
    """`checks.go` `AggregateCheckResult.ForbiddenReason`: the reasons, comma-separated."""
    return ", ".join(reason for reason, _ in results)
