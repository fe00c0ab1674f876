"""Conformance of the local cluster's images with a real runtime's: an image's filesystem (distroless images
have no shell), OCI ENTRYPOINT/CMD, start errors and the static busybox runner image,
driven only through the real `kubernetes` client."""

from __future__ import annotations

import pytest
from kruise_local.testing import is_static_elf, log_of, pod_body, status_of, wait_for

DISTROLESS_PY = "gcr.io/distroless/python3-debian12"
RUNNER = "busybox:1.37.0-musl"


def _terminated_or_last(cs):
    return cs.state.terminated or (cs.last_state and cs.last_state.terminated)


def test_a_missing_executable_fails_the_start_as_runc_does(core, namespace):
    """`command: [sh]` on a distroless image: the container fails to start (StartError, exit 128, runc's
    message), is restarted by restartPolicy and then backs off."""
    spec = {"name": "c", "image": DISTROLESS_PY, "command": ["sh", "-c", "echo hi"]}
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    cs = wait_for(
        lambda: (s := status_of(core, namespace, "p", "c")) and (t := _terminated_or_last(s)) and t and s,
        what="a start error",
    )
    term = _terminated_or_last(cs)
    assert term.exit_code == 128
    assert term.reason == "StartError"
    assert 'exec: "sh": executable file not found in $PATH' in term.message
    assert cs.state.waiting is not None
    assert cs.state.waiting.reason in ("RunContainerError", "CrashLoopBackOff")
    wait_for(
        lambda: status_of(core, namespace, "p", "c").state.waiting.reason == "CrashLoopBackOff",
        what="CrashLoopBackOff after repeated start errors",
    )
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p")
    assert any(e.reason == "Failed" and "executable file not found" in e.message for e in events.items)


def test_distroless_python_runs_its_entrypoint_with_args(core, namespace):
    """No `command`: the image's ENTRYPOINT (python3) runs with the container's args as its CMD."""
    spec = {
        "name": "c",
        "image": DISTROLESS_PY,
        "args": ["-c", "import os; print('py', os.path.exists('/bin/sh'))"],
    }
    core.create_namespaced_pod(namespace, pod_body("p", spec, restart="Never"))
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Succeeded", what="Succeeded")
    assert log_of(core, namespace, "p", "c") == "py False\n"


def test_busybox_cmd_is_replaced_by_args_and_dropped_by_command(core, namespace):
    """busybox has no ENTRYPOINT and CMD [sh]: `args` replace the CMD; python:3.11-slim provides `python`."""
    core.create_namespaced_pod(
        namespace,
        pod_body(
            "p",
            {"name": "a", "image": "busybox:1.36", "args": ["echo", "from-args"]},
            {"name": "b", "image": "python:3.11-slim", "command": ["python", "-c", "print('from-python')"]},
            restart="Never",
        ),
    )
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Succeeded", what="Succeeded")
    assert log_of(core, namespace, "p", "a") == "from-args\n"
    assert log_of(core, namespace, "p", "b") == "from-python\n"


def test_an_image_with_neither_entrypoint_nor_command_cannot_be_created(core, namespace):
    spec = {"name": "c", "image": "gcr.io/distroless/static-debian12"}
    core.create_namespaced_pod(namespace, pod_body("p", spec))
    cs = wait_for(
        lambda: (
            (s := status_of(core, namespace, "p", "c"))
            and s.state.waiting
            and s.state.waiting.reason == "CreateContainerError"
            and s
        ),
        what="CreateContainerError",
    )
    assert "no command specified" in cs.state.waiting.message


def test_static_busybox_from_an_init_container_runs_in_a_distroless_container(core, namespace):
    """The stage-runner injection pattern: an init container from the static busybox runner image copies
    /bin/busybox into an emptyDir; the distroless container (no shell) then runs a shell script through it."""
    mount = [{"name": "tools", "mountPath": "/kc"}]
    body = pod_body(
        "p",
        {
            "name": "stage",
            "image": DISTROLESS_PY,
            "command": [
                "/kc/busybox",
                "sh",
                "-c",
                "echo shell-in-distroless; /kc/busybox ls /bin 2>&1 | head -1",
            ],
            "volumeMounts": mount,
        },
        restart="Never",
        initContainers=[
            {
                "name": "install",
                "image": RUNNER,
                "command": ["cp", "/bin/busybox", "/kc/busybox"],
                "volumeMounts": mount,
            }
        ],
        volumes=[{"name": "tools", "emptyDir": {}}],
    )
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("p", namespace).status.phase == "Succeeded", what="Succeeded")
    out = log_of(core, namespace, "p", "stage").splitlines()
    assert out[0] == "shell-in-distroless"
    assert "No such file or directory" in out[1]
    pod = core.read_namespaced_pod("p", namespace)
    init = pod.status.init_container_statuses[0]
    assert init.state.terminated.exit_code == 0 and init.ready


@pytest.mark.parametrize("image", [RUNNER, "busybox:1.36.1-musl"])
def test_runner_image_busybox_is_static(cluster, image):
    found = cluster.catalogue.lookup(image)
    assert found is not None and not found.host_base
    (path,) = found.host_paths()
    assert is_static_elf(path), f"{path} is not statically linked: install busybox-static"
    assert not is_static_elf("/bin/sh")  # the check tells a dynamic executable apart


def test_permissive_mode_runs_any_image_with_the_host_tools(tmp_path):
    """`permissive_images` (CLI --permissive-images): a reference missing from the catalogue runs as a generic
    image with the host's userland and CMD [sh], instead of failing its pull."""
    from kruise_local import ClusterConfig, LocalCluster
    from kubernetes import client, config

    c = LocalCluster(ClusterConfig(permissive_images=True, root=str(tmp_path / "root")))
    c.start()
    try:
        api = config.new_client_from_config(config_file=str(c.write_kubeconfig(tmp_path / "kubeconfig")))
        core = client.CoreV1Api(api)
        image = "registry.example.org/acme/tool:7"
        spec = {"name": "c", "image": image, "args": ["sh", "-c", "echo generic"]}
        core.create_namespaced_pod("default", pod_body("p", spec, restart="Never"))
        wait_for(
            lambda: core.read_namespaced_pod("p", "default").status.phase == "Succeeded", what="Succeeded"
        )
        assert log_of(core, "default", "p", "c") == "generic\n"
    finally:
        c.stop()


def test_image_files_run_by_their_mode_as_runc_execs_them(cluster, core, namespace, tmp_path):
    """An image's files have the modes its layers give them (`files`), not the mode of the host file they are
    made from: a 0555 script runs through its `#!` line; a 0444 one and a missing path fail the start as runc
    does (its exec.LookPath: "permission denied", "stat PATH: no such file or directory"; containerd's
    StartError, exit 128)."""
    script = tmp_path / "hello"
    script.write_text('#!/bin/busybox sh\necho "hello from $0 $*"\n')
    script.chmod(0o644)  # what the host file has does not matter
    cluster.catalogue.add(
        {
            "ref": "registry.example.com/tools:1",
            "base": "scratch",
            "provides": ["/bin/busybox"],
            "files": {
                "/tools/hello": {"from": str(script), "mode": "0555"},
                "/tools/readonly": {"from": str(script), "mode": "0444"},
            },
        }
    )
    image = "registry.example.com/tools:1"
    body = pod_body("ok", {"name": "c", "image": image, "command": ["/tools/hello", "a"]}, restart="Never")
    core.create_namespaced_pod(namespace, body)
    wait_for(lambda: core.read_namespaced_pod("ok", namespace).status.phase == "Succeeded", what="Succeeded")
    assert log_of(core, namespace, "ok", "c") == "hello from /tools/hello a\n"
    for name, command, why in [
        ("ro", "/tools/readonly", 'exec: "/tools/readonly": permission denied'),
        ("gone", "/tools/missing", 'exec: "/tools/missing": stat /tools/missing: no such file or directory'),
    ]:
        spec = {"name": "c", "image": image, "command": [command]}
        core.create_namespaced_pod(namespace, pod_body(name, spec))

        def failed(n: str = name) -> object:
            s = status_of(core, namespace, n, "c")
            return s if s and _terminated_or_last(s) else None

        cs = wait_for(failed, what="a start error")
        term = _terminated_or_last(cs)
        assert (term.exit_code, term.reason) == (128, "StartError")
        assert why in term.message, term.message
