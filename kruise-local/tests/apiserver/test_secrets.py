"""Secrets as the API server stores them (`pkg/registry/core/secret`, `ValidateSecret[Update]`, the v1
conversion of `stringData`) and as the kubelet hands them to containers (`pkg/volume/secret`,
`makeEnvironmentVariables`), through the official client and kubectl."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess

import pytest
from kruise_local.testing import wait_for
from kubernetes.client import ApiException


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _secret(name: str = "s", **extra) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, **extra}


def _error(call) -> tuple[int, dict]:
    with pytest.raises(ApiException) as err:
        call()
    return err.value.status, json.loads(err.value.body)


def test_string_data_is_merged_into_base64_data_and_type_defaults_to_opaque(core, namespace):
    created = core.create_namespaced_secret(
        namespace, _secret(data={"a": b64("one"), "b": b64("two")}, stringData={"b": "TWO", "c": "three"})
    )
    assert created.type == "Opaque"
    assert created.data == {"a": b64("one"), "b": b64("TWO"), "c": b64("three")}
    assert created.string_data is None
    stored = core.read_namespaced_secret("s", namespace)
    assert stored.data == created.data and stored.string_data is None
    patched = core.patch_namespaced_secret("s", namespace, {"stringData": {"a": "uno"}})
    assert patched.data["a"] == b64("uno")
    listed = core.list_namespaced_secret(namespace, field_selector="type=Opaque").items
    assert [s.metadata.name for s in listed] == ["s"]
    nulled = core.create_namespaced_secret(namespace, _secret("n", data={"empty": None}))
    assert nulled.data == {"empty": ""}  # JSON null decodes to an empty []byte


def test_bad_secrets_are_refused_naming_the_field(core, namespace):
    status, body = _error(
        lambda: core.create_namespaced_secret(namespace, _secret(data={"a": "not base64!"}))
    )
    assert status == 400 and "illegal base64 data" in body["message"]
    status, body = _error(lambda: core.create_namespaced_secret(namespace, _secret(data={"a/b": b64("x")})))
    assert status == 422 and body["details"]["causes"][0]["field"] == "data[a/b]"
    tls = _secret(type="kubernetes.io/tls", data={"tls.crt": b64("c")})
    status, body = _error(lambda: core.create_namespaced_secret(namespace, tls))
    assert (status, [c["field"] for c in body["details"]["causes"]]) == (422, ["data[tls.key]"])
    token = _secret(type="kubernetes.io/service-account-token")
    status, body = _error(lambda: core.create_namespaced_secret(namespace, token))
    assert [c["field"] for c in body["details"]["causes"]] == [
        "metadata.annotations[kubernetes.io/service-account.name]"
    ]
    docker = _secret(type="kubernetes.io/dockerconfigjson", data={".dockerconfigjson": b64("{nope")})
    status, body = _error(lambda: core.create_namespaced_secret(namespace, docker))
    assert status == 422 and body["details"]["causes"][0]["field"] == "data[.dockerconfigjson]"
    assert "nope" not in body["message"]  # the contents are redacted


def test_type_never_changes_and_immutable_data_is_refused(core, namespace):
    core.create_namespaced_secret(namespace, _secret(data={"a": b64("1")}, immutable=True))
    status, body = _error(lambda: core.patch_namespaced_secret("s", namespace, {"data": {"a": b64("2")}}))
    assert (
        status == 422
        and {"field": "data", "reason": "FieldValueForbidden"}.items()
        <= {**body["details"]["causes"][0]}.items()
    )
    assert "field is immutable when `immutable` is set" in body["message"]
    status, body = _error(lambda: core.patch_namespaced_secret("s", namespace, {"immutable": False}))
    assert status == 422 and body["details"]["causes"][0]["field"] == "immutable"
    status, body = _error(lambda: core.patch_namespaced_secret("s", namespace, {"type": "Other"}))
    assert status == 422 and body["details"]["causes"][0]["field"] == "type"
    labelled = core.patch_namespaced_secret("s", namespace, {"metadata": {"labels": {"ok": "yes"}}})
    assert labelled.metadata.labels == {"ok": "yes"}  # metadata of an immutable secret may change


def _pod(name: str, script: str, **spec) -> dict:
    container = {"name": "main", "image": "busybox:1.36", "command": ["sh", "-c", script]}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container], **spec},
    }


def _finished_log(core, namespace, name) -> str:
    wait_for(
        lambda: core.read_namespaced_pod(name, namespace).status.phase in ("Succeeded", "Failed"),
        timeout=60,
        what=f"{name} to finish",
    )
    return core.read_namespaced_pod_log(name, namespace, _preload_content=False).data.decode()


def test_secret_volume_files_and_env_refs(core, namespace):
    core.create_namespaced_secret(namespace, _secret("creds", stringData={"user": "ann", "pass": "s3cret"}))
    script = (
        "cat /s/user; echo; cat /s/pass; echo; stat -L -c %a /s/user; cat /one/u; echo; stat -L -c %a /one/u;"
        ' echo "$USER_NAME $SECRET_pass $NONE."; ls /opt'
    )
    pod = _pod(
        "reader",
        script,
        volumes=[
            {"name": "all", "secret": {"secretName": "creds", "defaultMode": 0o400}},
            {
                "name": "one",
                "secret": {"secretName": "creds", "items": [{"key": "user", "path": "u", "mode": 0o440}]},
            },
            {"name": "opt", "secret": {"secretName": "missing", "optional": True}},
        ],
        container={
            "volumeMounts": [
                {"name": "all", "mountPath": "/s"},
                {"name": "one", "mountPath": "/one"},
                {"name": "opt", "mountPath": "/opt"},
            ],
            "env": [
                {"name": "USER_NAME", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "user"}}},
                {
                    "name": "NONE",
                    "valueFrom": {"secretKeyRef": {"name": "missing", "key": "k", "optional": True}},
                },
            ],
            "envFrom": [{"secretRef": {"name": "creds"}, "prefix": "SECRET_"}],
        },
    )
    core.create_namespaced_pod(namespace, pod)
    assert _finished_log(core, namespace, "reader").split("\n")[:6] == [
        "ann",
        "s3cret",
        "400",
        "ann",
        "440",
        "ann s3cret .",
    ]


def _waits_with(core, namespace, name, message: str) -> None:
    def waiting():
        statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return state is not None and (state.reason, state.message) == ("CreateContainerConfigError", message)

    wait_for(waiting, timeout=60, what=f"{name} waiting with {message}")


def test_a_missing_secret_is_create_container_config_error_until_it_exists(core, namespace):
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "later", "key": "x"}}}]
    core.create_namespaced_pod(namespace, _pod("waits", "echo $X", container={"env": env}))
    _waits_with(core, namespace, "waits", 'secret "later" not found')
    core.create_namespaced_secret(namespace, _secret("later", stringData={"y": "1"}))
    _waits_with(core, namespace, "waits", f"couldn't find key x in Secret {namespace}/later")
    core.patch_namespaced_secret("later", namespace, {"stringData": {"x": "here"}})
    assert _finished_log(core, namespace, "waits").strip() == "here"


def test_a_missing_secret_volume_fails_the_mount(core, namespace):
    volumes = [{"name": "v", "secret": {"secretName": "absent"}}]
    core.create_namespaced_pod(namespace, _pod("mounts", "true", volumes=volumes))

    def failed_mount():
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=mounts").items
        return next((e.message for e in events if e.reason == "FailedMount"), None)

    message = wait_for(failed_mount, timeout=60, what="FailedMount")
    assert message == 'MountVolume.SetUp failed for volume "v" : secret "absent" not found'


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="no kubectl on PATH")
def test_kubectl_create_secret_and_get(kubeconfig, namespace, tmp_path):
    def kubectl(*args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "HOME": str(tmp_path)}
        done = subprocess.run(["kubectl", "-n", namespace, *args], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = kubectl("create", "secret", "generic", "k", "--from-literal=a=b", "--from-literal=c=d")
    assert out.strip() == "secret/k created"  # sent as protobuf
    assert kubectl("get", "secret", "k", "-o", "jsonpath={.data.a}") == b64("b")
    assert kubectl("get", "secrets").split()[:7] == ["NAME", "TYPE", "DATA", "AGE", "k", "Opaque", "2"]


def test_an_immutable_configmap_keeps_its_data(core, namespace):
    """`ValidateConfigMapUpdate`, the same rule as for secrets."""
    body = {"metadata": {"name": "frozen"}, "data": {"a": "1"}, "immutable": True}
    core.create_namespaced_config_map(namespace, body)
    status, body = _error(lambda: core.patch_namespaced_config_map("frozen", namespace, {"data": {"a": "2"}}))
    assert status == 422 and [c["field"] for c in body["details"]["causes"]] == ["data"]
    status, body = _error(lambda: core.patch_namespaced_config_map("frozen", namespace, {"immutable": False}))
    assert status == 422 and [c["field"] for c in body["details"]["causes"]] == ["immutable"]
