"""A pod's `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf`, as the kubelet and containerd make and
mount them.

- **The kubelet's managed `/etc/hosts`** (`pkg/kubelet/kubelet_pods.go` `makeMounts`, `makeHostsMount`,
  `ensureHostsFile`): one file per pod (`<pod dir>/etc-hosts`), written afresh, mode 0644, at every container
  start of the pod (init containers included: `makeMounts` runs for each) and bind-mounted **writable**
  (`ReadOnly: false`) at `/etc/hosts` into every container, whatever its `readOnlyRootFilesystem`: what one
  container writes there, the pod's other containers read, until the next container start rewrites it. Its
  content (`managedHostsFileContent`): a header, localhost's IPv4 and IPv6 lines, the pod's IPs with its
  hostname (and `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>` first when the pod has a
  subdomain), then the pod's `hostAliases`; with `hostNetwork` the node's own hosts file under another header,
  then the aliases (`nodeHostsFileContent`). A container that mounts a volume at exactly `/etc/hosts` gets no
  managed file (`mount.MountPath != etcHostsPath`).
- **containerd's sandbox files** (`internal/cri/server/podsandbox/sandbox_run_linux.go` `setupSandboxFiles`;
  `internal/cri/server/container_create.go` `linuxContainerMounts`): per pod, `hostname` (the pod's hostname
  and a newline, 0644) and `resolv.conf` (the kubelet's DNS config for the pod, 0644), bind-mounted into every
  container at `/etc/hostname` and `/etc/resolv.conf`, read-only exactly when the container's
  `readOnlyRootFilesystem` is set (`Readonly: securityContext.GetReadonlyRootfs()`), each unless the container
  mounts something at that path itself (`isInCRIMounts`). CRI-O does the same (`setupContainerMounts`). Its
  `hosts` copy of the node's file is mounted only when the kubelet passes none, which a kubelet that knows the
  pod's IP (always, here) never does.
- **The pod's hostname and DNS** (`GeneratePodHostNameAndDomain`: `spec.hostname` or the pod's name, cut to
  63 characters; `util.GetNodenameForKernel` for `setHostnameAsFQDN`; `pkg/kubelet/network/dns/dns.go`
  `GetPodDNS`). This kubelet is configured as kubeadm configures one: cluster DNS `CLUSTER_DNS`, cluster
  domain `CLUSTER_DOMAIN`, the node's `/etc/resolv.conf` as `--resolv-conf`. No DNS server answers at that
  address (a pod's network namespace here has nothing but `lo`).

Not modelled: the `HostnameOverride` feature gate (alpha), Windows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .cri import Mount

ETC_HOSTS, ETC_HOSTNAME, RESOLV_CONF = "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"
CLUSTER_DNS = ("10.96.0.10",)
"""the kubelet's `clusterDNS`: kubeadm's default (the tenth address of its 10.96.0.0/12 service range)"""
CLUSTER_DOMAIN = "cluster.local"
NODE_HOSTS, NODE_RESOLV_CONF = "/etc/hosts", "/etc/resolv.conf"
MANAGED_HEADER = "# Kubernetes-managed hosts file.\n"
HOST_NETWORK_HEADER = "# Kubernetes-managed hosts file (host network).\n"
_HOSTNAME_MAX, _FQDN_MAX = 63, 64
MAX_NAMESERVERS, MAX_SEARCHES, MAX_SEARCH_CHARS, MAX_SEARCH_PATH = 3, 32, 2048, 253
"""`validation.MaxDNSNameservers` and the expanded search limits (`ExpandedDNSConfig`, GA in 1.28)"""


class SandboxConfigError(Exception):
    """The kubelet cannot make the pod's sandbox config (`generatePodSandboxConfig`)."""


def pod_hostname_and_domain(pod: dict[str, Any]) -> tuple[str, str]:
    """`GeneratePodHostNameAndDomain`: the pod's hostname (`spec.hostname`, else its name, cut to 63
    characters with trailing '-' and '.' removed) and its domain (`<subdomain>.<namespace>.svc.<cluster
    domain>` when it has a subdomain, else empty)."""
    spec = pod.get("spec") or {}
    hostname = spec.get("hostname") or pod["metadata"]["name"]
    if len(hostname) > _HOSTNAME_MAX:
        hostname = hostname[:_HOSTNAME_MAX].rstrip("-.")
    subdomain = spec.get("subdomain") or ""
    namespace = pod["metadata"].get("namespace", "")
    return hostname, f"{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}" if subdomain else ""


def kernel_hostname(pod: dict[str, Any]) -> str:
    """The hostname the sandbox gets (`generatePodSandboxConfig`: none with `hostNetwork`, the node's then;
    `GetNodenameForKernel`: the FQDN with `setHostnameAsFQDN`, at most 64 characters)."""
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        return os.uname().nodename
    hostname, domain = pod_hostname_and_domain(pod)
    if not (domain and spec.get("setHostnameAsFQDN")):
        return hostname
    fqdn = f"{hostname}.{domain}"
    if len(fqdn) > _FQDN_MAX:
        raise SandboxConfigError(
            f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long "
            f"({_FQDN_MAX} characters is the max, {len(fqdn)} characters requested)"
        )
    return fqdn


def _aliases(pod: dict[str, Any]) -> str:
    """`hostsEntriesFromHostAliases`: one line per alias entry, its IP and its hostnames, tab-separated."""
    aliases = (pod.get("spec") or {}).get("hostAliases") or []
    if not aliases:
        return ""
    lines = [f"{a.get('ip', '')}\t" + "\t".join(a.get("hostnames") or []) + "\n" for a in aliases]
    return "\n# Entries added by HostAliases.\n" + "".join(lines)


def hosts_content(pod: dict[str, Any], pod_ips: Sequence[str]) -> bytes:
    """`managedHostsFileContent`, or with `hostNetwork` `nodeHostsFileContent`."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return (HOST_NETWORK_HEADER + Path(NODE_HOSTS).read_text() + _aliases(pod)).encode()
    hostname, domain = pod_hostname_and_domain(pod)
    lines = [
        MANAGED_HEADER,
        "127.0.0.1\tlocalhost\n",
        "::1\tlocalhost ip6-localhost ip6-loopback\n",
        "fe00::0\tip6-localnet\n",
        "fe00::0\tip6-mcastprefix\n",
        "fe00::1\tip6-allnodes\n",
        "fe00::2\tip6-allrouters\n",
    ]
    names = f"{hostname}.{domain}\t{hostname}" if domain else hostname
    lines += [f"{ip}\t{names}\n" for ip in pod_ips]
    return ("".join(lines) + _aliases(pod)).encode()


def hosts_mount(
    pod: dict[str, Any], spec: dict[str, Any], pod_dir: Path, pod_ips: Sequence[str]
) -> Mount | None:
    """The managed `/etc/hosts` of container `spec` (`makeMounts`' last step): None when the pod has no IP
    and no host network (`shouldMountHostsFile`) or the container mounts something at exactly `/etc/hosts`;
    else the pod's file, written now (`ensureHostsFile`: truncated and rewritten in place, so every container
    that has it mounted reads the new content, then mode 0644), mounted writable."""
    if not (pod_ips or (pod.get("spec") or {}).get("hostNetwork")):
        return None
    if any(m.get("mountPath") == ETC_HOSTS for m in spec.get("volumeMounts") or []):
        return None
    path = pod_dir / "etc-hosts"
    with open(path, "wb") as f:
        f.write(hosts_content(pod, pod_ips))
    path.chmod(0o644)
    return Mount(path, ETC_HOSTS, read_only=False)


@dataclass
class DNSConfig:
    """The CRI's `DNSConfig`: nameservers, search domains, resolver options."""

    servers: list[str] = field(default_factory=list)
    searches: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


def parse_resolv_conf(text: str) -> DNSConfig:
    """`parseResolvConf`: `nameserver` lines accumulate, the last `search` and `options` lines win (search
    domains without their trailing dot); comments skipped."""
    config = DNSConfig()
    for line in text.split("\n"):
        fields = line.strip().split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0] == "nameserver" and len(fields) >= 2:
            config.servers.append(fields[1])
        elif fields[0] == "search":
            config.searches = [s.removesuffix(".") for s in fields[1:]]
        elif fields[0] == "options":
            config.options = fields[1:]
    return config


def _unique(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def pod_dns(pod: dict[str, Any], warn: Callable[[str], None]) -> DNSConfig:
    """`GetPodDNS`: the node's resolver config as the base; `None` starts empty; `ClusterFirst` (not on the
    host network) and `ClusterFirstWithHostNet` put the cluster DNS first and only, the cluster's search
    domains before the node's and `ndots:5`; `Default` (and `ClusterFirst` on the host network) keep the
    node's. Then the pod's `dnsConfig` is appended (duplicates dropped, its options overriding), and the
    result cut to the resolver's limits (`formDNSConfigFitsLimits`; `warn` gets the DNSConfigForming
    message)."""
    spec = pod.get("spec") or {}
    try:
        config = parse_resolv_conf(Path(NODE_RESOLV_CONF).read_text(errors="replace"))
    except OSError:
        config = DNSConfig()
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    if policy == "None":
        config = DNSConfig()
    elif policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst" and not spec.get("hostNetwork")):
        namespace = pod["metadata"].get("namespace", "")
        cluster = [f"{namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
        config = DNSConfig(list(CLUSTER_DNS), _unique(cluster + config.searches), ["ndots:5"])
    extra = spec.get("dnsConfig")
    if extra:
        config.servers = _unique(config.servers + list(extra.get("nameservers") or []))
        config.searches = _unique(config.searches + list(extra.get("searches") or []))
        options = dict(o.partition(":")[::2] for o in config.options)
        options.update({o["name"]: o.get("value") or "" for o in extra.get("options") or []})
        config.options = [f"{k}:{v}" if v else k for k, v in options.items()]
    if len(config.servers) > MAX_NAMESERVERS:
        config.servers = config.servers[:MAX_NAMESERVERS]
        warn(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver "
            f"line is: {' '.join(config.servers)}"
        )
    searches = [s for s in config.searches[:MAX_SEARCHES] if len(s) <= MAX_SEARCH_PATH]
    while len(" ".join(searches)) > MAX_SEARCH_CHARS:
        searches.pop()
    if searches != config.searches:
        config.searches = searches
        warn(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line "
            f"is: {' '.join(searches)}"
        )
    return config


def resolv_conf(config: DNSConfig) -> str:
    """containerd's `parseDNSOptions`: the search, nameserver and options lines of `config`."""
    text = f"search {' '.join(config.searches)}\n" if config.searches else ""
    text += "".join(f"nameserver {server}\n" for server in config.servers)
    return text + (f"options {' '.join(config.options)}\n" if config.options else "")


def sandbox_files(folder: Path, hostname: str, dns: DNSConfig) -> dict[str, Path]:
    """containerd's `setupSandboxFiles`: the pod's `hostname` and `resolv.conf` (0644) in `folder`, by the
    container path each is mounted at."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {ETC_HOSTNAME: folder / "hostname", RESOLV_CONF: folder / "resolv.conf"}
    files[ETC_HOSTNAME].write_text(hostname + "\n")
    files[RESOLV_CONF].write_text(resolv_conf(dns))
    for path in files.values():
        path.chmod(0o644)
    return files


def pod_files(pod: dict[str, Any], folder: Path, warn: Callable[[str], None]) -> dict[str, Path]:
    """The pod sandbox's files (`sandbox_files`) of `pod`, as the kubelet configures the sandbox
    (`generatePodSandboxConfig`: `kernel_hostname`, `pod_dns`); raises SandboxConfigError."""
    return sandbox_files(folder, kernel_hostname(pod), pod_dns(pod, warn))


def runtime_mounts(files: dict[str, Path], mounts: Sequence[Mount], read_only_root: bool) -> list[Mount]:
    """containerd's `linuxContainerMounts` for `/etc/hostname` and `/etc/resolv.conf`: the sandbox's files,
    read-only exactly with `readOnlyRootFilesystem`, each unless the kubelet's mounts already hold that path
    (`isInCRIMounts`, paths cleaned)."""
    taken = {os.path.normpath(m.container_path) for m in mounts}
    return [Mount(host, path, read_only_root) for path, host in files.items() if path not in taken]
