"""RBAC on the local cluster through the official client: Roles, ClusterRoles and their bindings as objects
(validation, defaults), the authorizer's decisions over them (`rbac.go` `RuleAllows`, `VisitRulesFor`), the
bootstrap policy, anonymous requests, and the escalation check of the role and binding registries
(`ConfirmNoEscalation`, the `bind` and `escalate` verbs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kruise_local.testing import service_account_token
from kubernetes import client, config
from kubernetes.client import ApiException

NS = "team"
RBAC_GROUP = "rbac.authorization.k8s.io"


@pytest.fixture(scope="module")
def secured(rbac_cluster: dict[str, Any]) -> dict[str, Any]:
    return rbac_cluster


def as_token(secured: dict[str, Any], token: str) -> client.ApiClient:
    path = secured["cluster"].write_kubeconfig(secured["root"] / f"kc-{token[-16:]}", token=token)
    return config.new_client_from_config(str(path))


def identity(
    secured: dict[str, Any], name: str, rules: list[dict[str, Any]] | None = None
) -> client.ApiClient:
    """A client of ServiceAccount team/`name`, bound to a Role of `rules` in `team`."""
    return as_token(secured, service_account_token(secured["admin"], NS, name, rules))


def can(api: client.ApiClient, verb: str, resource: str, namespace: str = NS, **attrs: str) -> bool:
    spec = {"resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace, **attrs}}
    review = client.AuthorizationV1Api(api).create_self_subject_access_review({"spec": spec})
    return bool(review.status.allowed)


def status(err: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    return json.loads(err.value.body)


def role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "rules": rules}


def binding(name: str, kind: str, role_name: str, *subjects: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "roleRef": {"kind": kind, "name": role_name},
        "subjects": list(subjects),
    }


def test_the_bootstrap_policy_is_there(secured):
    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    names = {r.metadata.name for r in rbac.list_cluster_role().items}
    assert {"cluster-admin", "system:basic-user", "system:discovery", "system:public-info-viewer"} <= names
    admin_binding = rbac.read_cluster_role_binding("cluster-admin")
    assert admin_binding.subjects[0].kind == "Group" and admin_binding.subjects[0].name == "system:masters"
    assert admin_binding.metadata.labels == {"kubernetes.io/bootstrapping": "rbac-defaults"}


def test_rules_match_verbs_groups_resources_subresources_and_names(secured):
    api = identity(
        secured,
        "matcher",
        [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["allowed"]},
            {"apiGroups": ["apps.kruise.io"], "resources": ["*"], "verbs": ["*"]},
        ],
    )
    assert can(api, "get", "pods") and can(api, "list", "pods")
    assert not can(api, "delete", "pods")
    assert not can(api, "get", "pods", namespace="default")  # a RoleBinding holds in its namespace only
    assert can(api, "update", "pods", subresource="status")  # */status
    assert not can(api, "update", "pods")
    assert not can(api, "get", "pods", subresource="log")  # "pods" grants no subresource
    assert can(api, "get", "configmaps", name="allowed") and not can(api, "get", "configmaps", name="other")
    assert not can(api, "list", "configmaps")  # resourceNames: no name, no match
    assert can(api, "create", "imagepulljobs", group="apps.kruise.io")
    assert not can(api, "create", "imagepulljobs")  # another API group


def test_a_list_with_a_name_field_selector_is_authorized_by_that_name(secured):
    """`NewRequestInfo` takes a list's or watch's name from `fieldSelector=metadata.name=...`, so a rule with
    resourceNames allows it (as `kubectl get cm allowed -w` needs)."""
    api = identity(
        secured,
        "named",
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"], "resourceNames": ["allowed"]}],
    )
    core = client.CoreV1Api(api)
    assert core.list_namespaced_config_map(NS, field_selector="metadata.name=allowed").items == []
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(NS)
    assert err.value.status == 403


def test_subjects_users_groups_and_service_accounts(secured):
    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    rules = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
    rbac.create_namespaced_role(NS, role("secret-lister", rules))
    api = identity(secured, "grouped")
    assert not can(api, "list", "secrets")
    group = {"kind": "Group", "name": "system:serviceaccounts:team"}
    rbac.create_namespaced_role_binding(NS, binding("all-of-team", "Role", "secret-lister", group))
    try:
        assert can(api, "list", "secrets")  # every account of the namespace, by its group
    finally:
        rbac.delete_namespaced_role_binding("all-of-team", NS)
    assert not can(api, "list", "secrets")
    user = {"kind": "User", "name": "system:serviceaccount:team:grouped"}
    rbac.create_namespaced_role_binding(NS, binding("by-name", "Role", "secret-lister", user))
    assert can(api, "list", "secrets")  # an account is also a user of its name
    stored = rbac.read_namespaced_role_binding("by-name", NS)
    assert stored.role_ref.api_group == RBAC_GROUP and stored.subjects[0].api_group == RBAC_GROUP


def test_a_cluster_role_bound_in_a_namespace_holds_there_only(secured):
    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    rules = [{"apiGroups": [""], "resources": ["events"], "verbs": ["list"]}]
    rbac.create_cluster_role(role("event-reader", rules))
    api = identity(secured, "events")
    sa = {"kind": "ServiceAccount", "name": "events"}  # its namespace defaults to the binding's
    rbac.create_namespaced_role_binding(NS, binding("events", "ClusterRole", "event-reader", sa))
    assert can(api, "list", "events") and not can(api, "list", "events", namespace="default")
    sa = {"kind": "ServiceAccount", "name": "events", "namespace": NS}
    rbac.create_cluster_role_binding(binding("events", "ClusterRole", "event-reader", sa))
    assert can(api, "list", "events", namespace="default")
    rbac.delete_cluster_role("event-reader")  # a binding to a missing role grants nothing
    assert not can(api, "list", "events")
    with pytest.raises(ApiException) as err:  # and the denial says why
        client.CoreV1Api(api).list_namespaced_event(NS)
    missing = 'clusterrole.rbac.authorization.k8s.io "event-reader" not found'  # both bindings' role
    assert status(err)["message"].endswith(f'in the namespace "team": RBAC: [{missing}, {missing}]')


def test_a_refusal_is_the_api_servers_403(secured):
    core = client.CoreV1Api(identity(secured, "nothing"))
    with pytest.raises(ApiException) as err:
        core.read_namespaced_secret("s", NS)
    assert err.value.status == 403
    assert status(err)["message"] == (
        'secrets "s" is forbidden: User "system:serviceaccount:team:nothing" cannot get resource "secrets" '
        'in API group "" in the namespace "team"'
    )
    assert status(err)["details"] == {"name": "s", "kind": "secrets"}
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(identity(secured, "nothing")).list_node()
    assert status(err)["message"].endswith(
        'cannot list resource "nodes" in API group "" at the cluster scope'
    )


def test_anonymous_requests_reach_the_public_info_only(secured):
    import urllib.error
    import urllib.request

    url = secured["cluster"].url
    for path in ("/healthz", "/version", "/readyz"):
        with urllib.request.urlopen(url + path, timeout=10) as resp:
            assert resp.status == 200
    for path, message in (
        ("/api", 'forbidden: User "system:anonymous" cannot get path "/api"'),
        ("/api/v1/namespaces/team/pods", 'User "system:anonymous" cannot list resource "pods"'),
    ):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + path, timeout=10)
        assert err.value.code == 403
        assert message in json.loads(err.value.read())["message"]


def test_validation(secured):
    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    bad_rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": []},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods", "secrets"], "resourceNames": ["x"], "verbs": ["get"]},
    ]
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role(NS, role("bad", bad_rules))
    assert err.value.status == 422
    assert [(c["field"], c["message"]) for c in status(err)["details"]["causes"]] == [
        ("rules[0].verbs", "Required value: verbs must contain at least one value"),
        (
            "rules[1].nonResourceURLs",
            'Invalid value: []string{"/metrics"}: namespaced rules cannot apply to non-resource URLs',
        ),
        ("rules[2].resourceNames", "Required value: resource names cannot apply to multiple resources"),
    ]
    rbac.create_cluster_role(role("with:colons", [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]))
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role_binding(
            NS, binding("b", "Secret", "x", {"kind": "Robot", "name": "r"}, {"kind": "ServiceAccount"})
        )
    causes = [c["field"] for c in status(err)["details"]["causes"]]
    assert causes == ["roleRef.kind", "subjects[0].kind", "subjects[1].name"]
    subject = {"kind": "ServiceAccount", "name": "a"}
    with pytest.raises(ApiException) as err:  # a ClusterRoleBinding's account names its namespace
        rbac.create_cluster_role_binding(binding("b", "ClusterRole", "with:colons", subject))
    assert status(err)["details"]["causes"][0]["field"] == "subjects[0].namespace"


def test_a_bindings_role_ref_cannot_change(secured):
    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    rbac.create_namespaced_role_binding(NS, binding("fixed", "Role", "one"))
    with pytest.raises(ApiException) as err:
        rbac.patch_namespaced_role_binding("fixed", NS, {"roleRef": {"name": "two"}})
    assert err.value.status == 422
    assert status(err)["message"].endswith(
        'roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", Kind:"Role", '
        'Name:"two"}: cannot change roleRef'
    )
    rbac.patch_namespaced_role_binding("fixed", NS, {"subjects": [{"kind": "Group", "name": "g"}]})


def test_no_one_grants_what_they_do_not_hold(secured):
    """`ConfirmNoEscalation`: a writer of roles and bindings may grant only rules it holds."""
    writer = [
        {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": ["create", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
    ]
    rbac = client.RbacAuthorizationV1Api(identity(secured, "writer", writer))
    held = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    rbac.create_namespaced_role(NS, role("held", held))
    more = [{"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "delete"]}]
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role(NS, role("more", more))
    assert err.value.status == 403
    assert status(err)["message"] == (
        'roles.rbac.authorization.k8s.io "more" is forbidden: user "system:serviceaccount:team:writer" '
        '(groups=["system:serviceaccounts" "system:serviceaccounts:team" "system:authenticated"]) is '
        "attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}\n'
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}'
    )
    subject = {"kind": "ServiceAccount", "name": "writer"}
    rbac.create_namespaced_role_binding(NS, binding("ok", "Role", "held", subject))
    admin = client.RbacAuthorizationV1Api(secured["admin"])
    admin.create_namespaced_role(NS, role("admin-made", more))
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role_binding(NS, binding("escalating", "Role", "admin-made", subject))
    assert err.value.status == 403 and "not currently held" in status(err)["message"]
    with pytest.raises(ApiException) as err:  # a missing role: its lookup's 404
        rbac.create_namespaced_role_binding(NS, binding("dangling", "Role", "missing", subject))
    assert err.value.status == 404
    assert status(err)["message"] == 'roles.rbac.authorization.k8s.io "missing" not found'


def test_bind_and_escalate_let_a_writer_grant_more(secured):
    writer = [
        {"apiGroups": [RBAC_GROUP], "resources": ["roles", "rolebindings"], "verbs": ["create"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["bind"], "resourceNames": ["granted"]},
        {"apiGroups": [RBAC_GROUP], "resources": ["roles"], "verbs": ["escalate"], "resourceNames": ["free"]},
    ]
    rbac = client.RbacAuthorizationV1Api(identity(secured, "delegate", writer))
    everything = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
    rbac.create_namespaced_role(NS, role("free", everything))  # escalate on that name
    client.RbacAuthorizationV1Api(secured["admin"]).create_namespaced_role(NS, role("granted", everything))
    subject = {"kind": "Group", "name": "someone"}
    rbac.create_namespaced_role_binding(NS, binding("b1", "Role", "granted", subject))  # bind on that name
    with pytest.raises(ApiException) as err:
        rbac.create_namespaced_role_binding(NS, binding("b2", "Role", "free", subject))
    assert err.value.status == 403


def test_rbac_objects_list_and_watch(secured):
    from kubernetes import watch

    rbac = client.RbacAuthorizationV1Api(secured["admin"])
    listed = rbac.list_namespaced_role(NS)
    seen = []
    stream = watch.Watch().stream(
        rbac.list_namespaced_role, NS, resource_version=listed.metadata.resource_version, timeout_seconds=5
    )
    rbac.create_namespaced_role(
        NS, role("watched", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}])
    )
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        break
    assert seen == [("ADDED", "watched")]


def test_a_kubeconfig_of_the_admin_token_is_in_system_masters(secured, tmp_path: Path):
    review = client.AuthenticationV1Api(secured["admin"]).create_self_subject_review({})
    assert review.status.user_info.username == "kruise-local-admin"
    assert "system:masters" in review.status.user_info.groups
