"""How the stage runner reaches a chain pod: the public busybox image, a ConfigMap the provider makes itself,
and a check whose sum is in the pod spec.

- **The ConfigMap.** The runner script (`runner.sh`) travels in an immutable ConfigMap of the chain's
  namespace named by its content, ``kruise-chain-runner-<the first 16 hex digits of its sha256>``
  (`configmap_name`, `runner_configmap`), labelled as the provider's. Each setup reads it and creates it when
  it is missing (`KruiseHook.ensure_runner_configmap`): the chain's identity needs ConfigMaps `get` and
  `create` only, never `update`, `patch` or `delete`, and an immutable ConfigMap cannot be changed by anyone
  (the API server refuses it, `ValidateConfigMapUpdate`), only deleted and made again. An identity that may
  not create it gets it from an admin: ``kruise-chain runner-configmap --namespace NS | kubectl apply -f -``
  (`APPLY_COMMAND`). `configmap_problem` says why one found under that name is not this provider's.
- **The init container** runs the official static busybox image (`wire.DEFAULT_RUNNER_IMAGE`, or a copy:
  ``[kruise_chain] runner_image``) with one line of its shell (`INSTALL_COMMAND`) and two variables: the
  runner from the ConfigMap (``KC_RUNNER``, a ``configMapKeyRef``: the kubelet resolves it when the container
  starts) and this provider's sha256 of it (``KC_RUNNER_SHA256``, a value in the pod spec). The line writes
  the variable to a file and checks that file's sha256 against the spec's before anything else: a runner that
  is not this provider's (the ConfigMap deleted and made again with other content, or squatted under its name
  before the first chain) exits `CHECK_FAILED_EXIT` with nothing installed. Then it makes that file mode 0555
  and a copy of the image's ``/bin/busybox`` mode 0111 (execute-only: see
  `manifest.UNREADABLE_RUNNER_CAPABILITIES`) and renames both into the runner's emptyDir's ``bin/``, where the
  slots run ``/kruise-chain/bin/runner``. The bytes checked are the bytes installed: nothing is read twice.
- `install_failure` turns the init container's status into the cause and its fix.

The runner travels as an environment variable, not a configMap volume: the pod gets no volume for it
(``kubectl describe`` prints one line for the reference), the value is read once (no window between the check
and the copy), and a missing ConfigMap is the init container's own waiting reason at once
(CreateContainerConfigError), not a mount the kubelet retries. A process's environment strings are bounded by
the kernel (`MAX_ENV_STRING`): a test keeps the runner well under it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from .constants import MANAGED_BY, MANAGED_BY_LABEL, RUNNER_VOLUME
from .wire import DEFAULT_RUNNER_IMAGE, RUNNER_BIN, RUNNER_MOUNT

CONFIGMAP_PREFIX = "kruise-chain-runner-"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "stage-runner"
RUNNER_KEY = "runner"
"""The ConfigMap's key holding the runner script."""
RUNNER_ENV = "KC_RUNNER"
SHA_ENV = "KC_RUNNER_SHA256"
CHECK_FAILED_EXIT = 65
"""The init container's exit code when the runner it was given is not this provider's."""
UNSEALED_EXIT = 66
"""The init container's exit code when the runner, started as the slots start it, stays readable by its
stages: the node's runtime or kernel does not make it non-dumpable (`seal_failure`)."""
PROBE_FAILED_EXIT = 67
"""The init container's exit code when its probe of the seal could not run the installed busybox."""
MAX_ENV_STRING = 128 * 1024
"""Linux's limit on one ``NAME=value`` string of a process's environment (`MAX_ARG_STRLEN`, 32 pages): an
exec with a longer one fails with E2BIG."""
APPLY_COMMAND = "kruise-chain runner-configmap --namespace {namespace} | kubectl apply -f -"
"""What an admin runs to make the runner's ConfigMap for an identity that may not create it."""

_BIN = RUNNER_BIN.removeprefix(RUNNER_MOUNT + "/")
HOSTS_SUBPATH = "hosts"
"""The copy of the pod's `/etc/hosts` in the runner's emptyDir, which the slots mount read-only at
`/etc/hosts` (`manifest.HOSTS_MOUNT`).

The kubelet writes one hosts file per pod (the pod's IP and hostname, its `hostAliases`) and mounts it
**writable** at `/etc/hosts` into every container that does not mount that path itself, whatever its
`readOnlyRootFilesystem` (`pkg/kubelet/kubelet_pods.go` `makeMounts`: `mountEtcHostsFile` is false when a
mount's `MountPath` is `/etc/hosts`; `makeHostsMount`: `ReadOnly: false`). Given to the slots, a stage that
runs as root (or as the file's owner) could rewrite what the other slot's stage and every later stage
resolve. The init container, which ends before the slots start, copies its own managed file (the kubelet
wrote it for the init container as for any: the same content) into the runner's volume; the slots mount that
copy read-only by `subPath`, so the kubelet gives them none of its own, and no stage can write it, chmod it or
mount over it (a read-only bind mount; the slots' root filesystems are read-only too; no `CAP_SYS_ADMIN`)."""
INSTALL_COMMAND: tuple[str, ...] = (
    "/bin/sh",
    "-c",
    f'set -e;cd {RUNNER_MOUNT};printf %s "${RUNNER_ENV}">runner;'
    f'echo "${SHA_ENV}  runner"|sha256sum -cs||exit {CHECK_FAILED_EXIT};'
    f"cp /bin/busybox /etc/{HOSTS_SUBPATH} .;chmod 555 runner;chmod 111 busybox;mkdir -p {_BIN};"
    f"mv -f runner busybox {_BIN};"
    f"b={RUNNER_BIN}/busybox;printf '#!%s sh\\nsleep 9\\n' \"$b\">p;chmod 555 p;./p& q=$!;"
    f'until [ "$(head -c{len(RUNNER_BIN) + 8} /proc/$q/cmdline)" = "$b" ];'
    f"do [ -d /proc/$q ]||exit {PROBE_FAILED_EXIT};done;"
    f"cat /proc/$q/environ>/dev/null 2>&1&&exit {UNSEALED_EXIT};kill $q||:;rm p",
)
"""The init container's command: busybox's shell writes the runner (``$KC_RUNNER``) to a file, checks it
against ``$KC_RUNNER_SHA256`` (a mismatch: exit `CHECK_FAILED_EXIT`, nothing installed), then installs it
(0555) and the image's busybox (0111) into the runner's emptyDir, each renamed into place, and copies the
pod's `/etc/hosts` there (`HOSTS_SUBPATH`). Last it probes the
seal where the pod runs (runtime, kernel, sysctls, the pod's user and capabilities): a script whose `#!` line
names the installed busybox, started as the slots start the runner, must not be readable by its own user
(its `/proc/<pid>/environ`); if it is, the runner would be readable by its stages: exit `UNSEALED_EXIT`
(`seal_failure` says why and where the seal holds). The probe is the real thing, not a list of runtimes: it
sees gVisor, `fs.suid_dumpable=1` and the kernels (4.10 to 5.6) that judged a script by the script alike."""


def runner_path() -> Path:
    """The runner script shipped with the package."""
    return Path(str(importlib_resources.files(__package__).joinpath("runner.sh")))


@cache
def runner_script() -> str:
    """The stage runner (POSIX sh) shipped with the package."""
    return runner_path().read_text(encoding="utf-8")


@cache
def runner_sha256() -> str:
    """The sha256 of this provider's runner script: of the ConfigMap's value, as the init container writes
    it."""
    return hashlib.sha256(runner_script().encode()).hexdigest()


def configmap_name() -> str:
    """The name of this provider's runner ConfigMap: named by its content."""
    return CONFIGMAP_PREFIX + runner_sha256()[:16]


def runner_configmap(namespace: str) -> dict[str, Any]:
    """This provider's runner ConfigMap in `namespace`: immutable, labelled as the provider's."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(),
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, COMPONENT_LABEL: COMPONENT},
        },
        "immutable": True,
        "data": {RUNNER_KEY: runner_script()},
    }


def configmap_problem(configmap: Mapping[str, Any]) -> str | None:
    """Why `configmap` (API JSON), found under `configmap_name()`, is not this provider's runner ConfigMap,
    or None when it is: its runner must be this provider's, and it must be immutable (a mutable one could be
    changed under the chains)."""
    runner = (configmap.get("data") or {}).get(RUNNER_KEY)
    if not isinstance(runner, str):
        return f"it has no key {RUNNER_KEY!r}"
    if runner != runner_script():
        said = hashlib.sha256(runner.encode()).hexdigest()
        return f"its runner has sha256 {said}, this provider's {runner_sha256()}"
    if configmap.get("immutable") is not True:
        return "it is not immutable"
    return None


def replace_advice(namespace: str, name: str | None = None) -> str:
    """How to replace a runner ConfigMap that is not this provider's."""
    name = name or configmap_name()
    apply = APPLY_COMMAND.format(namespace=namespace)
    return (
        f"delete it (kubectl delete configmap {name} -n {namespace}): the next setup makes it again, or "
        f"have an admin apply this provider's ({apply})"
    )


def not_ours(namespace: str, problem: str, name: str | None = None) -> str:
    """The message for a runner ConfigMap that is not this provider's."""
    name = name or configmap_name()
    return (
        f"the stage runner's ConfigMap {namespace}/{name} is not this provider's ({problem}): someone made "
        f"or replaced it; no chain runs a runner that is not its own. {replace_advice(namespace, name)}"
    )


def creation_refused(namespace: str, said: str) -> str:
    """The message for a runner ConfigMap that is missing and that the connection's identity may not
    create."""
    apply = APPLY_COMMAND.format(namespace=namespace)
    return (
        f"the stage runner's ConfigMap {namespace}/{configmap_name()} is missing and the connection's "
        f"identity may not create it: grant it `create` on `configmaps` in {namespace!r} (deploy/role.yaml, "
        f"docs/rbac.md), or have an admin apply it once: {apply}. API said: {said}"
    )


def init_container(name: str, runner_image: str, pull_policy: str) -> dict[str, Any]:
    """The chain pod's init container `name`, of `runner_image`, that checks and installs the runner."""
    return {
        "name": name,
        "image": runner_image,
        "imagePullPolicy": pull_policy,
        "command": list(INSTALL_COMMAND),
        "env": [
            {
                "name": RUNNER_ENV,
                "valueFrom": {"configMapKeyRef": {"name": configmap_name(), "key": RUNNER_KEY}},
            },
            {"name": SHA_ENV, "value": runner_sha256()},
        ],
        "volumeMounts": [{"name": RUNNER_VOLUME, "mountPath": RUNNER_MOUNT}],
        # a failure's stderr (cp's, sh's) becomes the status's message
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


_PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
_START_ERRORS = frozenset({"RunContainerError", "CreateContainerError", "StartError"})


def install_failure(pod: Mapping[str, Any], container: str) -> str | None:
    """Why the runner's init container `container` of `pod` (API JSON) cannot install the runner, or None
    while it may still: its image cannot be pulled or run, the runner's ConfigMap is missing or not this
    provider's, or the install failed."""
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    status = next((s for s in statuses if s.get("name") == container), None)
    if status is None:
        return None
    spec = next(
        (c for c in (pod.get("spec") or {}).get("initContainers") or [] if c.get("name") == container), {}
    )
    image = spec.get("image") or status.get("image") or ""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    refs = [(e.get("valueFrom") or {}).get("configMapKeyRef") for e in spec.get("env") or []]
    configmap = next((r["name"] for r in refs if r and r.get("name")), configmap_name())
    image_fix = (
        f"runner_image must be a static busybox image: {DEFAULT_RUNNER_IMAGE} (the default of [kruise_chain] "
        "runner_image and of a chain's runner_image) or a copy of it"
    )
    state, last = status.get("state") or {}, status.get("lastState") or {}
    waiting = state.get("waiting") or {}
    for ended in (state.get("terminated") or {}, last.get("terminated") or {}):
        if ended.get("exitCode") == CHECK_FAILED_EXIT:
            problem = f"its runner's sha256 is not the {SHA_ENV} of this provider in the pod spec"
            return not_ours(namespace, problem, configmap)
        if ended.get("exitCode") in (UNSEALED_EXIT, PROBE_FAILED_EXIT):
            return seal_failure(pod, ended["exitCode"])
        if ended.get("reason") == "StartError":
            return _cannot_start(image, ended.get("message") or ended.get("reason") or "", image_fix)
        if ended.get("exitCode"):
            said = (ended.get("message") or ended.get("reason") or "no message").strip()
            return (
                f"the runner's init container (image {image}) failed to install the runner (exit code "
                f"{ended['exitCode']}: {said}); {image_fix}"
            )
    reason, said = waiting.get("reason"), waiting.get("message") or ""
    if reason in _PULL_FAILURES:
        return (
            f"the runner image {image} cannot be pulled ({reason}: {said}); the default is the public "
            f"{DEFAULT_RUNNER_IMAGE}: where nodes cannot pull it, copy it to a registry they can and set "
            "[kruise_chain] runner_image (or the chain's runner_image) to the copy, with the chain's "
            "image_pull_secrets if that registry needs credentials"
        )
    if reason == "CreateContainerConfigError" and configmap in said:
        return (
            f"the stage runner's ConfigMap {namespace}/{configmap} cannot be read by the kubelet ({said}): "
            "it was deleted after the setup found it; run the setup again (it makes the ConfigMap), or have "
            f"an admin apply it: {APPLY_COMMAND.format(namespace=namespace)}"
        )
    if reason in _START_ERRORS:
        return _cannot_start(image, said or reason, image_fix)
    return None


def seal_failure(pod: Mapping[str, Any], exit_code: int) -> str:
    """The message for a chain pod whose init container found that its node does not seal the runner."""
    runtime = (pod.get("spec") or {}).get("runtimeClassName")
    where = f"runtime class {runtime!r}" if runtime else "its node's default runtime"
    if exit_code == PROBE_FAILED_EXIT:
        return (
            f"the runner's init container could not run the runner's busybox to check the seal ({where}): "
            "the node's runtime or security policy does not let a container run an execute-only file"
        )
    return (
        f"the chain pod's node ({where}) leaves the stage runner readable by the stages it runs: a program "
        "started as the runner is did not become non-dumpable (its /proc/<pid>/environ could be read by its "
        "own user), so a stage could read and change its runner's memory. The seal needs Linux (runc, crun, "
        "Kata Containers' guest) with fs.suid_dumpable 0 or 2 and a kernel of 5.7 or later (or a stable "
        "kernel with 'exec: Move would_dump into flush_old_exec'); gVisor (runsc) does not give it. Run the "
        "chain on such nodes (runtime_class_name, node_selector), docs/security.md"
    )


def _cannot_start(image: str, said: str, image_fix: str) -> str:
    """The runtime could not start the init container's command: an image without /bin/sh (runc: `exec:
    "/bin/sh": stat /bin/sh: no such file or directory`, a distroless image)."""
    return f"the runner image {image} cannot run {INSTALL_COMMAND[0]} ({said}); {image_fix}"
