"""Authentication: who sends a request, and ServiceAccount tokens (TokenRequest).

The filter (`apiserver/pkg/endpoints/filters/authentication.go` `WithAuthentication`) asks the union of
authenticators that kube-apiserver builds (`pkg/kubeapiserver/authenticator/config.go` `New`) for the user of
an `Authorization: Bearer` token (`bearertoken.go`): the static admin token (`--token-auth-file`:
`kruise-local-admin`, in `system:masters`), then ServiceAccount tokens; the union adds
`system:authenticated` (`group.NewAuthenticatedGroupAdder`). A token no authenticator accepts is a 401 at once
(`union.NewFailOnError`); a request without one is `system:anonymous` in `system:unauthenticated`
(`--anonymous-auth`, on by default). While the cluster authorizes nothing (AlwaysAllow), a request whose
token is not a ServiceAccount's is the admin's, as before authorization was turned on.

ServiceAccount tokens are JWTs signed by the cluster's key (`pkg/serviceaccount/jwt.go` `JWTTokenGenerator`),
with the claims of `claims.go` `Claims` (issuer, subject, audiences, expiry, `kubernetes.io` private claims:
namespace, the account's name and uid, the bound Pod or Secret). `validator.Validate` accepts one only while
it is unexpired, meant for the API server's audience, and its account still exists with the uid it names
(and its bound object too): a token outlives no deleted account. The user is
`system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and `system:serviceaccounts:<ns>`
(`serviceaccount.UserInfo`), its `extra` the token's `credential-id` (and the bound pod's name and uid).

TokenRequest (`pkg/registry/core/serviceaccount/storage/token.go` `TokenREST.Create`, `kubectl create
token`): `serviceaccounts/<name>/token` mints a token for the account, `spec.expirationSeconds` 3600 by
default and at least 600 (`ValidateTokenRequest`), `spec.audiences` the API server's by default.

Impersonation (`kubectl --as`, `impersonate`) follows authentication, as `WithImpersonation` does.
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ec

from . import resources as R
from .decoding import read_body
from .errors import ApiError, invalid
from .rbac import ADMIN_USER, RequestInfo, UserInfo, forbidden
from .responses import json_response
from .store import Obj, Store
from .validation import invalid_value

AUTHENTICATION = "authentication.k8s.io"
ISSUER = "https://kubernetes.default.svc.cluster.local"
"""`--service-account-issuer` (and so the API audience, `--api-audiences` unset) as kind and kubeadm set it"""
ADMIN_TOKEN = "kruise-local-admin"
"""the admin's static token (the kubeconfigs the cluster writes carry it)"""
ANONYMOUS: UserInfo = {
    "username": "system:anonymous",
    "uid": "",
    "groups": ["system:unauthenticated"],
    "extra": {},
}
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
_LEEWAY = 60
"""the clock skew `validator.Validate` tolerates on expiry (`jwt.DefaultLeeway`)"""


def service_account_user(namespace: str, name: str, uid: str, extra: dict[str, list[str]]) -> UserInfo:
    """`serviceaccount.UserInfo`, with the union's `system:authenticated`."""
    return {
        "username": f"system:serviceaccount:{namespace}:{name}",
        "uid": uid,
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        "extra": extra,
    }


class TokenIssuer:
    """Signs and checks ServiceAccount tokens with one ES256 key (`--service-account-signing-key-file`)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._key = ec.generate_private_key(ec.SECP256R1())

    def issue(self, account: Obj, audiences: list[str], seconds: int, bound: Obj | None, now: float) -> str:
        """`Claims` + `GenerateToken`: the token of `account`, bound to the Pod or Secret `bound`."""
        meta = account["metadata"]
        private: dict[str, Any] = {
            "namespace": meta["namespace"],
            "serviceaccount": {"name": meta["name"], "uid": meta["uid"]},
        }
        if bound is not None:
            private[bound["kind"].lower()] = {
                "name": bound["metadata"]["name"],
                "uid": bound["metadata"]["uid"],
            }
        claims = {
            "iss": ISSUER,
            "sub": f"system:serviceaccount:{meta['namespace']}:{meta['name']}",
            "aud": audiences,
            "iat": int(now),
            "nbf": int(now),
            "exp": int(now) + seconds,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
        }
        return jwt.encode(claims, self._key, algorithm="ES256", headers={"kid": "kruise-local"})

    def user(self, token: str) -> UserInfo | None:
        """`validator.Validate`: the user of a valid token, None for one that is not this issuer's JWT (so
        the next authenticator may try it); ApiError 401 for one of this issuer that no longer holds."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        if header.get("kid") != "kruise-local":
            return None
        try:
            claims = jwt.decode(
                token,
                self._key.public_key(),
                algorithms=["ES256"],
                audience=ISSUER,
                issuer=ISSUER,
                leeway=_LEEWAY,
            )
        except jwt.PyJWTError:
            raise ApiError(401, "Unauthorized") from None
        private = claims.get("kubernetes.io") or {}
        namespace, account = private.get("namespace", ""), private.get("serviceaccount") or {}
        stored = self.store.peek(R.SERVICE_ACCOUNTS, namespace, account.get("name", ""))
        if stored is None or stored["metadata"].get("deletionTimestamp"):
            raise ApiError(401, "Unauthorized")  # "service account ... has been deleted"
        if stored["metadata"].get("uid") != account.get("uid"):
            raise ApiError(401, "Unauthorized")  # "service account UID (...) does not match claim (...)"
        extra = {"authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti', '')}"]}
        for kind, res in (("pod", R.PODS), ("secret", R.SECRETS)):
            ref = private.get(kind)
            if ref:
                obj = self.store.peek(res, namespace, ref.get("name", ""))
                if obj is None or obj["metadata"].get("uid") != ref.get("uid"):
                    raise ApiError(401, "Unauthorized")  # the bound object is gone
                if kind == "pod":
                    extra["authentication.kubernetes.io/pod-name"] = [ref.get("name", "")]
                    extra["authentication.kubernetes.io/pod-uid"] = [ref.get("uid", "")]
        return service_account_user(namespace, account.get("name", ""), account.get("uid", ""), extra)


class Authenticator:
    """The union of the static admin token and ServiceAccount tokens, with anonymous requests."""

    def __init__(self, store: Store) -> None:
        self.issuer = TokenIssuer(store)

    def authenticate(self, request: web.Request, strict: bool) -> UserInfo:
        """The user of `request`; `strict` (the cluster authorizes) refuses what no authenticator accepts
        with a 401 and makes a request without a token anonymous, else that request is the admin's."""
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer":
            return ANONYMOUS if strict else ADMIN_USER
        token = token.strip()
        if token == ADMIN_TOKEN:
            return ADMIN_USER
        user = self.issuer.user(token) if token else None
        if user is not None:
            return user
        if strict:
            raise ApiError(401, "Unauthorized")
        return ADMIN_USER


Authorize = Callable[[UserInfo, RequestInfo], tuple[bool, str]]
_EXTRA_PREFIX = "impersonate-extra-"


def impersonate(request: web.Request, requestor: UserInfo, authorize: Authorize) -> UserInfo:
    """`WithImpersonation` (`apiserver/pkg/endpoints/filters/impersonation.go`): the user the
    `Impersonate-User`, `-Group`, `-Uid` and `-Extra-*` headers ask for, once the requestor may `impersonate`
    each (a ServiceAccount's username as `serviceaccounts`, others as `users`, `groups`, `uids`,
    `userextras/<key>`); a 403 for the first it may not. A ServiceAccount gets its groups unless groups are
    asked for; a user other than `system:anonymous` gets `system:authenticated`."""
    headers = request.headers
    username, uid = headers.get("Impersonate-User", ""), headers.get("Impersonate-Uid", "")
    groups_asked = headers.getall("Impersonate-Group", [])
    extras: dict[str, list[str]] = {}
    for key, value in headers.items():
        if key.lower().startswith(_EXTRA_PREFIX):
            extras.setdefault(urllib.parse.unquote(key[len(_EXTRA_PREFIX) :]).lower(), []).append(value)
    if not username:
        if groups_asked or extras or uid:
            raise ApiError(
                500, "requested impersonation of groups, extra or uid without impersonating a user"
            )
        return requestor
    checks: list[RequestInfo] = []
    groups: list[str] = []
    parts = username.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[2] and parts[3]:
        checks.append(RequestInfo("impersonate", "", "serviceaccounts", "", parts[2], parts[3], True))
        if not groups_asked:
            groups = ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"]
    else:
        checks.append(RequestInfo("impersonate", "", "users", "", "", username, True))
    for group in groups_asked:
        checks.append(RequestInfo("impersonate", "", "groups", "", "", group, True))
        groups.append(group)
    if uid:
        checks.append(RequestInfo("impersonate", AUTHENTICATION, "uids", "", "", uid, True))
    for key, values in extras.items():
        checks += [RequestInfo("impersonate", AUTHENTICATION, "userextras", key, "", v, True) for v in values]
    for check in checks:
        allowed, reason = authorize(requestor, check)
        if not allowed:
            raise forbidden(requestor, check, reason)
    if not groups_asked and username != ANONYMOUS["username"]:
        if not {"system:authenticated", "system:unauthenticated"} & set(groups):
            groups.append("system:authenticated")
    return {"username": username, "uid": uid, "groups": groups, "extra": extras}


def _bound_object(store: Store, namespace: str, account: str, ref: Any) -> Obj | None:
    """The Pod or Secret `spec.boundObjectRef` names (`TokenREST.Create`), checked."""
    if not ref:
        return None
    if not isinstance(ref, dict):
        raise ApiError(400, "spec.boundObjectRef must be an object")
    api_version, kind, name = ref.get("apiVersion") or "", ref.get("kind") or "", str(ref.get("name") or "")
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    res = {"Pod": R.PODS, "Secret": R.SECRETS}.get(kind) if group == "" else None
    if res is None:
        version = api_version.rpartition("/")[2]
        shown = f"{group}/{version}, Kind={kind}"
        raise ApiError(400, f"cannot bind token to object of type {shown}")
    obj = store.peek(res, namespace, name)
    if obj is None:
        raise ApiError(404, f'{res.plural} "{name}" not found', kind=res.plural, name=name)
    if res is R.PODS and obj["spec"].get("serviceAccountName") != account:
        pod_account = obj["spec"].get("serviceAccountName")
        raise ApiError(
            400,
            f'cannot bind token for serviceaccount "{account}" to pod running with serviceaccount '
            f'"{pod_account}"',
        )
    uid = ref.get("uid") or ""
    if uid and uid != obj["metadata"]["uid"]:
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on {kind} "{name}": the UID in the bound object reference '
            f"({uid}) does not match the UID in record ({obj['metadata']['uid']}). The object might have "
            "been deleted and then recreated",
            reason="Conflict",
        )
    return obj


async def serve_token_request(
    request: web.Request, store: Store, issuer: TokenIssuer, namespace: str, name: str
) -> web.Response:
    """`TokenREST.Create`: a POST of a TokenRequest to `serviceaccounts/<name>/token`."""
    if request.method != "POST":
        raise ApiError(
            405, f"{request.method} is not allowed on serviceaccounts/token", reason="MethodNotAllowed"
        )
    body = await read_body(request)
    if not isinstance(body, dict) or body.get("kind") not in (None, "TokenRequest"):
        raise ApiError(400, "the body of the request must be an authentication.k8s.io/v1 TokenRequest")
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    spec = dict(body.get("spec")) if isinstance(body.get("spec"), dict) else {}
    causes = []
    if meta.get("name") not in (None, "", name):
        causes.append(
            invalid_value("metadata.name", meta["name"], "must match the service account name if specified")
        )
    if meta.get("namespace") not in (None, "", namespace):
        causes.append(
            invalid_value(
                "metadata.namespace",
                meta["namespace"],
                "must match the service account namespace if specified",
            )
        )
    seconds = spec.get("expirationSeconds")
    seconds = DEFAULT_EXPIRATION if seconds is None else seconds  # SetDefaults_TokenRequestSpec
    if not isinstance(seconds, int) or isinstance(seconds, bool):
        raise ApiError(400, "spec.expirationSeconds must be an integer")
    if seconds < MIN_EXPIRATION:
        causes.append(
            invalid_value(
                "spec.expirationSeconds", seconds, "may not specify a duration less than 10 minutes"
            )
        )
    if seconds > MAX_EXPIRATION:
        causes.append(
            invalid_value(
                "spec.expirationSeconds", seconds, "may not specify a duration larger than 2^32 seconds"
            )
        )
    if causes:
        raise invalid("TokenRequest", name, causes, group="authentication.k8s.io")
    account = store.peek(R.SERVICE_ACCOUNTS, namespace, name)
    if account is None:
        raise ApiError(404, f'serviceaccounts "{name}" not found', kind="serviceaccounts", name=name)
    bound = _bound_object(store, namespace, name, spec.get("boundObjectRef"))
    audiences = [str(a) for a in spec.get("audiences") or ()] or [ISSUER]
    now = time.time()
    token = issuer.issue(account, audiences, seconds, bound, now)
    stamp = datetime.fromtimestamp(int(now), UTC)
    out = {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": spec.get("boundObjectRef"),
        },
        "status": {
            "token": token,
            "expirationTimestamp": datetime.fromtimestamp(int(now) + seconds, UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        },
    }
    return json_response(out, 201)
