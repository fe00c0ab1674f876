"""How the kubelet pulls a node's images, through the official client:

- the waiting message during the image pull back-off carries the last pull's error from 1.32
  (`image_manager.go` `pullImage`'s `prevPullErrMsg`, kubernetes/kubernetes#127918), the BackOff event does
  not."""

from __future__ import annotations

from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, status_of, wait_for
from kubernetes import client, config


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
