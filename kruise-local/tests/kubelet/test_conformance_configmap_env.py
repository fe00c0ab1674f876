"""Environment variables from ConfigMap keys as the kubelet resolves them (`pkg/kubelet/kubelet_pods.go`
`makeEnvironmentVariables`, `configMapKeyRef` case): the ConfigMap comes from the kubelet's configMap manager
(`pkg/kubelet/configmap` `NewWatchingConfigMapManager`, whose NotFound names the resource `configmap`), a
missing one or key fails the container's start with CreateContainerConfigError (retried at each sync) unless
the reference is optional, and the value reaches the process byte for byte; an init container waits alike,
through the official client."""

from __future__ import annotations

import hashlib

from kruise_local.testing import wait_for


def _pod(name: str, script: str, env: list[dict], init: bool = False) -> dict:
    container = {"name": "main", "image": "busybox:1.37.0-musl", "command": ["/bin/sh", "-c", script]}
    container["env"] = env
    spec: dict = {"restartPolicy": "Never", "containers": [container]}
    if init:
        spec["initContainers"] = [dict(container, name="init")]
        spec["containers"] = [{"name": "main", "image": "busybox:1.37.0-musl", "command": ["true"]}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _ref(name: str, key: str, **extra) -> dict:
    return {"valueFrom": {"configMapKeyRef": {"name": name, "key": key, **extra}}}


def _waiting(core, namespace: str, name: str, message: str, init: bool = False) -> None:
    def waiting() -> bool:
        status = core.read_namespaced_pod(name, namespace).status
        statuses = (status.init_container_statuses if init else status.container_statuses) or []
        state = statuses[0].state.waiting if statuses else None
        return state is not None and (state.reason, state.message) == ("CreateContainerConfigError", message)

    wait_for(waiting, timeout=60, what=f"{name} waiting with {message}")


def _log(core, namespace: str, name: str, container: str = "main") -> str:
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        timeout=60,
        what=f"{name} to finish",
    )
    return core.read_namespaced_pod_log(
        name, namespace, container=container, _preload_content=False
    ).data.decode()


def test_a_missing_configmap_then_a_missing_key_wait_with_the_kubelets_messages(core, namespace):
    env = [{"name": "X", **_ref("later", "x")}]
    core.create_namespaced_pod(namespace, _pod("waits", 'echo "$X"', env))
    _waiting(core, namespace, "waits", 'configmap "later" not found')
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "later"}, "data": {"y": "1"}})
    _waiting(core, namespace, "waits", f"couldn't find key x in ConfigMap {namespace}/later")
    core.patch_namespaced_config_map("later", namespace, {"data": {"x": "here"}})
    assert _log(core, namespace, "waits") == "here\n"


def test_an_init_container_waits_for_its_configmap_too(core, namespace):
    env = [{"name": "X", **_ref("runner", "script")}]
    core.create_namespaced_pod(namespace, _pod("init", 'echo "$X"', env, init=True))
    _waiting(core, namespace, "init", 'configmap "runner" not found', init=True)
    pod = core.read_namespaced_pod("init", namespace)
    assert pod.status.phase == "Pending" and pod.status.container_statuses[0].state.waiting.reason == (
        "PodInitializing"
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "runner"}, "data": {"script": "ok"}})
    assert _log(core, namespace, "init", "init") == "ok\n"


def test_optional_references_are_skipped_and_a_large_value_arrives_byte_for_byte(core, namespace):
    # a script of ~40 KB with a trailing newline (the shell's command substitution would strip it; `printf %s
    # "$VAR"` does not): what reaches the process is the ConfigMap's value exactly
    value = "".join(f"line {i} \t 'quoted' \"double\" $HOME `tick` \\\n" for i in range(800)) + "\n"
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "big"}, "data": {"v": value}, "immutable": True}
    )
    env = [
        {"name": "V", **_ref("big", "v")},
        {"name": "GONE", **_ref("absent", "k", optional=True)},
        {"name": "NOKEY", **_ref("big", "nokey", optional=True)},
    ]
    script = 'printf %s "$V" | sha256sum; echo "${GONE-unset} ${NOKEY-unset}"'
    core.create_namespaced_pod(namespace, _pod("big", script, env))
    digest, rest = _log(core, namespace, "big").split("\n", 1)
    assert digest.split()[0] == hashlib.sha256(value.encode()).hexdigest()
    assert rest == "unset unset\n"
