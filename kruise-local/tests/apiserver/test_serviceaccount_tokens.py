"""ServiceAccount tokens through the official client: TokenRequest (`serviceaccounts/<name>/token`,
`TokenREST.Create`) and the authenticator that accepts them (`pkg/serviceaccount/claims.go`
`validator.Validate`): the account's user and groups, refused once the account (or the object a token is
bound to) is gone, or for an audience that is not the API server's."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException

NS = "robots"


@pytest.fixture(scope="module")
def secured(rbac_cluster: dict[str, Any]) -> dict[str, Any]:
    return {**rbac_cluster, "admin": client.CoreV1Api(rbac_cluster["admin"])}


def whoami(secured: dict[str, Any], token: str) -> Any:
    path = secured["cluster"].write_kubeconfig(secured["root"] / f"kc-{token[-16:]}", token=token)
    api = client.AuthenticationV1Api(config.new_client_from_config(str(path)))
    return api.create_self_subject_review({}).status.user_info


def token_of(core: client.CoreV1Api, name: str, **spec: Any) -> Any:
    return core.create_namespaced_service_account_token(name, NS, {"spec": spec})


def claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_a_token_authenticates_as_its_service_account(secured):
    core = secured["admin"]
    account = core.create_namespaced_service_account(NS, {"metadata": {"name": "bot"}})
    request = token_of(core, "bot")
    assert request.kind == "TokenRequest" and request.spec.expiration_seconds == 3600
    assert request.spec.audiences == ["https://kubernetes.default.svc.cluster.local"]
    lifetime = request.status.expiration_timestamp - request.metadata.creation_timestamp
    assert lifetime.total_seconds() == 3600
    payload = claims(request.status.token)
    assert payload["sub"] == f"system:serviceaccount:{NS}:bot"
    assert payload["kubernetes.io"]["serviceaccount"] == {"name": "bot", "uid": account.metadata.uid}
    user = whoami(secured, request.status.token)
    assert user.username == f"system:serviceaccount:{NS}:bot" and user.uid == account.metadata.uid
    assert user.groups == ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]
    assert user.extra["authentication.kubernetes.io/credential-id"] == [f"JTI={payload['jti']}"]


def test_a_token_is_refused_once_its_account_is_gone(secured):
    core = secured["admin"]
    core.create_namespaced_service_account(NS, {"metadata": {"name": "short-lived"}})
    token = token_of(core, "short-lived").status.token
    assert whoami(secured, token).username.endswith(":short-lived")
    core.delete_namespaced_service_account("short-lived", NS)
    with pytest.raises(ApiException) as err:
        whoami(secured, token)
    assert err.value.status == 401
    core.create_namespaced_service_account(NS, {"metadata": {"name": "short-lived"}})
    with pytest.raises(ApiException) as err:  # another account of that name: another uid
        whoami(secured, token)
    assert err.value.status == 401


def test_a_token_bound_to_a_secret_dies_with_it(secured):
    core = secured["admin"]
    core.create_namespaced_service_account(NS, {"metadata": {"name": "bound"}})
    secret = core.create_namespaced_secret(NS, {"metadata": {"name": "anchor"}, "stringData": {"k": "v"}})
    ref = {"apiVersion": "v1", "kind": "Secret", "name": "anchor", "uid": secret.metadata.uid}
    token = token_of(core, "bound", boundObjectRef=ref).status.token
    assert claims(token)["kubernetes.io"]["secret"] == {"name": "anchor", "uid": secret.metadata.uid}
    assert whoami(secured, token).username.endswith(":bound")
    core.delete_namespaced_secret("anchor", NS)
    with pytest.raises(ApiException) as err:
        whoami(secured, token)
    assert err.value.status == 401


def test_a_token_for_another_audience_is_not_the_api_servers(secured):
    core = secured["admin"]
    core.create_namespaced_service_account(NS, {"metadata": {"name": "vault"}})
    request = token_of(core, "vault", audiences=["vault"])
    assert request.spec.audiences == ["vault"]
    with pytest.raises(ApiException) as err:
        whoami(secured, request.status.token)
    assert err.value.status == 401


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ({"expirationSeconds": 599}, 422,
         "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"),
        ({"expirationSeconds": 2**32 + 1}, 422, "may not specify a duration larger than 2^32 seconds"),
        ({"boundObjectRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}}, 400,
         "cannot bind token to object of type apps/v1, Kind=Deployment"),
        ({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "nope"}}, 404,
         'pods "nope" not found'),
    ],
    ids=["too-short", "too-long", "unbindable-kind", "missing-pod"],
)  # fmt: skip
def test_token_request_validation(secured, spec, code, message):
    core = secured["admin"]
    try:
        core.create_namespaced_service_account(NS, {"metadata": {"name": "checked"}})
    except ApiException as e:
        assert e.status == 409
    with pytest.raises(ApiException) as err:
        token_of(core, "checked", **spec)
    assert err.value.status == code and message in json.loads(err.value.body)["message"], err.value.body


def test_a_token_of_a_missing_account_is_a_404(secured):
    with pytest.raises(ApiException) as err:
        token_of(secured["admin"], "ghost")
    assert err.value.status == 404
    assert json.loads(err.value.body)["message"] == 'serviceaccounts "ghost" not found'


def test_an_unknown_token_is_a_401_and_none_is_anonymous(secured):
    import urllib.error
    import urllib.request

    with pytest.raises(ApiException) as err:
        whoami(secured, "not-a-token")
    assert err.value.status == 401
    request = urllib.request.Request(
        secured["cluster"].url + "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        data=b'{"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1"}',
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:  # anonymous holds no system:basic-user
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    message = json.loads(refused.value.read())["message"]
    assert 'User "system:anonymous" cannot create resource "selfsubjectreviews"' in message, message
