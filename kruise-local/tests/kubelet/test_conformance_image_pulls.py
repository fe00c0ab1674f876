"""How the kubelet pulls a node's images, through the official client:

- one container start at a time per pod: `kuberuntime_manager.go` `SyncPod` step 7 starts the containers of
  `ContainersToStart` one after another, `startContainer` pulling, creating and starting each before the next
  (1.32 to 1.35), so a pod's images are pulled one after another whatever the puller;
- the node's image puller (`image_manager.go` `NewImageManager`, `puller.go`): `serialImagePuller` by default
  (`serializeImagePulls: true`), every pod's pull in one queue; `parallelImagePuller` with
  `serializeImagePulls: false`, at most `maxParallelImagePulls` at once when set; the kubelet configuration's
  defaults and validation (`SetDefaults_KubeletConfiguration`, `ValidateKubeletConfiguration`);
- the Pulled event's two durations (`image_manager.go` `pullImage`): the pull itself (`pullDuration`, from the
  moment it left the queue) and the time since just before it was queued ("including waiting");
- the waiting message during the image pull back-off carries the last pull's error from 1.32
  (`pullImage`'s `prevPullErrMsg`, kubernetes/kubernetes#127918), the BackOff event does not.

Timing assertions read the order of events (their names carry the recorder's nanosecond clock, as client-go's
`makeEvent` names them) and the durations the kubelet printed, never how long the test waited. The one size
relied on is a queue of several seconds (a 256 MiB pull at the realistic profile's 40 MB/s) outlasting the
second pod's start-up of about a second."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.cli import main
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


@pytest.mark.parametrize(
    ("settings", "serial"),
    [
        ({}, True),  # serializeImagePulls defaults to true
        ({"serialize_image_pulls": False, "max_parallel_image_pulls": 1}, True),  # parallel, one token
        ({"serialize_image_pulls": False}, False),  # parallel, no limit
        ({"max_parallel_image_pulls": 2}, False),  # serializeImagePulls then defaults to false
    ],
    ids=["default-serial", "parallel-1-token", "parallel", "max-parallel-2"],
)
def test_another_pods_pull_waits_behind_the_nodes_pull_unless_parallel(tmp_path, settings, serial):
    """A pod pulls a big image; a second pod on the node asks for a small one while it runs. The serial
    puller (or a single token) holds the small pull until the big one ends: its Pulled event follows the
    big one's, its pull began only after that (`pullDuration` counted from the dequeue), and its total
    includes the wait. A parallel puller pulls it at once: done first, nothing waited."""
    with _cluster(tmp_path, **settings) as c:
        core = _core(c, tmp_path)
        core.create_namespaced_pod(
            "default", pod_body("big", container("c", "sleep 30", image="pulls.test/big:1"))
        )
        wait_for(lambda: any(r == "Pulling" for _, r, _, _ in _events(core, "big")), what="big pulling")
        core.create_namespaced_pod(
            "default", pod_body("small", container("c", "sleep 30", image="pulls.test/a:1"))
        )
        for pod in ("big", "small"):
            wait_for(lambda pod=pod: running(core, "default", pod, "c"), timeout=40, what=f"{pod} running")
        big, small = _events(core, "big"), _events(core, "small")
        big_done, big_msg = _one(big, "Pulled", "c")
        queued, _ = _one(small, "Pulling", "c")
        small_done, small_msg = _one(small, "Pulled", "c")
        assert queued < big_done, "the small pull was asked for while the big one ran"
        big_pull, _ = _durations(big_msg)
        pull, total = _durations(small_msg)
        if serial:
            assert big_done < small_done
            # its pull began after the big one ended: Pulled minus its own pull (truncated: rounded down)
            assert small_done - pull * 1e9 >= big_done
            assert total - pull >= (big_done - queued) / 1e9 - 0.002  # the queue time, both truncated to ms
        else:
            assert small_done < big_done
            assert total - pull < big_pull  # it did not wait for the big pull


def test_kruise_daemon_pulls_beside_the_kubelets_queue(tmp_path):
    """An ImagePullJob's pull goes through kruise-daemon's own CRI client (`pkg/daemon/imagepuller/puller.go`
    `pullWorker.doPullImage` -> `runtime.PullImage`), not the kubelet's serial queue: the small image is on
    the node while the kubelet is still pulling the big one."""
    with _cluster(tmp_path) as c:
        core = _core(c, tmp_path)
        custom = client.CustomObjectsApi(core.api_client)
        core.create_namespaced_pod(
            "default", pod_body("big", container("c", "sleep 30", image="pulls.test/big:1"))
        )
        wait_for(lambda: any(r == "Pulling" for _, r, _, _ in _events(core, "big")), what="big pulling")
        job = {
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": "warm"},
            "spec": {"image": "pulls.test/a:1", "completionPolicy": {"type": "Always"}},
        }
        custom.create_namespaced_custom_object("apps.kruise.io", "v1alpha1", "default", "imagepulljobs", job)

        def succeeded() -> bool:
            obj = custom.get_namespaced_custom_object(
                "apps.kruise.io", "v1alpha1", "default", "imagepulljobs", "warm"
            )
            return (obj.get("status") or {}).get("succeeded") == 1

        wait_for(succeeded, timeout=20, what="the ImagePullJob done")
        assert not any(r == "Pulled" for _, r, _, _ in _events(core, "big")), "the big pull still runs"


@pytest.mark.parametrize(
    "settings",
    [{"max_parallel_image_pulls": 0}, {"serialize_image_pulls": True, "max_parallel_image_pulls": 2}],
)
def test_the_image_pull_settings_are_validated(tmp_path, settings, capsys):
    """`ValidateKubeletConfiguration`: maxParallelImagePulls must be positive, and above 1 only with
    serializeImagePulls false; refused for the cluster, for one node and by the CLI before it serves."""
    message = (
        "must be a positive number"
        if settings["max_parallel_image_pulls"] == 0
        else "unless SerializeImagePulls"
    )
    with pytest.raises(ValueError, match=message):
        ClusterConfig(**settings)
    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "r"))) as c:
        with pytest.raises(ValueError, match=message):
            c.configure_node("kruise-local", None, **settings)
        with pytest.raises(ValueError, match=message):
            c.add_node("other", **settings)
    argv = ["--home", str(tmp_path / "home"), "serve"]
    for key, value in settings.items():
        argv += ["--" + key.replace("_", "-"), str(value).lower()]
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


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
        # the runtime's error as the kubelet's CRI client returns it: a gRPC status error (containerd turns
        # errdefs.ErrNotFound into codes.NotFound)
        assert error.startswith(
            'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/nope/missing:1": '
            'failed to resolve reference "docker.io/nope/missing:1": docker.io/nope/missing:1: not found'
        ), error
        assert seen.get("ErrImagePull", error) == error
        assert seen["ImagePullBackOff"] == f'Back-off pulling image "{image}": ErrImagePull: {error}'
        backoff = [m for _, r, _, m in _events(core, "p") if r == "BackOff"]
        assert backoff == [f'Back-off pulling image "{image}"']
