"""Red team of sealed stages: the pod's `/etc/hosts`, `/etc/resolv.conf` and `/etc/hostname`. On a real node
the kubelet writes one hosts file per pod and mounts it writable at `/etc/hosts` into every container that
does not mount that path itself, whatever its `readOnlyRootFilesystem` (`kubelet_pods.go` `makeMounts`,
`makeHostsMount`); containerd mounts the pod's `hostname` and `resolv.conf`, read-only with a read-only root
(`linuxContainerMounts`). kruise-local does the same (`etcfiles.py`). A root stage that rewrote `/etc/hosts`
would decide what every later stage resolves, in both slots: each case asserts the later stages read the
pod's own entries (its hostAliases included) and that the attacker could write none of the three files."""

from __future__ import annotations

import os

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0, reason="the kubelet's writable /etc/hosts needs kruise-local as root"
    ),
]

START = pendulum.datetime(2026, 1, 1, tz="UTC")
PY = "python:3.11-slim"
ALIAS = {"ip": "10.1.2.3", "hostnames": ["db.example", "db"]}

# A root stage puts its own entries first (the first match wins) for an alias, a name of its own and the
# pod's hostname, and rewrites the DNS config and the hostname. The pod's hostname is read from
# /etc/hostname: kruise-local gives a pod no UTS namespace of its own (the kernel's hostname is the node's).
ATTACK = r"""
import json, os
evil = {
    "/etc/hosts": "6.6.6.6\tdb.example evil.example %s\n" % open("/etc/hostname").read().strip(),
    "/etc/resolv.conf": "nameserver 6.6.6.6\n",
    "/etc/hostname": "evil\n",
}
said = {}
for path, text in evil.items():
    try:
        old = open(path).read()
        with open(path, "w") as f:
            f.write(text + old)
        said[path] = "WROTE"
    except OSError as e:
        said[path] = e.strerror
print("ATTACKED", said)
json.dump(said, open(os.environ["CHAIN_OUTPUT"], "w"))
"""
LOOK = r"""
import json, os, socket
def ip(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return None
json.dump(
    {
        "db": ip("db.example"),
        "me": ip(open("/etc/hostname").read().strip()),
        "hosts": open("/etc/hosts").read(),
        "resolv": open("/etc/resolv.conf").read(),
        "hostname": open("/etc/hostname").read(),
    },
    open(os.environ["CHAIN_OUTPUT"], "w"),
)
"""


def test_a_root_stage_cannot_change_what_later_stages_resolve(e2e_cluster, capfd):
    """The attacker (slot-a) rewrites /etc/hosts, /etc/resolv.conf and /etc/hostname; the next stage (slot-b,
    the other slot) and the one after (slot-a, the attacker's container: one image, no restart) resolve the
    pod's alias and hostname as the kubelet wrote them."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    template = {"spec": {**FAST_POD["pod_template"]["spec"], "hostAliases": [ALIAS]}}
    with DAG("redteam_etc_hosts", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, pod_template=template) as chain:
            attacker = chain.stage("attacker", image=PY, cmds=["python3", "-c", ATTACK])
            other = chain.stage("other", image=PY, cmds=["python3", "-c", LOOK])
            same = chain.stage("same", image=PY, cmds=["python3", "-c", LOOK])
            attacker >> other >> same
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "ATTACKED" in out, out[-3000:]
    states = task_states(run)
    assert [states[f"c.{name}"][0] for name in ("attacker", "other", "same")] == ["success"] * 3, out[-3000:]
    results = xcoms(run)
    seen = [results[f"c.{name}"]["outputs"] for name in ("other", "same")]
    for outputs in seen:
        assert outputs["db"] == "10.1.2.3", outputs
        assert outputs["me"] not in (None, "6.6.6.6"), outputs
        assert outputs["hosts"].startswith("# Kubernetes-managed hosts file.\n"), outputs
        assert "10.1.2.3\tdb.example\tdb\n" in outputs["hosts"], outputs
        assert "6.6.6.6" not in outputs["hosts"] + outputs["resolv"], outputs
        assert outputs["hostname"] != "evil\n" and "evil" not in outputs["hosts"], outputs
    assert seen[0] == seen[1]
    written = results["c.attacker"]["outputs"]
    assert set(written.values()) == {"Read-only file system"}, written  # all three, in a slot
