"""`KruiseHook`: the cluster calls a chain needs, over cncf.kubernetes' hooks and `kubernetes` connection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook, KubernetesHook
from airflow.sdk.exceptions import AirflowFailException
from kubernetes import watch
from kubernetes.client import ApiException

from airflow_kruise_chain.core.driver import ConflictError

KRUISE_GROUP = "apps.kruise.io"
KRUISE_VERSION = "v1alpha1"
SMP = "application/strategic-merge-patch+json"

GATE_HELP = (
    "OpenKruise refused the ImagePullJob because its ImagePullJobGate feature gate is off (the default). "
    'Enable it with `helm upgrade kruise openkruise/kruise --set featureGates="ImagePullJobGate=true"` '
    "(or add ImagePullJobGate=true to the kruise-manager --feature-gates flag), or set "
    '`prewarm=False` / `on_prewarm_unavailable="skip"` on the chain to run without prewarming.'
)


class KruiseApiError(RuntimeError):
    """A Kubernetes API call failed; the message says which call, on what, and what to do."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PrewarmUnavailableError(KruiseApiError, AirflowFailException):
    """OpenKruise's ImagePullJobGate is off, so images cannot be prewarmed.

    An `AirflowFailException`: retrying cannot help until the cluster's configuration changes.
    """


def _explain(e: ApiException, verb: str, resource: str, namespace: str, name: str = "") -> KruiseApiError:
    try:
        message = json.loads(e.body or "{}").get("message") or e.reason
    except (TypeError, ValueError):
        message = e.reason
    target = f'{resource} "{name}"' if name else resource
    if e.status == 403 and "ImagePullJobGate" in str(message):
        return PrewarmUnavailableError(f"{GATE_HELP} (API said: {message})", 403)
    if e.status == 403:
        return KruiseApiError(
            f"permission denied: cannot {verb} {target} in namespace {namespace!r}. Grant the verb "
            f"'{verb}' on '{resource}' to the connection's identity (see the Role in README.md). API said: "
            f"{message}",
            403,
        )
    if e.status == 404 and resource in ("imagepulljobs", "containerrecreaterequests") and not name:
        return KruiseApiError(
            f"the cluster does not serve apps.kruise.io/{resource}: install OpenKruise >= 1.8 "
            f"(https://openkruise.io/docs/installation). API said: {message}",
            404,
        )
    return KruiseApiError(
        f"{verb} {target} in namespace {namespace!r} failed ({e.status}): {message}", e.status
    )


class KruiseHook(KubernetesHook):
    """Pods, logs, ImagePullJobs and ContainerRecreateRequests, as plain API dicts.

    Connection: the cncf.kubernetes `kubernetes` connection type (`kubernetes_conn_id`, default
    `kubernetes_default`), or `config_file` pointing at a kubeconfig.
    """

    hook_name = "Kubernetes (OpenKruise chain)"

    def _raw(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = call(*args, _preload_content=False, **kwargs)
        return json.loads(resp.data)

    # -- pods and config maps ------------------------------------------------------------------------
    def read_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        """The pod as a dict, or None if it does not exist."""
        try:
            return self._raw(self.core_v1_client.read_namespaced_pod, name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise _explain(e, "get", "pods", namespace, name) from e

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        try:
            return self._raw(
                self.core_v1_client.list_namespaced_pod, namespace, label_selector=label_selector
            )["items"]
        except ApiException as e:
            raise _explain(e, "list", "pods", namespace) from e

    def create(self, kind: str, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        """Create a Pod or ConfigMap; an existing one of that name is returned as it is (idempotent)."""
        create, read, resource = {
            "Pod": (
                self.core_v1_client.create_namespaced_pod,
                self.core_v1_client.read_namespaced_pod,
                "pods",
            ),
            "ConfigMap": (
                self.core_v1_client.create_namespaced_config_map,
                self.core_v1_client.read_namespaced_config_map,
                "configmaps",
            ),
        }[kind]
        name = body["metadata"]["name"]
        try:
            return self._raw(create, namespace, body)
        except ApiException as e:
            if e.status != 409:
                raise _explain(e, "create", resource, namespace, name) from e
        try:
            return self._raw(read, name, namespace)
        except ApiException as e:
            raise _explain(e, "get", resource, namespace, name) from e

    def patch_pod(self, name: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Strategic-merge patch; a `metadata.resourceVersion` in the body makes it conditional (409)."""
        try:
            return self._raw(
                self.core_v1_client.patch_namespaced_pod, name, namespace, body, _content_type=SMP
            )
        except ApiException as e:
            if e.status == 409:
                raise ConflictError(f'pods "{name}" changed since it was read (409 Conflict)') from e
            raise _explain(e, "patch", "pods", namespace, name) from e

    def delete(self, kind: str, name: str, namespace: str, grace_period_seconds: int | None = None) -> bool:
        """Delete a Pod or ConfigMap; False if it was already gone."""
        delete, resource = {
            "Pod": (self.core_v1_client.delete_namespaced_pod, "pods"),
            "ConfigMap": (self.core_v1_client.delete_namespaced_config_map, "configmaps"),
        }[kind]
        try:
            delete(name, namespace, grace_period_seconds=grace_period_seconds)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise _explain(e, "delete", resource, namespace, name) from e

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[dict[str, Any] | None]:
        """Yield the pod as it changes (None once deleted), for at most `timeout_seconds`.

        Without `resource_version` the watch starts with the pod as it is now (nothing if it is already gone);
        with it, from that version on, so a change made since that read (a deletion) is not missed. Ends early
        when that version is too old (410 Gone): the caller reads the pod again.
        """
        w = watch.Watch()
        extra = {"resource_version": resource_version} if resource_version else {}
        try:
            for ev in w.stream(
                self.core_v1_client.list_namespaced_pod,
                namespace,
                field_selector=f"metadata.name={name}",
                timeout_seconds=timeout_seconds,
                **extra,
            ):
                yield None if ev["type"] == "DELETED" else ev["raw_object"]
        except ApiException as e:
            if e.status == 410 and resource_version:
                return
            raise _explain(e, "watch", "pods", namespace, name) from e
        finally:
            w.stop()

    def read_log(
        self,
        name: str,
        namespace: str,
        container: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
    ) -> str:
        try:
            resp = self.core_v1_client.read_namespaced_pod_log(
                name,
                namespace,
                container=container,
                tail_lines=tail_lines,
                previous=previous,
                _preload_content=False,
            )
            return resp.data.decode(errors="replace")
        except ApiException as e:
            if e.status == 400:
                return ""
            raise _explain(e, "get", "pods/log", namespace, name) from e

    def follow_log(
        self, name: str, namespace: str, container: str, *, since_time: str | None = None
    ) -> Iterator[str]:
        """Yield the container's log lines live until the container stops (or the stream is cut)."""
        try:
            resp = self.core_v1_client.read_namespaced_pod_log(
                name,
                namespace,
                container=container,
                follow=True,
                _preload_content=False,
                **({"since_time": since_time} if since_time else {}),
            )
        except ApiException as e:
            if e.status == 400:  # not started yet, or gone
                return
            raise _explain(e, "get", "pods/log", namespace, name) from e
        buf = b""
        try:
            for chunk in resp.stream(amt=4096, decode_content=False):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    yield line.decode(errors="replace")
            if buf:
                yield buf.decode(errors="replace")
        finally:
            resp.release_conn()

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
        """Create an ImagePullJob or ContainerRecreateRequest; an existing one of that name is returned."""
        name = body["metadata"]["name"]
        try:
            return self.custom_object_client.create_namespaced_custom_object(
                KRUISE_GROUP, KRUISE_VERSION, namespace, plural, body
            )
        except ApiException as e:
            if e.status != 409:
                raise _explain(e, "create", plural, namespace) from e
        got = self.get_kruise(plural, name, namespace)
        if got is None:
            raise KruiseApiError(f'{plural} "{name}" vanished while being created; try again')
        return got

    def get_kruise(self, plural: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            return self.custom_object_client.get_namespaced_custom_object(
                KRUISE_GROUP, KRUISE_VERSION, namespace, plural, name
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise _explain(e, "get", plural, namespace, name) from e

    def watch_kruise(
        self, plural: str, name: str, namespace: str, timeout_seconds: int
    ) -> Iterator[dict[str, Any]]:
        """Yield the Kruise object each time it changes, for at most `timeout_seconds`."""
        w = watch.Watch()
        try:
            for ev in w.stream(
                self.custom_object_client.list_namespaced_custom_object,
                KRUISE_GROUP,
                KRUISE_VERSION,
                namespace,
                plural,
                field_selector=f"metadata.name={name}",
                timeout_seconds=timeout_seconds,
            ):
                if ev["type"] != "DELETED":
                    yield ev["object"]
        except ApiException as e:
            raise _explain(e, "watch", plural, namespace, name) from e
        finally:
            w.stop()

    def delete_kruise(self, plural: str, name: str, namespace: str) -> bool:
        try:
            self.custom_object_client.delete_namespaced_custom_object(
                KRUISE_GROUP, KRUISE_VERSION, namespace, plural, name
            )
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise _explain(e, "delete", plural, namespace, name) from e


class AsyncKruiseHook(AsyncKubernetesHook):
    """The async calls a trigger needs: read and watch the chain pod."""

    async def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> AsyncIterator[dict[str, Any] | None]:
        """Yield the pod as it changes (None once deleted), for at most `timeout_seconds`.

        Without `resource_version` the watch starts with the pod as it is now (nothing at all if it does not
        exist: read it first); with it, from that version on. Ends early when that version is too old (410).
        """
        from kubernetes_asyncio import client as async_client
        from kubernetes_asyncio import watch as async_watch

        extra = {"resource_version": resource_version} if resource_version else {}
        async with self.get_conn() as api:
            v1 = async_client.CoreV1Api(api)
            w = async_watch.Watch()
            try:
                async with w.stream(
                    v1.list_namespaced_pod,
                    namespace,
                    field_selector=f"metadata.name={name}",
                    timeout_seconds=timeout_seconds,
                    **extra,
                ) as stream:
                    async for ev in stream:
                        yield None if ev["type"] == "DELETED" else ev["raw_object"]
            except async_client.ApiException as e:
                if e.status == 410 and resource_version:
                    return
                raise KruiseApiError(
                    f'watch pods "{name}" in namespace {namespace!r} failed ({e.status}): {e.reason}',
                    e.status,
                ) from e

    async def read_pod(self, name: str, namespace: str) -> dict[str, Any] | None:
        from kubernetes_asyncio import client as async_client

        async with self.get_conn() as api:
            try:
                resp = await async_client.CoreV1Api(api).read_namespaced_pod(
                    name, namespace, _preload_content=False
                )
                body = json.loads(await resp.read())
            except async_client.ApiException as e:
                if e.status == 404:
                    return None
                raise KruiseApiError(
                    f'get pods "{name}" in namespace {namespace!r} failed ({e.status}): {e.reason}', e.status
                ) from e
            # without preloading, kubernetes_asyncio hands back an error response as it is: a Status object
            if body.get("kind") == "Status":
                if body.get("code") == 404:
                    return None
                raise KruiseApiError(
                    f'get pods "{name}" in namespace {namespace!r} failed ({body.get("code")}): '
                    f"{body.get('message') or body.get('reason')}",
                    body.get("code"),
                )
            return body
