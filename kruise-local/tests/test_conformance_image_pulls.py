"""How the kubelet pulls a node's images, through the official client:

- one container start at a time per pod: `kuberuntime_manager.go` `SyncPod` step 7 starts the containers of
  `ContainersToStart` one after another, `startContainer` pulling, creating and starting each before the next
  (1.32 to 1.35), so a pod's images are pulled one after another whatever the puller;
- the waiting message during the image pull back-off carries the last pull's error from 1.32
  (`image_manager.go` `pullImage`'s `prevPullErrMsg`, kubernetes/kubernetes#127918), the BackOff event does
  not.

Timing assertions read the order of events (their names carry the recorder's nanosecond clock, as client-go's
`makeEvent` names them) and the durations the kubelet printed, never how long the test waited."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, status_of, wait_for
from kubernetes import client, config

CATALOGUE = """
images:
  - {ref: "pulls.test/big:1", size: 256Mi, cmd: [sh]}
  - {ref: "pulls.test/a:1", size: 1Mi, cmd: [sh]}
  - {ref: "pulls.test/b:1", size: 1Mi, cmd: [sh]}
  - {ref: "pulls.test/c:1", size: 1Mi, cmd: [sh]}
"""

PULLED = re.compile(
    r'Successfully pulled image "(?P<image>[^"]+)" in (?P<pull>\S+) \((?P<total>\S+) including waiting\)\. '
    r"Image size: \d+ bytes\."
)
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}


def go_seconds(text: str) -> float:
    """A Go `Duration.String()` (`1.5s`, `2m3.04s`, `850ms`) in seconds."""
    parts = re.findall(r"([0-9.]+)(h|ms|µs|ns|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _cluster(tmp: Path, **overrides) -> LocalCluster:
    (tmp / "images.yaml").write_text(CATALOGUE)
    return LocalCluster(
        ClusterConfig(
            profile="realistic", root=str(tmp / "r"), catalogue=str(tmp / "images.yaml"), **overrides
        )
    )


def _core(c: LocalCluster, tmp: Path) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(c.write_kubeconfig(tmp / "kc"))))


def _events(core: client.CoreV1Api, pod: str) -> list[tuple[int, str, str, str]]:
    """The pod's kubelet events as (recorder nanoseconds, reason, container, message), oldest first."""
    out = []
    for e in core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}").items:
        path = e.involved_object.field_path or ""
        name = path[path.find("{") + 1 : -1] if "{" in path else ""
        out.append((int(e.metadata.name.rsplit(".", 1)[1], 16), e.reason, name, e.message))
    return sorted(out)


def _one(events: list[tuple[int, str, str, str]], reason: str, name: str) -> tuple[int, str]:
    found = [(t, m) for t, r, c, m in events if r == reason and c == name]
    assert len(found) == 1, (reason, name, events)
    return found[0]


def _durations(message: str) -> tuple[float, float]:
    m = PULLED.fullmatch(message)
    assert m, message
    return go_seconds(m["pull"]), go_seconds(m["total"])


def test_a_pods_containers_pull_and_start_one_after_another(tmp_path):
    """Three containers, three images missing from the node: each is pulled, created and started before the
    next one's pull begins (`SyncPod` step 7), and each Pulled event's total covers its pull."""
    with _cluster(tmp_path) as c:
        core = _core(c, tmp_path)
        names = ["a", "b", "c"]
        body = pod_body("p", *(container(n, "sleep 30", image=f"pulls.test/{n}:1") for n in names))
        core.create_namespaced_pod("default", body)
        wait_for(lambda: all(running(core, "default", "p", n) for n in names), what="all running")
        events = _events(core, "p")
        steps = [
            _one(events, reason, n)[0]
            for n in names
            for reason in ("Pulling", "Pulled", "Created", "Started")
        ]
        assert steps == sorted(steps), events
        for n in names:
            pull, total = _durations(_one(events, "Pulled", n)[1])
            assert 0 < pull <= total


@pytest.mark.parametrize("version", ["1.32", "1.35"])
def test_the_image_pull_back_off_message_carries_the_last_pull_error(tmp_path, version):
    """From 1.32 (kubernetes/kubernetes#127918) the waiting message during the back-off is `Back-off pulling
    image "X": ErrImagePull: <the failed pull's error>` (`pullImage`'s `prevPullErrMsg`: `"%s: %s"` of
    evalCRIPullErr's error and message); the BackOff event stays `Back-off pulling image "X"`."""
    image = "nope/missing:1"
    with LocalCluster(
        ClusterConfig(profile="fast", root=str(tmp_path / "r"), kubernetes_version=version)
    ) as c:
        core = _core(c, tmp_path)
        core.create_namespaced_pod("default", pod_body("p", container("c", "true", image=image)))
        seen: dict[str, str] = {}

        def backing_off() -> bool:
            cs = status_of(core, "default", "p", "c")
            w = cs.state.waiting if cs is not None else None
            if w is not None and w.reason in ("ErrImagePull", "ImagePullBackOff"):
                seen[w.reason] = w.message
            return "ImagePullBackOff" in seen

        wait_for(backing_off, what="ImagePullBackOff")
        failed = [m for _, r, _, m in _events(core, "p") if r == "Failed" and m.startswith("Failed to pull")]
        error = failed[0].removeprefix(f'Failed to pull image "{image}": ')
        assert seen.get("ErrImagePull", error) == error
        assert seen["ImagePullBackOff"] == f'Back-off pulling image "{image}": ErrImagePull: {error}'
        backoff = [m for _, r, _, m in _events(core, "p") if r == "BackOff"]
        assert backoff == [f'Back-off pulling image "{image}"']
