"""SelfSubjectAccessReview (`kubectl auth can-i`) and SelfSubjectReview (`kubectl auth whoami`) on a cluster
with RBAC, through the official client (test_rbac_kubectl.py asks them through kubectl): the reviews answer
for the token that sends them, as the RBAC authorizer decides."""

from __future__ import annotations

from typing import Any

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import service_account_token
from kubernetes.client import ApiException


@pytest.fixture(scope="module")
def rbac_cluster(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("rbac-reviews")
    c = LocalCluster(ClusterConfig(profile="fast", root=str(root / "c"), authorization_mode="RBAC"))
    c.start()
    folder = tmp_path_factory.mktemp("rbac-reviews-kube")
    pods = [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]
    tokens = {"reader": service_account_token(_api(c, folder, None), "team", "reader", pods), "nobody": "x"}
    yield c, folder, tokens
    c.stop()


def _api(cluster: LocalCluster, folder, token: str | None) -> Any:
    from kubernetes import config

    path = cluster.write_kubeconfig(folder / (token or "admin")[:40], token=token)
    return config.new_client_from_config(config_file=str(path))


def _can_i(api: Any, **attrs: str) -> bool:
    from kubernetes import client

    key = "non_resource_attributes" if "path" in attrs else "resource_attributes"
    spec = {"nonResourceAttributes" if "path" in attrs else "resourceAttributes": attrs}
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": spec}
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(body)
    assert review.kind == "SelfSubjectAccessReview" and review.spec.to_dict()[key] is not None
    return review.status.allowed


@pytest.mark.parametrize(
    ("attrs", "allowed"),
    [
        ({"verb": "get", "resource": "pods", "namespace": "team"}, True),
        ({"verb": "list", "resource": "pods", "namespace": "team"}, True),
        ({"verb": "get", "resource": "pods", "subresource": "log", "namespace": "team", "name": "p"}, True),
        ({"verb": "delete", "resource": "pods", "namespace": "team"}, False),
        ({"verb": "get", "resource": "pods", "namespace": "other"}, False),
        ({"verb": "get", "resource": "secrets", "namespace": "team"}, False),
        (
            {"verb": "get", "path": "/version"},
            True,
        ),  # non-resource URLs: discovery is open to the authenticated
    ],
)
def test_can_i_answers_for_the_token(rbac_cluster, attrs, allowed):
    cluster, folder, tokens = rbac_cluster
    assert _can_i(_api(cluster, folder, tokens["reader"]), **attrs) is allowed


def test_whoami_names_the_service_account_and_its_groups(rbac_cluster):
    from kubernetes import client

    cluster, folder, tokens = rbac_cluster
    review = client.AuthenticationV1Api(_api(cluster, folder, tokens["reader"])).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == "system:serviceaccount:team:reader"
    assert review.status.user_info.groups == [
        "system:serviceaccounts",
        "system:serviceaccounts:team",
        "system:authenticated",
    ]


def test_an_unknown_token_is_401_and_a_review_needs_one_kind_of_attributes(rbac_cluster):
    from kubernetes import client

    cluster, folder, tokens = rbac_cluster
    with pytest.raises(ApiException) as err:
        client.AuthenticationV1Api(_api(cluster, folder, tokens["nobody"])).create_self_subject_review({})
    assert err.value.status == 401
    with pytest.raises(ApiException) as err:
        client.AuthorizationV1Api(_api(cluster, folder, tokens["reader"])).create_self_subject_access_review(
            {"spec": {}}
        )
    assert err.value.status == 422 and "exactly one of" in err.value.body


def test_rules_review_lists_the_rules_that_hold_in_the_namespace(rbac_cluster):
    from kubernetes import client

    cluster, folder, tokens = rbac_cluster
    api = client.AuthorizationV1Api(_api(cluster, folder, tokens["reader"]))

    def rules(namespace: str) -> list[tuple[str, ...]]:
        review = api.create_self_subject_rules_review({"spec": {"namespace": namespace}})
        assert review.status.incomplete is False
        assert review.status.non_resource_rules[0].verbs == ["get"]
        return sorted(tuple(r.resources) for r in review.status.resource_rules)

    assert rules("team") == [
        ("pods", "pods/log"),
        ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
        ("selfsubjectreviews",),
    ]
    assert rules("other") == [
        ("selfsubjectaccessreviews", "selfsubjectrulesreviews"),
        ("selfsubjectreviews",),
    ]
