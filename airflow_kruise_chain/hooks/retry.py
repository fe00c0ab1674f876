"""How `KruiseHook` and `AsyncKruiseHook` meet API failures: which are transient, how long to wait before
another try (`RetryPolicy`), how a cut watch resumes (`WatchResume`), and the errors a failed call raises.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from airflow.providers.cncf.kubernetes.kubernetes_helper_functions import TRANSIENT_CONNECTION_ERRORS
from airflow.sdk.exceptions import AirflowFailException
from kubernetes.client import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_kruise_chain.core.errors import ConflictError, ResizeRefusedError, ResizeUnsupportedError
from airflow_kruise_chain.core.kruise import GATE_HELP, IMAGE_PULL_JOB_PLURAL

RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth another try: throttled (429) or a server/proxy hiccup (5xx)"""
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    *TRANSIENT_CONNECTION_ERRORS,
    ConnectionError,
    TimeoutError,
)
"""A connection refused, reset or timed out (urllib3 and aiohttp, as cncf.kubernetes counts them)"""
READ_TIMEOUT_TRIES = 2
"""tries of one call, at most, that end in a read timeout (the server took the request and did not answer
within the read timeout, `hooks/timeouts.py`): each waits the whole of it, so a server that never answers
fails a call within two of them, not the policy's every try; a call that found no connection keeps them"""


_SERVICE_ACCOUNT = re.compile(
    r'error looking up service account [^/]+/(?P<name>\S+?): serviceaccount "[^"]*" not found'
)
"""the ServiceAccount admission plugin's refusal of a pod whose service account does not exist"""


class KruiseApiError(RuntimeError):
    """A Kubernetes API call failed; the message says which call, on what, and what to do."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PodSecurityRefusedError(KruiseApiError, AirflowFailException):
    """The namespace's Pod Security Admission refused the chain pod.

    An `AirflowFailException`: retrying cannot help until the chain's `pod_security` (or the namespace's
    `pod-security.kubernetes.io/enforce` label) changes.
    """


POD_SECURITY_HELP = (
    "the namespace's Pod Security Admission (label pod-security.kubernetes.io/enforce) refused the chain "
    "pod. A chain pod meets the 'baseline' level as built; for a namespace that enforces 'restricted' pass "
    "KruiseChain(..., pod_security='restricted'), which sets the container security contexts that level "
    "requires; a pod_template or security_context that adds what the level forbids must go (docs/security.md)"
)


class RunnerUnavailableError(KruiseApiError, AirflowFailException):
    """The stage runner cannot reach the chain pod: its ConfigMap is not this provider's, or is missing and
    the connection's identity may not create it (`core/runnerinstall.py`).

    An `AirflowFailException`: retrying cannot help until an admin acts (the message says what to do).
    """


class PrewarmUnavailableError(KruiseApiError, AirflowFailException):
    """OpenKruise's ImagePullJobGate is off, so images cannot be prewarmed.

    An `AirflowFailException`: retrying cannot help until the cluster's configuration changes.
    """


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential back-off for transient API failures."""

    attempts: int = 6
    """tries of one call in all, the first included"""
    initial: float = 0.5
    """seconds before the first retry; doubled for each further one"""
    maximum: float = 8.0
    """cap on the exponential delay"""
    retry_after_max: float = 60.0
    """cap on a delay the server asks for with Retry-After"""

    def delay(self, retry: int, status: int | None, headers: Mapping[str, str] | None) -> float:
        """Seconds to wait before retry number `retry` (from 1): the server's Retry-After if it sent one, else
        the exponential delay with jitter (between half of it and all of it)."""
        retry_after = _retry_after(headers)
        if retry_after is not None and status in RETRYABLE_STATUSES:
            return min(retry_after, self.retry_after_max)
        base = min(self.maximum, self.initial * 2 ** (retry - 1))
        return base / 2 + random.uniform(0, base / 2)


@dataclass
class WatchResume:
    """How a watch of one object, re-opened after a transient failure, goes on: the sync and the async hook
    drive their watches with it.

    Each request asks for the time left until the deadline (the first one for the whole timeout) and starts
    from the last version seen, so no change is missed or seen twice; failures in a row are retried as the
    retry policy allows.
    """

    policy: RetryPolicy
    timeout: int
    """seconds the whole watch may take"""
    started: float
    """clock reading (monotonic, or the event loop's) when the watch began"""
    version: str | None = None
    """the last resourceVersion seen (or the caller's): where a re-opened watch starts"""
    retries: int = 0
    """failures in a row (an event resets it)"""
    requests: int = 0

    def request(self, now: float) -> dict[str, Any] | None:
        """The next watch request's `timeout_seconds` and `resource_version`, or None when less than a
        second is left."""
        remaining = self.timeout if self.requests == 0 else int(self.started + self.timeout - now)
        if remaining < 1:
            return None
        self.requests += 1
        return {"timeout_seconds": remaining, **({"resource_version": self.version} if self.version else {})}

    def seen(self, version: str | None) -> None:
        """An event arrived, at `version`."""
        self.retries = 0
        self.version = version or self.version

    def after(self, error: BaseException) -> Literal["too old", "again", "give up"]:
        """What to do after `error` from a watch request: end it ("too old": the version it started from is
        gone, 410; the caller reads the object again), open it again after a back-off, or give up."""
        if getattr(error, "status", None) == 410 and self.version:
            return "too old"
        self.retries += 1
        if self.retries >= self.policy.attempts or not transient(error, replay_safe=True):
            return "give up"
        return "again"


def _retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Retry-After in seconds (the API server sends whole seconds; an HTTP date is not used by it)."""
    value = (headers or {}).get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def transient(error: BaseException, replay_safe: bool) -> bool:
    """Whether `error` is worth another try of a call (`replay_safe`: repeating it cannot do harm; a call
    that found no connection never reached the server, so any call is tried again after it)."""
    if isinstance(error, (ApiException, AsyncApiException)):
        return error.status == 429 or (replay_safe and error.status in RETRYABLE_STATUSES)
    return isinstance(error, CONNECTION_ERRORS) and (replay_safe or unsent(error))


def gives_up(
    policy: RetryPolicy, tries: int, read_timeouts: int, error: BaseException, replay_safe: bool
) -> bool:
    """Whether a call stops after `error`, its try number `tries`, `read_timeouts` of them read timeouts
    (`error` included): the policy's tries spent, `READ_TIMEOUT_TRIES` read timeouts met, or not
    `transient`."""
    spent = tries >= policy.attempts or read_timeouts >= READ_TIMEOUT_TRIES
    return spent or not transient(error, replay_safe)


def read_timeout(error: BaseException) -> bool:
    """Whether `error` is a read timeout: the request was sent (the connection made) and no answer, or no
    more of it, came within the read timeout."""
    from urllib3.exceptions import ReadTimeoutError

    return isinstance(error, (ReadTimeoutError, *_aiohttp_errors("ServerTimeoutError"))) and not unsent(error)


def unsent(error: BaseException) -> bool:
    """Whether `error` says the request never left: no connection was made (refused, or the connect timed
    out). urllib3 under the sync client retries nothing itself (`hooks/timeouts.py`)."""
    from urllib3.exceptions import ConnectTimeoutError

    unconnected = _aiohttp_errors("ClientConnectorError", "ConnectionTimeoutError")
    return isinstance(error, (ConnectTimeoutError, *unconnected))


def _aiohttp_errors(*names: str) -> tuple[type[BaseException], ...]:
    """aiohttp's exception classes `names`, if a trigger's async client loaded aiohttp (an error can be one
    of them only then), else none: a stage task's sync calls never import it (tests/provider/
    test_lazy_clients.py)."""
    loaded = sys.modules.get("aiohttp.client_exceptions")
    return tuple(getattr(loaded, name) for name in names) if loaded is not None else ()


def describe(error: BaseException) -> str:
    status = getattr(error, "status", None)
    if status is not None:
        return f"HTTP {status} {getattr(error, 'reason', '') or ''}".strip()
    return f"{type(error).__name__}: {error}"


def api_message(e: ApiException | AsyncApiException) -> str:
    """The API server's message in the error's Status body (bytes or text), else the HTTP reason."""
    try:
        message = json.loads(e.body or "{}").get("message")
    except (AttributeError, TypeError, ValueError):
        message = None
    return str(message or e.reason or "")


def explain(
    e: ApiException | AsyncApiException, verb: str, resource: str, namespace: str, name: str = ""
) -> KruiseApiError:
    """The `KruiseApiError` (or subclass) for a failed call: which call, on what, and what to do."""
    message = api_message(e)
    target = f'{resource} "{name}"' if name else resource
    if e.status == 403 and "ImagePullJobGate" in message:
        return PrewarmUnavailableError(f"{GATE_HELP} (API said: {message})", 403)
    if e.status == 403 and "violates PodSecurity" in message:
        return PodSecurityRefusedError(
            f"{verb} {target} in namespace {namespace!r}: {POD_SECURITY_HELP}. API said: {message}", 403
        )
    if e.status == 403 and (sa := _SERVICE_ACCOUNT.search(str(message))):
        return KruiseApiError(
            f"{verb} {target} in namespace {namespace!r}: the ServiceAccount {sa['name']!r} does not exist "
            f"there: create it (kubectl create serviceaccount {sa['name']} -n {namespace}) or correct the "
            f"chain's service_account_name. API said: {message}",
            403,
        )
    if e.status == 404 and f'namespaces "{namespace}" not found' in str(message):
        return KruiseApiError(
            f"{verb} {target}: the namespace {namespace!r} does not exist: create it (kubectl create "
            f"namespace {namespace}), or apply the provider's deploy/ there (kubectl apply -k deploy/, "
            f"docs/rbac.md), or correct the chain's namespace. API said: {message}",
            404,
        )
    if e.status == 403:
        return KruiseApiError(
            f"permission denied: cannot {verb} {target} in namespace {namespace!r}. Grant the verb "
            f"'{verb}' on '{resource}' to the connection's identity (the Role in docs/rbac.md). API said: "
            f"{message}",
            403,
        )
    if e.status == 404 and resource == IMAGE_PULL_JOB_PLURAL and not name:
        return KruiseApiError(
            f"the cluster does not serve apps.kruise.io/{resource}: install OpenKruise >= 1.8 "
            f"(https://openkruise.io/docs/installation). API said: {message}",
            404,
        )
    gave_up = " (still failing after retries)" if e.status in RETRYABLE_STATUSES else ""
    return KruiseApiError(
        f"{verb} {target} in namespace {namespace!r} failed ({e.status}){gave_up}: {message}", e.status
    )


def is_conditional(body: Mapping[str, Any]) -> bool:
    """Whether a patch `body` is guarded by `metadata.resourceVersion` (409 when the object changed since):
    only such a patch is safe to replay after a failure the server may have acted on."""
    return bool((body.get("metadata") or {}).get("resourceVersion"))


def write_failed(
    e: ApiException | AsyncApiException, verb: str, resource: str, namespace: str, name: str
) -> Exception:
    """What a failed write of the chain pod raises, from either hook: `ConflictError` on 409 (the driver
    reads the pod again and plans again), else `explain`'s error."""
    if e.status == 409:
        return ConflictError(f'pods "{name}" changed since it was read (409 Conflict)')
    return explain(e, verb, resource, namespace, name)


def resize_failed(e: ApiException | AsyncApiException, namespace: str, name: str) -> Exception:
    """What a failed `pods/resize` raises, from either hook: `ResizeUnsupportedError` when the cluster does
    not serve it (Kubernetes < 1.33, or InPlacePodVerticalScaling off), `ResizeRefusedError` on 422,
    `ConflictError` on 409 (a stale resourceVersion)."""
    explained = explain(e, "patch", "pods/resize", namespace, name)
    if e.status in (404, 405) and "could not find the requested resource" in api_message(e):
        return ResizeUnsupportedError(
            f"the cluster serves no pods/resize (Kubernetes < 1.33, or InPlacePodVerticalScaling off): "
            f"{explained}"
        )
    if e.status == 422:
        return ResizeRefusedError(str(explained))
    return write_failed(e, "patch", "pods/resize", namespace, name)


def watch_failed(
    error: BaseException, resource: str, namespace: str, name: str, server: str
) -> KruiseApiError:
    """What a watch that cannot go on raises, from either hook."""
    if isinstance(error, (ApiException, AsyncApiException)):
        return explain(error, "watch", resource, namespace, name)
    return unreachable(error, "watch", resource, namespace, name, server)


def unreachable(
    error: BaseException, verb: str, resource: str, namespace: str, name: str, server: str
) -> KruiseApiError:
    """A call that found no API server to answer it (refused, timed out, cut), after the retries."""
    target = f'{resource} "{name}"' if name else resource
    return KruiseApiError(
        f"{verb} {target} in namespace {namespace!r} failed: cannot reach the Kubernetes API server "
        f"{server} (still failing after retries): {describe(error)}. Check that the connection names that "
        "server, that this machine reaches it (network, proxy, firewall) and that it is healthy "
        "(kubectl get --raw='/readyz?verbose')"
    )


def retry_delay(log: Any, policy: RetryPolicy, what: str, retry: int, error: BaseException) -> float:
    """How long to wait before retry `retry` of `what`, logged as a warning in the task log."""
    delay = policy.delay(retry, getattr(error, "status", None), getattr(error, "headers", None))
    log.warning(
        "Kubernetes API: %s failed (%s); retry %d of %d in %.2fs",
        what,
        describe(error),
        retry,
        policy.attempts - 1,
        delay,
    )
    return delay


def raise_for_status(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    """Without preloading, kubernetes_asyncio hands back an error response as it is: raise it as the API's
    exception, its Status body and headers kept (for `explain`'s message, `RetryPolicy`'s Retry-After)."""
    if status < 300:
        return
    error = AsyncApiException(status=status)
    error.body, error.headers = body, headers
    error.reason = api_message(error) or body[:200].decode(errors="replace")
    raise error
