"""The capabilities a container's process gets, as the kubelet and containerd compute them.

The kubelet passes `securityContext.capabilities` and `privileged` through to the runtime
(`pkg/kubelet/kuberuntime/security_context.go` `convertToRuntimeSecurityContext`). containerd starts from its
default set (`pkg/oci/spec.go` `defaultUnixCaps`), gives a privileged container every capability, and
otherwise applies the security context (`internal/cri/opts/spec_linux_opts.go` `WithCapabilities`): an
`add` of ALL, then a `drop` of ALL, then the named adds, then the named drops (names without `CAP_`, any
case). runc makes the result the process's bounding, effective and permitted sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

DEFAULT_CAPABILITIES: tuple[str, ...] = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
"""containerd's `defaultUnixCaps`: what a container without a security context gets."""


CAPABILITY_NAMES = (
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE "
    "NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT "
    "SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE "
    "AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ "
    "PERFMON BPF CHECKPOINT_RESTORE"
).split()
"""Capability names by number (linux/capability.h)."""


def _current() -> tuple[str, ...]:
    """The capabilities this process has (containerd's `cap.Current`: the effective set it reads from
    `/proc/self/status`), by name, in kernel order."""
    mask = 0
    try:
        with open("/proc/self/status") as f:
            mask = next((int(line.split()[1], 16) for line in f if line.startswith("CapEff:")), 0)
    except (OSError, ValueError):
        pass
    return tuple(f"CAP_{name}" for i, name in enumerate(CAPABILITY_NAMES) if mask >> i & 1)


ALL_CAPABILITIES = _current()
"""What a privileged container or an `add` of ALL gets: every capability the runtime has."""


def container_capabilities(container: Mapping[str, Any]) -> tuple[str, ...]:
    """The capabilities (``CAP_*``, kernel order) the runtime gives `container` (a pod spec container)."""
    sc = container.get("securityContext") or {}
    if sc.get("privileged"):
        return ALL_CAPABILITIES
    caps = sc.get("capabilities") or {}
    add = [str(c).upper() for c in caps.get("add") or ()]
    drop = [str(c).upper() for c in caps.get("drop") or ()]
    current = set(DEFAULT_CAPABILITIES)
    if "ALL" in add:
        current = set(ALL_CAPABILITIES)
    if "ALL" in drop:
        current = set()
    current |= {f"CAP_{c}" for c in add if c != "ALL"}
    current -= {f"CAP_{c}" for c in drop if c != "ALL"}
    return tuple(f"CAP_{name}" for name in CAPABILITY_NAMES if f"CAP_{name}" in current)


def add_no_new_privileges(container: Mapping[str, Any]) -> bool:
    """Whether the runtime sets no_new_privs on `container`'s process: only when its security context sets
    `allowPrivilegeEscalation` to false (`pkg/securitycontext/util.go` `AddNoNewPrivileges`; unset counts as
    allowed, whatever the API's documentation says of CAP_SYS_ADMIN and privileged containers: the API server
    refuses false with those, `ValidateSecurityContext`)."""
    return (container.get("securityContext") or {}).get("allowPrivilegeEscalation") is False
