"""How the runner reaches a chain pod (`core/runnerinstall.py`): its ConfigMap (named by its content,
immutable, checked), the init container (public busybox, one line of its shell, the sum in the pod spec) and
how the setup names each failure of it from the pod's status as the kubelet reports it."""

from __future__ import annotations

import hashlib
import json

import pytest

from airflow_kruise_chain.core import ChainSpec, StageSpec, build_chain_pod
from airflow_kruise_chain.core.runnerinstall import (
    APPLY_COMMAND,
    CHECK_FAILED_EXIT,
    INSTALL_COMMAND,
    MAX_ENV_STRING,
    RUNNER_ENV,
    configmap_name,
    configmap_problem,
    creation_refused,
    install_failure,
    runner_configmap,
    runner_path,
    runner_script,
    runner_sha256,
)
from airflow_kruise_chain.core.wire import DEFAULT_RUNNER_IMAGE

NAME = "kruise-chain-runner"
DIGEST = hashlib.sha256(runner_path().read_bytes()).hexdigest()


def chain_pod(runner_image: str | None = None) -> dict:
    chain = ChainSpec(
        name="c", namespace="ns", stages=[StageSpec("s", "busybox:1.36", ["true"])], runner_image=runner_image
    )
    return build_chain_pod(chain, pod_name="p", dag_id="d", run_id="r", first_images=chain.first_images)


def pod(status: dict, image: str = DEFAULT_RUNNER_IMAGE) -> dict:
    built = chain_pod(image)
    built["status"] = {"initContainerStatuses": [{"name": NAME, "image": image, **status}]}
    return built


def test_the_configmap_is_named_by_its_content_immutable_and_the_providers() -> None:
    assert runner_sha256() == DIGEST
    assert configmap_name() == f"kruise-chain-runner-{DIGEST[:16]}"
    cm = runner_configmap("chains")
    assert cm["metadata"] == {
        "name": configmap_name(),
        "namespace": "chains",
        "labels": {
            "app.kubernetes.io/managed-by": "airflow-kruise-chain",
            "app.kubernetes.io/component": "stage-runner",
        },
    }
    assert cm["immutable"] is True and cm["data"] == {"runner": runner_path().read_text()}
    assert configmap_problem(cm) is None
    assert runner_script().isascii()  # a ConfigMap's data and an env value: text, byte for byte


def test_a_configmap_that_is_not_the_providers_is_told_apart() -> None:
    cm = runner_configmap("chains")
    other = "#!/bin/sh\necho pwned\n"
    said = configmap_problem({**cm, "data": {"runner": other}})
    assert (
        said
        == f"its runner has sha256 {hashlib.sha256(other.encode()).hexdigest()}, this provider's {DIGEST}"
    )
    assert configmap_problem({**cm, "data": {"other": "x"}}) == "it has no key 'runner'"
    assert configmap_problem({**cm, "immutable": False}) == "it is not immutable"  # could change under chains
    assert configmap_problem({k: v for k, v in cm.items() if k != "immutable"}) == "it is not immutable"


def test_the_init_container_runs_public_busybox_with_the_sum_in_the_spec_and_no_script() -> None:
    built = chain_pod()
    (init,) = built["spec"]["initContainers"]
    assert init["image"] == DEFAULT_RUNNER_IMAGE == "busybox:1.37.0-musl"
    assert init["command"] == list(INSTALL_COMMAND) and len(INSTALL_COMMAND[2]) <= 440
    env = {e["name"]: e for e in init["env"]}
    assert env["KC_RUNNER_SHA256"]["value"] == DIGEST
    assert env[RUNNER_ENV]["valueFrom"] == {"configMapKeyRef": {"name": configmap_name(), "key": "runner"}}
    text = json.dumps(built)
    assert not [line for line in runner_script().splitlines() if len(line) > 30 and line in text]
    # the kernel bounds one environment string: the runner travels as one, with room to grow
    assert len(f"{RUNNER_ENV}={runner_script()}".encode()) < MAX_ENV_STRING // 2
    mirrored = chain_pod("registry.example.com/mirror/busybox:1.37.0-musl")["spec"]["initContainers"][0]
    assert mirrored == {**init, "image": "registry.example.com/mirror/busybox:1.37.0-musl"}  # one option


@pytest.mark.parametrize(
    "status",
    [
        {"state": {"terminated": {"exitCode": CHECK_FAILED_EXIT, "reason": "Error"}}},
        {
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": CHECK_FAILED_EXIT, "reason": "Error"}},
        },
    ],
)
def test_a_runner_that_is_not_the_providers_names_the_configmap_and_the_fix(status: dict) -> None:
    said = install_failure(pod(status), NAME)
    assert said is not None and said.startswith(f"the stage runner's ConfigMap ns/{configmap_name()} is not")
    assert f"kubectl delete configmap {configmap_name()} -n ns" in said
    assert APPLY_COMMAND.format(namespace="ns") in said


def test_a_configmap_gone_before_the_kubelet_read_it_is_named() -> None:
    message = f'configmap "{configmap_name()}" not found'
    said = install_failure(
        pod({"state": {"waiting": {"reason": "CreateContainerConfigError", "message": message}}}), NAME
    )
    assert said is not None and said.startswith(
        f"the stage runner's ConfigMap ns/{configmap_name()} cannot be read"
    )
    assert message in said and APPLY_COMMAND.format(namespace="ns") in said


@pytest.mark.parametrize(
    "reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"]
)
def test_a_runner_image_that_cannot_be_pulled_names_the_one_option(reason: str) -> None:
    image = "registry.example.com/mirror/busybox:1.37.0-musl"
    said = install_failure(pod({"state": {"waiting": {"reason": reason, "message": "nope"}}}, image), NAME)
    assert said is not None and said.startswith(f"the runner image {image} cannot be pulled ({reason}: nope)")
    assert "[kruise_chain] runner_image" in said and DEFAULT_RUNNER_IMAGE in said


def test_an_image_without_a_shell_or_a_busybox_is_named_with_the_fix() -> None:
    no_shell = 'exec: "/bin/sh": stat /bin/sh: no such file or directory'
    for status in (
        {"state": {"terminated": {"exitCode": 128, "reason": "StartError", "message": no_shell}}},
        {"state": {"waiting": {"reason": "RunContainerError", "message": no_shell}}},
    ):
        said = install_failure(pod(status, "gcr.io/distroless/static-debian12"), NAME)
        assert said is not None and said.startswith(
            "the runner image gcr.io/distroless/static-debian12 cannot run"
        )
        assert no_shell in said and "static busybox" in said
    failed = {"exitCode": 1, "reason": "Error", "message": "cp: can't stat '/bin/busybox': No such file\n"}
    said = install_failure(pod({"state": {"terminated": failed}}, "debian:bookworm-slim"), NAME)
    assert said == (
        "the runner's init container (image debian:bookworm-slim) failed to install the runner (exit code 1: "
        f"cp: can't stat '/bin/busybox': No such file); runner_image must be a static busybox image: "
        f"{DEFAULT_RUNNER_IMAGE} (the default of [kruise_chain] runner_image and of a chain's runner_image) "
        "or a copy of it"
    )


def test_nothing_is_said_while_the_install_may_still_succeed() -> None:
    for status in ({"state": {"running": {}}}, {"state": {"waiting": {"reason": "PodInitializing"}}}, {}):
        assert install_failure(pod(status), NAME) is None
    assert install_failure(chain_pod(), NAME) is None  # no status yet
    done = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    assert install_failure(pod(done), NAME) is None


def test_a_refused_creation_names_the_rbac_rule_and_the_admin_command() -> None:
    said = creation_refused("chains", 'configmaps is forbidden: User "x" cannot create resource "configmaps"')
    assert said.startswith(f"the stage runner's ConfigMap chains/{configmap_name()} is missing and the")
    assert "grant it `create` on `configmaps` in 'chains' (deploy/role.yaml" in said
    assert "kruise-chain runner-configmap --namespace chains | kubectl apply -f -" in said
    assert said.endswith('API said: configmaps is forbidden: User "x" cannot create resource "configmaps"')
