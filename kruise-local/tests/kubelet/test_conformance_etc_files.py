"""A pod's `/etc/hosts`, `/etc/hostname` and `/etc/resolv.conf` (`etcfiles.py`) and its IPC namespace,
through the real `kubernetes` client:

- the kubelet's managed `/etc/hosts` (`kubelet_pods.go` `makeMounts`, `makeHostsMount`, `ensureHostsFile`,
  `managedHostsFileContent`): the pod's IP, hostname, subdomain and `hostAliases`; one file for the pod,
  writable in every container whatever its `readOnlyRootFilesystem` (a root container's change is read by
  the others), written afresh at every container start; none in a container that mounts `/etc/hosts` itself;
- containerd's `/etc/hostname` and `/etc/resolv.conf` (`setupSandboxFiles`, `linuxContainerMounts`): one per
  pod, read-only exactly in the containers with `readOnlyRootFilesystem`; the DNS config of `GetPodDNS`;
- the pod's IPC namespace (the sandbox's, which its containers join): System V objects one container makes
  the others see, another pod does not; its namespaced sysctls (`kernel.shm_rmid_forced`) applied in it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from kruise_local.testing import container, exec_output, pod_body, running, status_of, wait_for

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the runtime's namespaces need kruise-local as root"
)

CTL = [{"name": "ctl", "mountPath": "/ctl"}]
RO = {"readOnlyRootFilesystem": True}


def waiting(name: str, **extra: Any) -> dict[str, Any]:
    """A container that runs until /ctl/<name> appears (then removes it and exits: restartPolicy Always
    starts a new instance)."""
    script = f"while [ ! -e /ctl/{name} ]; do sleep 0.05; done; rm /ctl/{name}"
    mounts = CTL + extra.pop("volumeMounts", [])
    return container(name, script, volumeMounts=mounts, **extra)


def sh(core: Any, ns: str, pod: str, name: str, script: str) -> str:
    return exec_output(core, ns, pod, name, ["/bin/sh", "-c", f'{script}\necho "rc=$?"'])


def start(core: Any, ns: str, body: dict[str, Any]) -> None:
    core.create_namespaced_pod(ns, body)
    name = body["metadata"]["name"]
    for c in body["spec"]["containers"]:
        wait_for(lambda c=c: running(core, ns, name, c["name"]), timeout=60, what=f"{name}/{c['name']}")


def restart(core: Any, ns: str, pod: str, name: str) -> None:
    before = status_of(core, ns, pod, name).restart_count
    sh(core, ns, pod, name, f"touch /ctl/{name}")
    wait_for(
        lambda: (cs := running(core, ns, pod, name)) is not None and cs.restart_count == before + 1,
        timeout=60,
        what=f"{name}'s next instance",
    )


def test_the_managed_hosts_file_is_the_pods_writable_everywhere_and_rewritten_at_each_start(
    core: Any, namespace: str
) -> None:
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "own"}, "data": {"hosts": "9.9.9.9 own\n"}}
    )
    own = [{"name": "own", "mountPath": "/etc/hosts", "subPath": "hosts"}]
    body = pod_body(
        "hosts",
        waiting("a", securityContext=RO),
        waiting("b"),
        waiting("c", volumeMounts=own),
        hostname="h1",
        subdomain="sub",
        hostAliases=[{"ip": "10.1.2.3", "hostnames": ["db.example", "db"]}],
        volumes=[{"name": "ctl", "emptyDir": {}}, {"name": "own", "configMap": {"name": "own"}}],
    )
    start(core, namespace, body)
    ip = core.read_namespaced_pod("hosts", namespace).status.pod_ip
    managed = (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\n"
        "fe00::0\tip6-mcastprefix\n"
        "fe00::1\tip6-allnodes\n"
        "fe00::2\tip6-allrouters\n"
        f"{ip}\th1.sub.{namespace}.svc.cluster.local\th1\n"
        "\n"
        "# Entries added by HostAliases.\n"
        "10.1.2.3\tdb.example\tdb\n"
    )
    for name in "ab":
        assert (
            sh(core, namespace, "hosts", name, "cat /etc/hosts; stat -c %a /etc/hosts")
            == f"{managed}644\nrc=0\n"
        )
    assert (
        sh(core, namespace, "hosts", "c", "cat /etc/hosts") == "9.9.9.9 own\nrc=0\n"
    )  # its own: no managed one
    # a root container with a read-only root filesystem still writes the pod's file, and the others read it
    assert sh(core, namespace, "hosts", "a", "echo '6.6.6.6 db.example' >> /etc/hosts") == "rc=0\n"
    assert sh(core, namespace, "hosts", "b", "tail -n1 /etc/hosts") == "6.6.6.6 db.example\nrc=0\n"
    # the next start of a container that has it writes it afresh, for all of them
    restart(core, namespace, "hosts", "b")
    assert sh(core, namespace, "hosts", "a", "cat /etc/hosts") == f"{managed}rc=0\n"


def test_hostname_and_resolv_conf_are_the_pods_read_only_with_a_read_only_root(
    core: Any, namespace: str
) -> None:
    body = pod_body(
        "dns", waiting("ro", securityContext=RO), waiting("rw"), volumes=[{"name": "ctl", "emptyDir": {}}]
    )
    start(core, namespace, body)
    with open("/etc/resolv.conf") as f:
        node = [line.split()[1:] for line in f if line.startswith("search")]
    cluster = [f"{namespace}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    searches = list(dict.fromkeys(cluster + [s.removesuffix(".") for s in (node[-1] if node else [])]))
    resolv = f"search {' '.join(searches)}\nnameserver 10.96.0.10\noptions ndots:5\n"
    for name in ("ro", "rw"):
        said = sh(core, namespace, "dns", name, "cat /etc/hostname /etc/resolv.conf")
        assert said == f"dns\n{resolv}rc=0\n"
    for path in ("/etc/hostname", "/etc/resolv.conf"):
        assert "Read-only file system" in sh(core, namespace, "dns", "ro", f"echo x >> {path}")
        assert sh(core, namespace, "dns", "rw", f"echo '# rw' >> {path}") == "rc=0\n"
        assert sh(core, namespace, "dns", "ro", f"tail -n1 {path}") == "# rw\nrc=0\n"  # one file for the pod

    none = pod_body(
        "none",
        waiting("c"),
        volumes=[{"name": "ctl", "emptyDir": {}}],
        dnsPolicy="None",
        dnsConfig={
            "nameservers": ["192.0.2.53"],
            "searches": ["a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        },
        setHostnameAsFQDN=True,
        hostname="n",
        subdomain="s",
    )
    start(core, namespace, none)
    said = sh(core, namespace, "none", "c", "cat /etc/hostname /etc/resolv.conf")
    fqdn = f"n.s.{namespace}.svc.cluster.local"
    assert said == f"{fqdn}\nsearch a.example\nnameserver 192.0.2.53\noptions ndots:2 edns0\nrc=0\n"


def test_the_pods_containers_share_its_ipc_namespace_and_its_sysctls(
    cluster: Any, core: Any, namespace: str
) -> None:
    volumes = [{"name": "ctl", "emptyDir": {}}]
    sysctls = {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}
    start(
        core, namespace, pod_body("ipc", waiting("a"), waiting("b"), volumes=volumes, securityContext=sysctls)
    )
    start(core, namespace, pod_body("other", waiting("a"), volumes=volumes))
    make = "import ctypes; print(ctypes.CDLL(None).msgget(0x4B43, 0o1600) >= 0)"  # IPC_CREAT | 0600
    assert sh(core, namespace, "ipc", "a", f'python3 -c "{make}"') == "True\nrc=0\n"
    queues = "awk '{print $1}' /proc/sysvipc/msg"
    assert str(0x4B43) in sh(core, namespace, "ipc", "b", queues).split()  # the pod's namespace
    assert str(0x4B43) not in sh(core, namespace, "other", "a", queues).split()
    with open("/proc/sysvipc/msg") as f:
        assert str(0x4B43) not in [line.split()[0] for line in f]  # not the node's either
    assert sh(core, namespace, "ipc", "b", "cat /proc/sys/kernel/shm_rmid_forced") == "1\nrc=0\n"
    assert sh(core, namespace, "other", "a", "cat /proc/sys/kernel/shm_rmid_forced") == "0\nrc=0\n"
    if cluster.kubelet.runtime.sandbox == "oci":  # containerd's default spec mounts the namespace's queues
        assert (
            sh(core, namespace, "ipc", "a", "grep -c '^mqueue /dev/mqueue mqueue' /proc/mounts")
            == "1\nrc=0\n"
        )
