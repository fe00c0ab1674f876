"""Conformance of the local kubelet's crash-loop back-off with the real one (`kuberuntime_manager.go`
`doBackOff`, client-go `util/flowcontrol/backoff.go`, `kubelet.go` `newCrashLoopBackOff`): it applies to
every start of a container that has an exited instance, image-patch restarts and CRR restarts included, keyed
on pod + container name + hash(name, image), measured from the FinishedAt of the newest exited instance in the
pod status the kubelet's sync began with. Driven through the real `kubernetes` client; the node's clock is
moved forward instead of sleeping through back-offs."""

from __future__ import annotations

import re

import pytest
from kruise_local.testing import container, pod_body, running, status_of, wait_for

A, B = "busybox:1.36", "alpine:3.20"


@pytest.fixture
def node(cluster):
    """The test cluster's node; its kubelet setting and clock are put back afterwards."""
    name = next(iter(cluster.kubelet.nodes))
    yield name
    cluster.configure_node(name, 300)
    cluster.call(lambda: setattr(cluster.kubelet.nodes[name], "clock_offset", 0.0))


def _patch_image(core, namespace, image, name="p"):
    core.patch_namespaced_pod(name, namespace, {"spec": {"containers": [{"name": "c", "image": image}]}})


def _restarted(core, namespace, seen):
    cs = running(core, namespace, "p", "c")
    return cs if cs is not None and cs.container_id not in seen else None


def _backing_off(core, namespace, name="p"):
    cs = status_of(core, namespace, name, "c")
    w = cs.state.waiting if cs else None
    return w if w is not None and w.reason == "CrashLoopBackOff" else None


def _crr(custom, namespace, name):
    custom.create_namespaced_custom_object(
        "apps.kruise.io",
        "v1alpha1",
        namespace,
        "containerrecreaterequests",
        {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": name},
            "spec": {
                "podName": "p",
                "containers": [{"name": "c"}],
                "strategy": {"failurePolicy": "Fail"},
                "activeDeadlineSeconds": 120,
                "ttlSecondsAfterFinished": 60,
            },
        },
    )


def test_alternating_images_back_off_from_the_fifth_start(cluster, core, namespace, node):
    """A, B, A, B start at once (each key's first start, or no exited instance before the sync); the fifth
    start (A again, shortly after the fourth) is refused: key A was started 10 s back-off ago from A's
    previous instance, which exited when the fourth start killed it."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 300", image=A)))
    seen = [wait_for(lambda: running(core, namespace, "p", "c"), what="first start").container_id]
    for image in (B, A, B):
        _patch_image(core, namespace, image)
        cs = wait_for(
            lambda: _restarted(core, namespace, seen), timeout=9, what=f"immediate start of {image}"
        )
        seen.append(cs.container_id)
    _patch_image(core, namespace, A)
    waiting = wait_for(lambda: _backing_off(core, namespace), what="CrashLoopBackOff on the fifth start")
    pod = core.read_namespaced_pod("p", namespace)
    ident = f"p_{namespace}({pod.metadata.uid})"
    assert waiting.message == f"back-off 10s restarting failed container=c pod={ident}"
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
    assert any(
        e.reason == "BackOff" and e.message == f"Back-off restarting failed container c in pod {ident}"
        for e in events
    )
    cluster.advance_node_clock(node, 11)  # the back-off runs out (the node's clock, instead of waiting)
    cs = wait_for(
        lambda: _restarted(core, namespace, seen), timeout=40, what="start once the back-off ran out"
    )
    assert cs.restart_count == 4 and cs.image.endswith(A)


def test_a_crr_of_an_unchanged_image_twice_waits_and_a_new_image_starts_at_once(
    core, custom, namespace, node
):
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 300")))
    seen = [wait_for(lambda: running(core, namespace, "p", "c"), what="first start").container_id]
    _crr(custom, namespace, "one")
    cs = wait_for(lambda: _restarted(core, namespace, seen), timeout=9, what="first CRR restarts at once")
    seen.append(cs.container_id)
    _crr(custom, namespace, "two")
    waiting = wait_for(lambda: _backing_off(core, namespace), what="second CRR restart held")
    assert waiting.message.startswith("back-off 10s restarting failed container=c ")
    assert running(core, namespace, "p", "c") is None
    _patch_image(core, namespace, B)  # a key that has no back-off entry starts at once
    cs = wait_for(lambda: _restarted(core, namespace, seen), timeout=9, what="new image starts at once")
    assert cs.image.endswith(B)


def test_backoff_doubles_to_the_cap_and_expires(cluster, core, namespace, node):
    """A crash-looping container: 10 s, 20 s, ... doubling to 300 s (5m0s); an exit more than 600 s after the
    key's last update starts over at 10 s (the kubelet's expiry). The node's clock is moved forward instead
    of waiting."""
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "sleep 1; exit 1")))
    seen: list[str] = []
    for expected in ("10s", "20s", "40s", "1m20s", "2m40s", "5m0s", "5m0s"):
        waiting = wait_for(
            lambda e=expected: (
                (w := _backing_off(core, namespace)) and w.message.startswith(f"back-off {e} ") and w
            ),
            what=f"back-off {expected}",
        )
        seconds = sum(int(n) * (60 if u == "m" else 1) for n, u in re.findall(r"(\d+)([ms])", expected))
        count = status_of(core, namespace, "p", "c").restart_count
        cluster.advance_node_clock(node, seconds + 1)
        wait_for(lambda c=count: status_of(core, namespace, "p", "c").restart_count > c, what="restart")
        seen.append(waiting.message)
    assert len(seen) == 7
    # expiry: the next exit happens more than 600 s after the key's last update
    count = status_of(core, namespace, "p", "c").restart_count
    wait_for(lambda: running(core, namespace, "p", "c"), what="running")
    cluster.advance_node_clock(node, 700)
    wait_for(
        lambda: (w := _backing_off(core, namespace)) and w.message.startswith("back-off 10s ") and w,
        what="back-off started over at 10s",
    )
    assert status_of(core, namespace, "p", "c").restart_count == count + 1  # restarted at once after expiry


def test_max_container_restart_period_caps_the_backoff(cluster, core, namespace, node):
    cluster.configure_node(node, 2)
    core.create_namespaced_pod(namespace, pod_body("p", container("c", "exit 1")))
    waiting = wait_for(lambda: _backing_off(core, namespace), what="CrashLoopBackOff")
    assert waiting.message.startswith("back-off 2s ")
    wait_for(
        lambda: status_of(core, namespace, "p", "c").restart_count >= 4, timeout=30, what="restarts every 2 s"
    )
    assert _backing_off(core, namespace) is None or _backing_off(core, namespace).message.startswith(
        "back-off 2s "
    )


@pytest.mark.parametrize("bad", [0, 0.5, 301, -1])
def test_max_container_restart_period_is_validated(cluster, node, bad):
    from kruise_local import ClusterConfig

    with pytest.raises(
        ValueError, match=r"crashLoopBackOff\.maxContainerRestartPeriod must be between 1 and 300"
    ):
        cluster.configure_node(node, bad)
    with pytest.raises(ValueError, match=r"crashLoopBackOff\.maxContainerRestartPeriod"):
        ClusterConfig(max_container_restart_period=bad)
