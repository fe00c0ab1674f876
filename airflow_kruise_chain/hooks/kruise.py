"""`KruiseHook`: the cluster calls a chain needs, over cncf.kubernetes' hooks and `kubernetes` connection.

Transient API failures (HTTP 429, 500, 502, 503, 504 and lost connections) are retried with bounded
exponential back-off (`RetryPolicy`), honouring the server's Retry-After, and each retry is logged. A call is
retried after a failure that the server may have acted on only when replaying it is safe: reads, watches and
log reads; creates, whose names are deterministic (a replay that finds the object returns it once it is
checked to be this chain's); deletes (a replay that finds it gone counts as done); and pod patches guarded by
`metadata.resourceVersion` (a replay of a patch that went through gets 409 and the driver plans again). A 429
is always retried: the server refused it before doing anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from kubernetes import watch
from kubernetes.client import ApiException
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_kruise_chain.core.kruise import KRUISE_GROUP, KRUISE_VERSION
from airflow_kruise_chain.core.lines import LineSplitter
from airflow_kruise_chain.core.podview import ChainPod, snapshot
from airflow_kruise_chain.hooks.retry import (
    CONNECTION_ERRORS,
    KruiseApiError,
    PrewarmUnavailableError,
    RetryPolicy,
    WatchResume,
    explain,
    gives_up,
    is_conditional,
    raise_for_status,
    read_timeout,
    resize_failed,
    retry_delay,
    unreachable,
    watch_failed,
    write_failed,
)
from airflow_kruise_chain.hooks.timeouts import ApiTimeouts, bound, log_stream_end

if TYPE_CHECKING:
    from airflow_kruise_chain.hooks.podexec import PodExec

__all__ = ["AsyncKruiseHook", "KruiseApiError", "KruiseHook", "PrewarmUnavailableError", "RetryPolicy"]

T = TypeVar("T")

SMP = "application/strategic-merge-patch+json"


def _foreign_labels(body: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    """The labels `body` sets that `existing` does not have with the same value."""
    want = (body.get("metadata") or {}).get("labels") or {}
    have = (existing.get("metadata") or {}).get("labels") or {}
    return sorted(k for k, v in want.items() if have.get(k) != v)


class KruiseHook(KubernetesHook):
    """Pods, logs and ImagePullJobs, with transient failures retried (see the module's docstring). The chain
    pod as read, watched, patched or resized is a `ChainPod` (the one place the API's answer becomes one);
    other objects are the API's JSON dicts.

    Connection: the cncf.kubernetes `kubernetes` connection type (`kubernetes_conn_id`, default
    `kubernetes_default`), or `config_file` pointing at a kubeconfig.
    """

    conn_type = "kruise_chain"
    hook_name = "Kubernetes (OpenKruise chain)"

    def __init__(
        self,
        *args: Any,
        retry_policy: RetryPolicy | None = None,
        api_timeouts: ApiTimeouts | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.retry_policy = retry_policy or RetryPolicy()
        self.api_timeouts = api_timeouts or ApiTimeouts()

    def get_conn(self) -> Any:
        """cncf.kubernetes' API client, every request bounded (`hooks/timeouts.py`)."""
        return bound(super().get_conn(), self.api_timeouts)

    @property
    def server(self) -> str:
        """The API server's address, for the error that says it did not answer."""
        return str(self.api_client.configuration.host)

    def test_connection(self) -> tuple[bool, str]:
        """The connection form's Test button: `kruise-chain check` (`preflight/`) in the connection's
        namespace (extra `namespace`, else ``default``), without the features of extra `preflight_without`
        (comma-separated); False when a check fails or cannot tell."""
        from airflow_kruise_chain.preflight import check, summary

        without = [f.strip() for f in str(self._get_field("preflight_without") or "").split(",") if f.strip()]
        try:
            namespace = self._get_field("namespace") or "default"
            return summary(check(self, namespace, without=without, probe_timeout=60))
        except Exception as e:  # the form shows the message
            return False, f"{type(e).__name__}: {e}"

    # -- retrying ------------------------------------------------------------------------------------
    def _call(
        self,
        verb: str,
        resource: str,
        namespace: str,
        name: str,
        call: Callable[[bool], T],
        *,
        replay_safe: bool = True,
    ) -> T:
        """Run `call`, retrying transient failures; `call(replayed)` learns whether an earlier try may have
        reached the server. Any other ApiException is raised as it is, for the caller to interpret; a
        connection failure that outlasts the retries becomes a `KruiseApiError`."""
        replayed = False
        retry = timeouts = 0
        while True:
            try:
                return call(replayed)
            except (ApiException, *CONNECTION_ERRORS) as e:
                retry += 1
                timeouts += read_timeout(e)
                if gives_up(self.retry_policy, retry, timeouts, e, replay_safe):
                    if isinstance(e, ApiException):
                        raise
                    raise unreachable(e, verb, resource, namespace, name, self.server) from e
                self._back_off(f"{verb} {resource} {name}".strip(), retry, e)
                replayed = replayed or getattr(e, "status", None) != 429

    def _back_off(self, what: str, retry: int, error: BaseException) -> None:
        time.sleep(retry_delay(self.log, self.retry_policy, what, retry, error))

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = call(*args, _preload_content=False, **kwargs)
        return json.loads(resp.data)

    def _watch(
        self,
        resource: str,
        name: str,
        namespace: str,
        list_call: Callable[..., Any],
        args: tuple[Any, ...],
        timeout_seconds: int,
        resource_version: str | None,
    ) -> Iterator[dict[str, Any]]:
        """Watch events of the object `name` for at most `timeout_seconds`. A watch that fails transiently
        is opened again from the last version seen, so no change is missed or seen twice; ends early when
        that version is too old (410 Gone): the caller reads the object again."""
        resume = WatchResume(self.retry_policy, timeout_seconds, time.monotonic(), resource_version)
        while (request := resume.request(time.monotonic())) is not None:
            w = watch.Watch()
            try:
                for ev in w.stream(list_call, *args, field_selector=f"metadata.name={name}", **request):
                    resume.seen(w.resource_version)
                    yield ev
                return
            except (ApiException, *CONNECTION_ERRORS) as e:
                verdict = resume.after(e)
                if verdict == "too old":
                    return
                if verdict == "give up":
                    raise watch_failed(e, resource, namespace, name, self.server) from e
                self._back_off(f"watch {resource} {name}", resume.retries, e)
            finally:
                w.stop()

    # -- pods ---------------------------------------------------------------------------------------
    def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        """The pod's snapshot, or None if it does not exist."""
        return snapshot(self._read_pod(name, namespace))

    def _read_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        read = self.core_v1_client.read_namespaced_pod
        return self._get_or_none("pods", namespace, name, lambda: self._raw(read, name, namespace))

    def _get_or_none(self, resource: str, namespace: str, name: str, read: Callable[[], T]) -> T | None:
        """`read()`, a read of one object retried as any call, or None when the object does not exist."""
        try:
            return self._call("get", resource, namespace, name, lambda _: read())
        except ApiException as e:
            if e.status == 404:
                return None
            raise explain(e, "get", resource, namespace, name) from e

    def pod_events(self, namespace: str, uid: str) -> list[dict[str, Any]] | None:
        """The events about the pod of `uid` (core `wait_started` reads why it does not start); None when the
        identity may not list events."""
        selector = f"involvedObject.uid={uid}"
        list_events = self.core_v1_client.list_namespaced_event
        try:
            body = self._call(
                "list",
                "events",
                namespace,
                "",
                lambda _: self._raw(list_events, namespace, field_selector=selector),
            )
        except ApiException as e:
            if e.status == 403:
                return None
            raise explain(e, "list", "events", namespace) from e
        return list(body.get("items") or [])

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        try:
            return self._call(
                "list",
                "pods",
                namespace,
                "",
                lambda _: self._raw(
                    self.core_v1_client.list_namespaced_pod, namespace, label_selector=label_selector
                ),
            )["items"]
        except ApiException as e:
            raise explain(e, "list", "pods", namespace) from e

    def create_pod(self, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create the pod `body`; one that already exists under its name is returned as it is, if it carries
        the labels `body` sets (it is this chain's: an earlier try's, or this call's own create that
        succeeded though its answer was lost), else KruiseApiError."""
        name = body["metadata"]["name"]
        try:
            return self._call(
                "create",
                "pods",
                namespace,
                name,
                lambda _: self._raw(self.core_v1_client.create_namespaced_pod, namespace, body),
            )
        except ApiException as e:
            if e.status != 409:
                raise explain(e, "create", "pods", namespace, name) from e
        return self._adopt("pods", namespace, body, self._read_pod(name, namespace))

    def _adopt(
        self, resource: str, namespace: str, body: dict[str, Any], existing: dict[str, Any] | None
    ) -> dict[str, Any]:
        """`existing`, found under the name of `body` by a create that got 409, if it is this chain's."""
        if existing is None:
            raise KruiseApiError(
                f'{resource} "{body["metadata"]["name"]}" vanished while being created; try again'
            )
        self._check_mine(resource, namespace, body, existing)
        return existing

    def _check_mine(
        self, resource: str, namespace: str, body: dict[str, Any], existing: dict[str, Any]
    ) -> None:
        foreign = _foreign_labels(body, existing)
        if foreign:
            name = body["metadata"]["name"]
            raise KruiseApiError(
                f'{resource} "{name}" already exists in namespace {namespace!r} but is not this chain\'s: '
                f"its label(s) {', '.join(foreign)} differ. Delete it, or give the chain another name.",
                409,
            )
        self.log.info(
            "%s %s/%s already exists (created earlier): using it",
            resource,
            namespace,
            body["metadata"]["name"],
        )

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        """Strategic-merge patch, answering the patched pod's snapshot; a `metadata.resourceVersion` in the
        body makes it conditional (409), and only a conditional patch is retried after a failure the server
        may have acted on."""
        try:
            patched = self._call(
                "patch",
                "pods",
                namespace,
                name,
                lambda _: self._raw(
                    self.core_v1_client.patch_namespaced_pod, name, namespace, body, _content_type=SMP
                ),
                replay_safe=is_conditional(body),
            )
        except ApiException as e:
            raise write_failed(e, "patch", "pods", namespace, name) from e
        return ChainPod.of(patched)

    def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        """Strategic-merge patch of the pod's `resize` subresource, answering the pod's snapshot:
        ResizeUnsupportedError on 404 (Kubernetes < 1.33, InPlacePodVerticalScaling off), ResizeRefusedError
        on 422, ConflictError on 409 (stale rv)."""
        resize = self.core_v1_client.patch_namespaced_pod_resize
        try:
            resized = self._call(
                "patch",
                "pods/resize",
                namespace,
                name,
                lambda _: self._raw(resize, name, namespace, body, _content_type=SMP),
                replay_safe=True,
            )
        except ApiException as e:
            raise resize_failed(e, namespace, name) from e
        return ChainPod.of(resized)

    def serves_resize(self) -> bool:
        """Whether the API server serves `pods/resize` (API discovery of core/v1)."""
        resources = self._call(
            "get",
            "api discovery",
            "",
            "",
            lambda _: self._raw(self.core_v1_client.get_api_resources),
            replay_safe=True,
        )
        return any(r.get("name") == "pods/resize" for r in resources.get("resources") or [])

    def delete_pod(self, name: str, namespace: str, grace_period_seconds: int | None = None) -> bool:
        """Delete the pod; False if it was already gone."""
        return self._delete(
            "pods",
            namespace,
            name,
            lambda: self.core_v1_client.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_period_seconds
            ),
        )

    def _delete(self, resource: str, namespace: str, name: str, delete: Callable[[], Any]) -> bool:
        """Run `delete`; False if the object was already gone (a retry that finds it gone after an attempt
        that may have deleted it counts as deleted)."""

        def attempt(replayed: bool) -> bool:
            try:
                delete()
                return True
            except ApiException as e:
                if e.status == 404:
                    return replayed
                raise

        try:
            return self._call("delete", resource, namespace, name, attempt)
        except ApiException as e:
            raise explain(e, "delete", resource, namespace, name) from e

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]:
        """Yield the pod's snapshot as it changes (None once deleted), for at most `timeout_seconds`.

        Without `resource_version` the watch starts with the pod as it is now (nothing if it is already gone);
        with it, from that version on, so a change made since that read (a deletion) is not missed. Ends early
        when that version is too old (410 Gone): the caller reads the pod again.
        """
        for ev in self._watch(
            "pods",
            name,
            namespace,
            self.core_v1_client.list_namespaced_pod,
            (namespace,),
            timeout_seconds,
            resource_version,
        ):
            yield None if ev["type"] == "DELETED" else ChainPod.of(ev["raw_object"])

    def read_log(
        self,
        name: str,
        namespace: str,
        container: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        def read(_: bool) -> str:
            resp = self.core_v1_client.read_namespaced_pod_log(
                name,
                namespace,
                container=container,
                tail_lines=tail_lines,
                previous=previous,
                _preload_content=False,
            )
            return resp.data.decode(errors="replace")

        try:
            return self._call("get", "pods/log", namespace, name, read)
        except ApiException as e:
            if e.status == 400:
                return ""
            raise explain(e, "get", "pods/log", namespace, name) from e

    def follow_log(
        self, name: str, namespace: str, container: str, *, since_seconds: int | None = None
    ) -> Iterator[str]:
        """Yield the container's log lines live until the container stops or the stream is cut (a lost
        connection ends it too: the caller reads the pod to tell which). Linear in the log's size; a line
        longer than 64 KiB keeps its start and end with a note of how much was cut (`LineSplitter`)."""
        try:
            resp = self._call(
                "get",
                "pods/log",
                namespace,
                name,
                lambda _: self.core_v1_client.read_namespaced_pod_log(
                    name,
                    namespace,
                    container=container,
                    follow=True,
                    _preload_content=False,
                    **({"since_seconds": since_seconds} if since_seconds else {}),
                ),
            )
        except ApiException as e:
            if e.status == 400:  # not started yet, or gone
                return
            raise explain(e, "get", "pods/log", namespace, name) from e
        lines = LineSplitter()
        try:
            for chunk in resp.stream(amt=65536, decode_content=False):
                yield from lines.feed(chunk)
        except CONNECTION_ERRORS as e:
            log_stream_end(self.log, e, f"{namespace}/{name} {container}", self.api_timeouts.idle_stream)
            return
        finally:
            resp.release_conn()
        last = lines.finish()
        if last is not None:
            yield last

    def exec_in_pod(
        self, name: str, namespace: str, container: str, command: list[str], stdin: bytes, timeout: float
    ) -> tuple[int, str]:
        """Run `command` in the pod's `container` over `pods/exec` (`hooks/podexec.py`): (exit code, output).
        Not retried: its caller has another path (the fast go's annotation). See `open_exec_in_pod`."""
        return self.open_exec_in_pod(name, namespace, container, command).send(stdin, timeout)

    def open_exec_in_pod(self, name: str, namespace: str, container: str, command: list[str]) -> PodExec:
        """Start `command` in the pod's `container` over `pods/exec`, its stdin open: the returned `PodExec`
        gives it its stdin and waits for its end (`send`), or ends it (`close`). On an API client of its own:
        the official client's `stream` swaps its client's request method while it runs, which would send
        another thread's requests on this hook over the WebSocket."""
        from kubernetes.client import ApiClient

        from airflow_kruise_chain.hooks.podexec import open_exec

        client = ApiClient(self.core_v1_client.api_client.configuration)
        return open_exec(client, name, namespace, container, command, self.api_timeouts)

    def ensure_runner_configmap(self, namespace: str) -> bool:
        """This provider's stage runner ConfigMap in `namespace`, read, made when missing and checked
        (`hooks/runnerconfigmap.py`): whether this call made it; `RunnerUnavailableError` naming the fix."""
        from airflow_kruise_chain.hooks.runnerconfigmap import ensure_runner_configmap

        return ensure_runner_configmap(self, namespace)

    def pod_metrics(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The pod's metrics.k8s.io PodMetrics, or None when no metrics server answers."""
        try:
            return self.custom_object_client.get_namespaced_custom_object(
                "metrics.k8s.io", "v1beta1", namespace, "pods", name
            )
        except ApiException:
            return None

    # -- OpenKruise ----------------------------------------------------------------------------------
    def create_kruise(self, plural: str, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create an ImagePullJob; one that already exists under that name is returned, if it is this chain's
        (its labels)."""
        name = body["metadata"]["name"]
        try:
            return self._call(
                "create",
                plural,
                namespace,
                name,
                lambda _: self.custom_object_client.create_namespaced_custom_object(
                    KRUISE_GROUP, KRUISE_VERSION, namespace, plural, body
                ),
            )
        except ApiException as e:
            if e.status != 409:
                raise explain(e, "create", plural, namespace) from e
        got = self.get_kruise(plural, name, namespace)
        return self._adopt(plural, namespace, body, got)

    def get_kruise(self, plural: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The Kruise object, or None if it does not exist."""
        get = self.custom_object_client.get_namespaced_custom_object
        return self._get_or_none(
            plural, namespace, name, lambda: get(KRUISE_GROUP, KRUISE_VERSION, namespace, plural, name)
        )

    def watch_kruise(
        self,
        plural: str,
        name: str,
        namespace: str,
        timeout_seconds: int,
        resource_version: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the Kruise object each time it changes, for at most `timeout_seconds` (from
        `resource_version` on, if given; ends early when it is too old: 410 Gone)."""
        for ev in self._watch(
            plural,
            name,
            namespace,
            self.custom_object_client.list_namespaced_custom_object,
            (KRUISE_GROUP, KRUISE_VERSION, namespace, plural),
            timeout_seconds,
            resource_version,
        ):
            if ev["type"] != "DELETED":
                yield ev["object"]

    def delete_kruise(self, plural: str, name: str, namespace: str) -> bool:
        """Delete the Kruise object; False if it was already gone."""
        return self._delete(
            plural,
            namespace,
            name,
            lambda: self.custom_object_client.delete_namespaced_custom_object(
                KRUISE_GROUP, KRUISE_VERSION, namespace, plural, name
            ),
        )


class AsyncKruiseHook(AsyncKubernetesHook):
    """The async calls a trigger needs: read, watch and resize the chain pod, read and follow its logs, with
    transient failures retried."""

    def __init__(
        self,
        *args: Any,
        retry_policy: RetryPolicy | None = None,
        api_timeouts: ApiTimeouts | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.retry_policy = retry_policy or RetryPolicy()
        self.api_timeouts = api_timeouts or ApiTimeouts()
        self._client: Any = None
        """the API client every call uses within `one_client` (None: a client per call)"""

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[Any]:
        """cncf.kubernetes' API client made for the call, closed after it; within `one_client`, that one."""
        if self._client is not None:
            yield self._client
            return
        async with super().get_conn() as api:
            yield bound(api, self.api_timeouts)

    @contextlib.asynccontextmanager
    async def one_client(self) -> AsyncIterator[AsyncKruiseHook]:
        """Every call made within (reads, resizes, watches, log streams, at once too) uses one API client, its
        connection pool, closed at the end: a client per call costs an SSL context and a TLS handshake each
        (25-50 ms on the local cluster), which a trigger paid between its stage's end and its event."""
        if self._client is not None:  # already within
            yield self
            return
        async with super().get_conn() as api:
            self._client = bound(api, self.api_timeouts)
            try:
                yield self
            finally:
                self._client = None

    async def _back_off(self, what: str, retry: int, error: BaseException) -> None:
        await asyncio.sleep(retry_delay(self.log, self.retry_policy, what, retry, error))

    async def _get_field(self, field_name: str) -> Any:
        """As cncf.kubernetes' async hook, but a `config_file` given to the hook is the kubeconfig, as the
        sync `KubernetesHook` has it (the async hook ignores it and would reach another cluster)."""
        if field_name == "kube_config_path" and self.config_file:
            return self.config_file
        return await super()._get_field(field_name)

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]], *, replay_safe: bool = True) -> T:
        """Await `call`, retrying transient failures (`replay_safe`: repeating it cannot do harm)."""
        retry = timeouts = 0
        while True:
            try:
                return await call()
            except Exception as e:
                retry += 1
                timeouts += read_timeout(e)
                if gives_up(self.retry_policy, retry, timeouts, e, replay_safe):
                    raise
                await self._back_off(what, retry, e)

    async def _answer(
        self,
        verb: str,
        resource: str,
        namespace: str,
        name: str,
        send: Callable[[Any], Awaitable[Any]],
        *,
        replay_safe: bool = True,
    ) -> bytes:
        """The body answered to `send(v1)` (a CoreV1Api call made without preloading), transient failures
        retried as `KruiseHook._call` does; an error status raised as the API's exception, for the caller to
        interpret; a connection failure that outlasts the retries becomes a `KruiseApiError`."""
        from kubernetes_asyncio import client as async_client

        async with self.get_conn() as api:
            v1 = async_client.CoreV1Api(api)

            async def attempt() -> bytes:
                resp = await send(v1)
                answer = await resp.read()
                raise_for_status(resp.status, answer, resp.headers)
                return answer

            try:
                return await self._retrying(f"{verb} {resource} {name}", attempt, replay_safe=replay_safe)
            except CONNECTION_ERRORS as e:
                raise unreachable(e, verb, resource, namespace, name, api.configuration.host) from e

    async def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> AsyncIterator[ChainPod | None]:
        """`KruiseHook.watch_pod` over the async client: the same snapshots, resumption and errors.

        Without `resource_version` the watch starts with the pod as it is now (nothing at all if it does not
        exist: read it first); with it, from that version on. A watch that fails transiently is opened again
        from the last version seen. Ends early when that version is too old (410).
        """
        from kubernetes_asyncio import client as async_client

        loop = asyncio.get_running_loop()
        resume = WatchResume(self.retry_policy, timeout_seconds, loop.time(), resource_version)
        async with self.get_conn() as api:
            v1 = async_client.CoreV1Api(api)
            while (request := resume.request(loop.time())) is not None:
                w = _status_watch()()
                try:
                    async with w.stream(
                        v1.list_namespaced_pod, namespace, field_selector=f"metadata.name={name}", **request
                    ) as stream:
                        async for ev in stream:
                            resume.seen(ev["raw_object"].get("metadata", {}).get("resourceVersion"))
                            yield None if ev["type"] == "DELETED" else ChainPod.of(ev["raw_object"])
                    return
                except (AsyncApiException, *CONNECTION_ERRORS) as e:
                    verdict = resume.after(e)
                    if verdict == "too old":
                        return
                    if verdict == "give up":
                        raise watch_failed(e, "pods", namespace, name, api.configuration.host) from e
                    await self._back_off(f"watch pods {name}", resume.retries, e)

    async def read_pod(self, name: str, namespace: str) -> ChainPod | None:
        """`KruiseHook.read_pod`: the pod's snapshot, or None if it does not exist."""

        def read(v1: Any) -> Awaitable[Any]:
            return v1.read_namespaced_pod(name, namespace, _preload_content=False)

        try:
            return snapshot(json.loads(await self._answer("get", "pods", namespace, name, read)))
        except AsyncApiException as e:
            if e.status == 404:
                return None
            raise explain(e, "get", "pods", namespace, name) from e

    async def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        """`KruiseHook.patch_pod`: the patched pod's snapshot; a `metadata.resourceVersion` in the body makes
        it conditional (`ConflictError` on 409), and only a conditional patch is retried after a failure the
        server may have acted on."""

        def patch(v1: Any) -> Awaitable[Any]:
            return v1.patch_namespaced_pod(name, namespace, body, _content_type=SMP, _preload_content=False)

        try:
            patched = await self._answer(
                "patch", "pods", namespace, name, patch, replay_safe=is_conditional(body)
            )
        except AsyncApiException as e:
            raise write_failed(e, "patch", "pods", namespace, name) from e
        return ChainPod.of(json.loads(patched))

    async def resize_pod(self, name: str, namespace: str, body: dict[str, Any]) -> ChainPod:
        """`KruiseHook.resize_pod` from the triggerer: the same answer and errors; transient failures
        retried (the resize carries the pod's resourceVersion: a replay that went through gets 409)."""

        def resize(v1: Any) -> Awaitable[Any]:
            return v1.patch_namespaced_pod_resize(
                name, namespace, body, _content_type=SMP, _preload_content=False
            )

        try:
            return ChainPod.of(
                json.loads(await self._answer("patch", "pods/resize", namespace, name, resize))
            )
        except AsyncApiException as e:
            raise resize_failed(e, namespace, name) from e

    async def read_log(self, name: str, namespace: str, container: str, *, tail_lines: int) -> str:
        """The last `tail_lines` lines of the container's log ('' when it has none yet); bounded on purpose:
        a triggerer holds many."""

        def read(v1: Any) -> Awaitable[Any]:
            return v1.read_namespaced_pod_log(
                name, namespace, container=container, tail_lines=tail_lines, _preload_content=False
            )

        try:
            return (await self._answer("get", "pods/log", namespace, name, read)).decode(errors="replace")
        except AsyncApiException as e:
            if e.status in (400, 404):
                return ""
            raise explain(e, "get", "pods/log", namespace, name) from e

    async def follow_log(
        self, name: str, namespace: str, container: str, *, since_seconds: int | None = None
    ) -> AsyncIterator[list[str]]:
        """Yield the container's log lines live, in batches (one per chunk read), until the container stops or
        the stream is cut (a lost connection ends it too: the caller reads the pod to tell which). Memory is
        bounded whatever the stage prints: one chunk of at most `LOG_CHUNK` bytes at a time, and a line longer
        than 64 KiB keeps its start and end with a note of how much was cut (`LineSplitter`); the stream is
        read only as fast as the caller takes the batches."""
        import aiohttp
        from kubernetes_asyncio import client as async_client

        async with self.get_conn() as api:
            v1 = async_client.CoreV1Api(api)

            async def open_stream() -> Any:
                resp = await v1.read_namespaced_pod_log(
                    name,
                    namespace,
                    container=container,
                    follow=True,
                    _preload_content=False,
                    **({"since_seconds": since_seconds} if since_seconds else {}),
                )
                if resp.status >= 300:
                    body = await resp.read()
                    resp.release()
                    raise_for_status(resp.status, body, resp.headers)
                return resp

            try:
                resp = await self._retrying(f"get pods/log {name}", open_stream)
            except AsyncApiException as e:
                if e.status in (400, 404):  # not started yet, or gone (the pod too): the caller reads the pod
                    return
                raise explain(e, "get", "pods/log", namespace, name) from e
            except CONNECTION_ERRORS as e:
                raise unreachable(e, "get", "pods/log", namespace, name, api.configuration.host) from e
            lines = LineSplitter()
            try:
                async for chunk in resp.content.iter_chunked(LOG_CHUNK):
                    batch = lines.feed(chunk)
                    if batch:
                        yield batch
            except (*CONNECTION_ERRORS, aiohttp.ClientPayloadError) as e:
                log_stream_end(self.log, e, f"{namespace}/{name} {container}", self.api_timeouts.idle_stream)
                return
            finally:
                resp.close()  # a follow stream is never reused
            last = lines.finish()
            if last is not None:
                yield [last]


@functools.cache
def _status_watch() -> type:
    """kubernetes_asyncio's `Watch`, whose error for a watch request the API server refused keeps that
    Status as its body, as the sync client's does (`explain` reads its message from there); its own puts
    "Reason: message" in the reason, as both clients do for an ERROR event within a stream."""
    from kubernetes_asyncio import watch as async_watch

    class StatusWatch(async_watch.Watch):
        def unmarshal_event(self, data: str | bytes, response_type: str | None) -> Any:
            try:
                return super().unmarshal_event(data, response_type)
            except AsyncApiException as e:
                if e.body is None and "type" not in (status := json.loads(data)):
                    e.body = json.dumps(status)
                raise

    return StatusWatch


LOG_CHUNK = 64 * 1024
"""bytes read from a log stream at a time"""
