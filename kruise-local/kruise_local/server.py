"""The HTTP face of the local cluster: a Kubernetes-compatible REST API on aiohttp."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aiohttp import web

from . import fieldmanager, limits, metrics_api, paging, rbac_registry, reviews
from . import resources as R
from .admission import Admission
from .admission_policy import Attributes
from .authn import serve_token_request
from .decoding import (
    MAX_BODY,
    MAX_URL,
    PATCH_TYPES,
    WARNINGS,
    apply_body,
    check_fields,
    check_preconditions,
    delete_options,
    is_dry_run,
    manager_of,
    parse_json,
    query_bool,
    query_int,
    query_time,
    read_body,
)
from .errors import ApiError, not_served
from .features import Features
from .filters import Filters
from .patch import json_merge_patch, json_patch, strategic_merge_patch
from .rbac import ADMIN_USER, USER_INFO
from .remotecommand import Attached, Exec, serve_attach, serve_exec
from .resources import Resource
from .responses import (
    as_partial,
    as_table,
    error_middleware,
    escape_warning,
    json_response,
    partial_metadata,
    resource_list,
    serve_openapi,
    start_stream,
    version_info,
)
from .selectors import FieldSelector, LabelSelector
from .store import Obj, Store, deep_copy
from .strategies import Registry, before_update, check_resource_version
from .watches import WatchServer


class ContainerLog(Protocol):
    """One container instance's log, as a node serves it."""

    def read(self, **kw: Any) -> bytes: ...

    def follow(self, **kw: Any) -> AsyncIterator[bytes]: ...


class NodeClient(Protocol):
    """What the API server asks of the node a pod runs on, as kube-apiserver asks a kubelet through its client
    (`pkg/kubelet/client`): a container's log, and the pod's metrics (metrics-server's scrape)."""

    def log_source(self, pod: Obj, container: str | None, previous: bool) -> ContainerLog: ...

    def pod_metrics(self, pod: Obj) -> dict[str, Any] | None: ...

    async def start_exec(self, pod: Obj, container: str, argv: list[str], tty: bool) -> Exec: ...

    async def start_attach(
        self, pod: Obj, container: str, stdin: bool, stdout: bool, stderr: bool
    ) -> Attached: ...


class ApiServer:
    """Routes Kubernetes REST paths to the store, the admission chain, the nodes and the metrics."""

    def __init__(
        self,
        store: Store,
        admission: Admission,
        nodes: NodeClient,
        filters: Filters,
        *,
        features: Features,
        bookmark_interval: float,
        request_timeout: float,
        max_requests_in_flight: int,
    ) -> None:
        self.store = store
        self.registry = Registry(store, admission)
        rbac_registry.install(
            self.registry, store, admission, lambda user, info: filters.allows(user, info)[0]
        )
        self.admission = admission
        self.nodes = nodes
        self.filters = filters
        self.features = features
        """the Kubernetes version modelled: `/version`, OpenAPI, discovery and the version-gated rules"""
        self.kubernetes_version = features.version
        self.bookmark_interval = bookmark_interval
        self.websocket_upgrade_create = self.features.websocket_upgrade_create
        """AuthorizePodWebsocketUpgradeCreatePermission (beta, on by default from 1.35)"""
        self.watches = WatchServer(store)
        self.app = web.Application(
            middlewares=[
                error_middleware,
                limits.request_limits(request_timeout, max_requests_in_flight),
            ],
            client_max_size=MAX_BODY + 1024,
            # as the real server's request contexts: a request whose client hung up is cancelled, so
            # abandoned watches and log follows end at once instead of running on to their timeouts
            handler_args={"max_line_size": MAX_URL, "max_field_size": MAX_URL, "handler_cancellation": True},
        )
        self.app.router.add_route("*", "/{tail:.*}", self.dispatch)
        self.app.on_shutdown.append(self._drain)
        self.requests = 0
        self._in_flight: dict[asyncio.Task[Any], web.Request] = {}
        """the requests being served, by the task serving each (until aiohttp has finished the response)"""

    # -- routing -------------------------------------------------------------------------------------
    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        task = asyncio.current_task()
        if task is not None and task not in self._in_flight:
            self._in_flight[task] = request
            task.add_done_callback(self._in_flight.pop)
        self.filters.count_request(request)
        code = 500
        warnings: list[str] = []
        WARNINGS.set(warnings)  # each request runs in its own task, with its own context
        try:
            response = await self.route(request)
            code = response.status
            for warning in warnings:  # unprepared responses only (not watches or logs)
                response.headers.add("Warning", f'299 - "{escape_warning(warning)}"')
            return response
        except ApiError as e:
            code = e.code
            raise
        finally:
            if request.method in ("POST", "PUT", "PATCH", "DELETE"):
                self.filters.audit.append((request.method, request.path, code))

    def in_flight_paths(self) -> list[str]:
        """The requests being served, as `path?query` (on the cluster's loop)."""
        return [str(r.rel_url) for r in self._in_flight.values()]

    async def _drain(self, _app: web.Application) -> None:
        """End every request before aiohttp shuts its connections down, as genericapiserver's graceful
        termination (`preparedGenericAPIServer.RunWithContext`): once no new request is accepted
        (`NotAcceptingNewRequest`; before `on_shutdown` aiohttp has closed the listener and marked the
        connections closing), the in-flight requests drain (`NonLongRunningRequestWaitGroup`; watches, log
        follows and exec streams end: `WatchRequestWaitGroup`), and only then `http.Server.Shutdown` runs.
        Left to aiohttp, a stream still open waits out its `shutdown_timeout`, and one that ends in the loop
        iteration in which that timeout fires makes aiohttp set the result of its cancelled waiter
        (`InvalidStateError`, logged as "Unhandled exception")."""
        self.store.close_watches()
        for task, request in list(self._in_flight.items()):
            if limits.long_running(request):
                task.cancel()
        for _ in range(2):  # what does not end within the grace is cancelled, then waited for again
            pending = list(self._in_flight)
            if not pending:
                return
            _, still = await asyncio.wait(pending, timeout=limits.SHUTDOWN_GRACE)
            for task in still:
                task.cancel()

    async def route(self, request: web.Request) -> web.StreamResponse:
        await self.filters.authenticate(request)
        await self.filters.authorize(request)
        await self.filters.inject_fault(request)
        parts = [p for p in request.path.split("/") if p]
        if parts in (["healthz"], ["readyz"], ["livez"]):
            return web.Response(text="ok")
        if parts[:1] == ["openapi"]:
            return serve_openapi(request, parts[1:], self.features)
        if parts == ["version"]:
            self._discovery_method(request)
            return json_response(version_info(self.features))
        if parts == ["api"]:
            self._discovery_method(request)
            return json_response(
                {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
            )
        if parts == ["apis"]:
            self._discovery_method(request)
            return json_response(self._group_list())
        if parts[:1] == ["api"] and len(parts) >= 2:
            if parts[1] != "v1":
                raise not_served()
            group, version, rest = "", "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            group = parts[1]
            if group not in R.groups():
                raise not_served()
            if len(parts) == 2:
                self._discovery_method(request)
                return json_response(self._group(group))
            version, rest = parts[2], parts[3:]
            if version not in R.groups()[group]:
                raise not_served()
        else:
            raise not_served()
        if not rest:
            self._discovery_method(request)
            gv = f"{group}/{version}" if group else version
            served = [r for r in (*R.STORED, *R.SERVED_ONLY) if r.group == group and version in r.versions]
            return json_response(resource_list(gv, served, self.hidden_subresources()))
        watch_prefix = rest[0] == "watch"
        if watch_prefix:
            rest = rest[1:]
        namespace: str | None = None
        if (
            len(rest) >= 3
            and rest[0] == "namespaces"
            and not (len(rest) == 3 and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise not_served()
        plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
        if group == "metrics.k8s.io":
            return metrics_api.serve(request, self.store, self.nodes, namespace, plural, name)
        review = next((r for r in R.SERVED_ONLY if (r.group, r.plural) == (group, plural)), None)
        if review is not None and version in review.versions and namespace is None and sub is None:
            return await reviews.serve(request, review, name, self.filters)
        res = R.find(group, version, plural)
        if res is None:
            raise not_served()
        if res.namespaced and name is not None and namespace is None:
            raise not_served()
        if not res.namespaced and namespace is not None:
            raise not_served()
        if sub is not None and (
            sub not in res.subresources or f"{plural}/{sub}" in self.hidden_subresources()
        ):
            raise not_served()
        ns = namespace or ""
        method = request.method
        if watch_prefix and method != "GET":
            raise ApiError(405, f"{method} is not allowed on a watch")
        if name is not None and (name in (".", "..") or "%" in name):
            raise ApiError(400, f"Name parameter invalid: \"{name}\": may not be '.' or '..' nor contain '%'")
        if name is None:
            if method == "GET":
                if watch_prefix or query_bool(request, "watch"):
                    return await self._watch(request, res, version, namespace)
                return self._list(request, res, version, namespace)
            if (method == "POST" and namespace is not None) or (method == "POST" and not res.namespaced):
                return await self._create(request, res, version, ns)
            if method == "DELETE":
                return await self._delete_collection(request, res, version, namespace)
            raise ApiError(405, f"{method} is not allowed on the collection {plural}")
        if watch_prefix:
            request_fields = f"metadata.name={name}"
            return await self._watch(request, res, version, namespace, extra_fields=request_fields)
        if sub == "log":
            if method != "GET":
                raise ApiError(405, f"{method} is not allowed on pods/log")
            return await self._log(request, ns, name)
        if sub == "token":
            return await serve_token_request(request, self.store, self.filters.authenticator.issuer, ns, name)
        if sub in ("exec", "attach"):
            if method not in ("GET", "POST"):
                raise ApiError(405, f"{method} is not allowed on pods/{sub}")
            return await self._connect(request, ns, name, sub)
        if sub == "eviction":
            if method != "POST":
                raise ApiError(405, f"{method} is not allowed on pods/eviction")
            return await self._evict(request, ns, name)
        if method == "GET":
            obj = self._out(self.store.get(res, ns, name), res, version)
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            table = as_table(request, res, version, [obj], meta) if sub is None else None
            form = partial_metadata(request) if sub is None else None
            return table or json_response(as_partial(obj, form, is_list=False) if form else obj)
        if method == "PUT":
            return await self._replace(request, res, version, ns, name, sub)
        if method == "PATCH":
            return await self._patch(request, res, version, ns, name, sub)
        if method == "DELETE" and sub is None:
            return await self._delete(request, res, version, ns, name)
        raise ApiError(405, f"{method} is not allowed on {plural}{'/' + sub if sub else ''}")

    def hidden_subresources(self) -> frozenset[str]:
        """Subresources not served (`Features.hidden_subresources`: `pods/resize` without in-place resize)."""
        return self.features.hidden_subresources

    @staticmethod
    def _discovery_method(request: web.Request) -> None:
        if request.method not in ("GET", "HEAD"):
            raise ApiError(405, f"{request.method} is not allowed on {request.path}")

    def _group(self, group: str) -> dict[str, Any]:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in R.groups()[group]]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def _group_list(self) -> dict[str, Any]:
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group(g) for g in R.groups()]}

    @staticmethod
    def _out(obj: Obj, res: Resource, version: str) -> Obj:
        obj["apiVersion"] = res.api_version(version)
        obj["kind"] = res.kind
        return obj

    # -- collection verbs ----------------------------------------------------------------------------
    def _selectors(
        self, request: web.Request, res: Resource, extra_fields: str = ""
    ) -> tuple[LabelSelector, FieldSelector]:
        labels = LabelSelector.parse(request.query.get("labelSelector"))
        text = ",".join(x for x in (request.query.get("fieldSelector", ""), extra_fields) if x)
        return labels, FieldSelector.parse(text or None, set(res.field_selectors))

    def _list(self, request: web.Request, res: Resource, version: str, namespace: str | None) -> web.Response:
        labels, fields = self._selectors(request, res)
        items, meta = paging.page(
            [self._out(o, res, version) for o in self.store.list(res, namespace, labels, fields)],
            limit=query_int(request, "limit"),
            token=request.query.get("continue"),
            resource_version=request.query.get("resourceVersion"),
            current_rv=self.store.resource_version,
            compacted_rv=self.store.compacted(res),
            across_namespaces=res.namespaced and namespace is None,
        )
        table = as_table(request, res, version, items, meta)
        if table is not None:
            return table
        listed = {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version(version),
            "metadata": meta,
            "items": items,
        }
        form = partial_metadata(request)
        return json_response(as_partial(listed, form, is_list=True) if form else listed)

    async def _watch(
        self, request: web.Request, res: Resource, version: str, namespace: str | None, extra_fields: str = ""
    ) -> web.StreamResponse:
        labels, fields = self._selectors(request, res, extra_fields)
        return await self.watches.serve(
            request, res, version, namespace, labels, fields, self.bookmark_interval
        )

    async def _create(
        self, request: web.Request, res: Resource, version: str, namespace: str
    ) -> web.Response:
        return self._create_object(request, res, version, namespace, await read_body(request))

    def _create_object(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        namespace: str,
        body: Any,
        applied: bool = False,
    ) -> web.Response:
        obj = self._check_body(body, res, version)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if not applied:
            check_fields(request, res, version, obj)
        if res.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
            self._require_namespace(namespace)
        if not meta.get("name") and isinstance(meta.get("generateName"), str) and meta["generateName"]:
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        for server_owned in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            meta.pop(server_owned, None)
        dry_run = is_dry_run(request, "CreateOptions")
        self.registry[res].validate_create(obj)
        if not applied:
            fieldmanager.update(res, version, None, obj, manager_of(request))
        self._admit_policies(request, "CREATE", res, version, "", obj, None, dry_run)
        if dry_run:  # checked as a real create is, but not stored
            name = meta.get("name") if isinstance(meta.get("name"), str) else ""
            if self.store.peek(res, namespace, name) is not None:
                raise ApiError(
                    409,
                    f'{res.plural}{"." + res.group if res.group else ""} "{name}" already exists',
                    reason="AlreadyExists",
                    kind=res.plural,
                    name=name,
                    group=res.group,
                )
            return json_response(self._out(obj, res, version), 201)
        limits.check_object_size(obj)
        created = self.store.create(res, obj)
        return json_response(self._out(created, res, version), 201)

    def _require_namespace(self, namespace: str) -> None:
        ns = self.store.peek(R.NAMESPACES, "", namespace)
        if ns is None:
            raise ApiError(404, f'namespaces "{namespace}" not found', kind="namespaces", name=namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f"unable to create new content in namespace {namespace} because it is being terminated",
                reason="Forbidden",
            )

    @staticmethod
    def _check_body(body: Any, res: Resource, version: str) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, f"the body of the request must be a JSON object (a {res.kind})")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if kind not in (None, res.kind) or api_version not in (None, res.api_version(version)):
            raise ApiError(
                400,
                f"the API version in the data ({api_version}) and kind ({kind}) do not match the expected "
                f"{res.api_version(version)} {res.kind}",
            )
        return body

    async def _delete_collection(
        self, request: web.Request, res: Resource, version: str, namespace: str | None
    ) -> web.Response:
        labels, fields = self._selectors(request, res)
        grace, pre, dry_run = await self._read_delete_options(request)
        chosen = self.store.list(res, namespace, labels, fields)
        for obj in chosen:  # all or nothing: every precondition holds before anything is deleted
            check_preconditions(pre, obj["metadata"])
        for obj in chosen:
            self._admit_policies(request, "DELETE", res, version, "", None, obj, bool(dry_run))
        gone = []
        for obj in chosen:
            meta = obj["metadata"]
            if not dry_run:
                obj = self.registry[res].delete(meta.get("namespace", ""), meta["name"], grace)
            gone.append(self._out(obj, res, version))
        return json_response(
            {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version(version),
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": gone,
            }
        )

    # -- item verbs ----------------------------------------------------------------------------------
    async def _replace(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        body = self._check_body(await read_body(request), res, version)
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(400, "metadata must be an object")
        if meta.get("name") not in (None, name):
            raise ApiError(
                400,
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        if res.namespaced and meta.get("namespace") not in (None, "", ns):
            raise ApiError(
                400, "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        return self._write(request, res, version, ns, name, sub, lambda old: body)

    async def _patch(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
        kind = PATCH_TYPES.get(ctype)
        if kind == "apply":
            return await self._apply(request, res, version, ns, name, sub)
        if request.query.get("force") is not None:
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: '
                "may not be specified for non-apply patch",
                reason="Invalid",
            )
        if kind is None:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{', '.join(PATCH_TYPES)}",
                reason="UnsupportedMediaType",
            )
        body = await read_body(request)

        def apply(old: Obj) -> Obj:
            if kind == "json":
                return json_patch(old, body)
            if not isinstance(body, dict):
                raise ApiError(400, "a merge patch must be a JSON object")
            if kind == "merge":
                return json_merge_patch(old, body)
            return strategic_merge_patch(old, body)

        return self._write(request, res, version, ns, name, sub, apply)

    async def _apply(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str, sub: str | None
    ) -> web.Response:
        """Server-side apply (`application/apply-patch+yaml`): creates the object or merges the config into
        it, with the field manager's ownership and conflicts (`fieldmanager.py`)."""
        manager = request.query.get("fieldManager")
        if not manager:
            raise ApiError(
                422,
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: '
                "is required for apply patch",
                reason="Invalid",
            )
        if sub is not None:
            raise ApiError(
                415,
                f"apply is served for {res.plural} only, not {res.plural}/{sub}",
                reason="UnsupportedMediaType",
            )
        force = query_bool(request, "force")
        config = apply_body(await request.read(), res, version)
        check_fields(request, res, version, config)
        meta = config["metadata"]
        if meta.get("name") not in (None, name) or (
            res.namespaced and meta.get("namespace") not in (None, "", ns)
        ):
            raise ApiError(
                400, f"the name or namespace of the applied object does not match the URL ({ns}/{name})"
            )
        meta["name"] = name
        if self.store.peek(res, ns, name) is None:
            created = fieldmanager.apply(res, version, None, config, manager, force)
            return self._create_object(request, res, version, ns, created, applied=True)
        return self._write(
            request,
            res,
            version,
            ns,
            name,
            sub,
            lambda old: fieldmanager.apply(res, version, old, config, manager, force),
            track=False,
        )

    def _write(
        self,
        request: web.Request,
        res: Resource,
        version: str,
        ns: str,
        name: str,
        sub: str | None,
        change: Callable[[Obj], Any],
        track: bool = True,
    ) -> web.Response:
        dry_run = is_dry_run(request, "UpdateOptions" if request.method == "PUT" else "PatchOptions")
        old = self.store.get(res, ns, name)
        new = change(deep_copy(old))
        if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
            raise ApiError(400, f"the result is not a valid {res.kind} object")
        new["metadata"]["name"], new["apiVersion"], new["kind"] = name, old["apiVersion"], old["kind"]
        if res.namespaced:
            new["metadata"]["namespace"] = ns
        check_resource_version(res, name, old, new)
        before_update(old, new)
        strategy = self.registry[res]
        if sub is not None:
            new = strategy.update_subresource(sub, old, new)
        else:
            if track:
                check_fields(request, res, version, new)
            strategy.prepare_for_update(old, new)
            strategy.validate_update(old, new)
            if track:
                fieldmanager.update(res, version, old, new, manager_of(request))
        self._admit_policies(request, "UPDATE", res, version, sub or "", new, old, dry_run)
        if dry_run:  # checked as a real update is, but not stored
            new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            return json_response(self._out(new, res, version))
        limits.check_object_size(new)
        stored = self.store.update(res, new)
        return json_response(self._out(stored, res, version))

    def _admit_policies(
        self,
        request: web.Request,
        operation: str,
        res: Resource,
        version: str,
        sub: str,
        obj: Obj | None,
        old: Obj | None,
        dry_run: bool,
        name: str | None = None,
        namespace: str | None = None,
    ) -> None:
        """The validating admission plugins (PodSecurity, ValidatingAdmissionPolicies), after the built-in
        defaulting and validation."""
        meta = (obj or old or {}).get("metadata") or {}
        if namespace is None:
            namespace = str(meta.get("namespace") or "") if res.namespaced else ""
        self.admission.validate_request(
            Attributes(
                operation=operation,
                resource=res,
                version=version,
                subresource=sub,
                namespace=namespace,
                name=name if name is not None else str(meta.get("name") or ""),
                obj=obj,
                old=old,
                user=USER_INFO.get() or ADMIN_USER,
                dry_run=dry_run,
                warnings=WARNINGS.get(),
            )
        )

    async def _delete(
        self, request: web.Request, res: Resource, version: str, ns: str, name: str
    ) -> web.Response:
        grace, pre, dry_run = await self._read_delete_options(request)
        current = self.store.get(res, ns, name)
        check_preconditions(pre, current["metadata"])
        self._admit_policies(request, "DELETE", res, version, "", None, current, dry_run)
        if dry_run:
            return json_response(self._out(current, res, version))
        return json_response(self._out(self.registry[res].delete(ns, name, grace), res, version))

    @staticmethod
    async def _read_delete_options(request: web.Request) -> tuple[int | None, dict[str, Any], bool]:
        """The query's and the body's DeleteOptions: (grace period, preconditions, dry run)."""
        grace = query_int(request, "gracePeriodSeconds")
        raw = await request.read()
        opts = None
        if raw:
            try:
                opts = parse_json(raw)
            except ValueError as e:
                raise ApiError(400, f"invalid DeleteOptions: {e}") from None
        grace, pre, dry = delete_options(opts, grace)
        return grace, pre, is_dry_run(request, "DeleteOptions", dry)

    async def _evict(self, request: web.Request, ns: str, name: str) -> web.Response:
        body = await read_body(request)
        if (
            not isinstance(body, dict)
            or body.get("kind") not in (None, "Eviction")
            or body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1")
        ):
            raise ApiError(400, "the body must be a policy/v1 Eviction")
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ApiError(400, "Eviction.metadata must be an object")
        if (meta or {}).get("name") not in (None, "", name):
            raise ApiError(400, "name in URL does not match name in Eviction object")
        grace, pre, dry = delete_options(body.get("deleteOptions"), None)
        dry_run = is_dry_run(request, "DeleteOptions", dry)
        pod = self.store.get(R.PODS, ns, name)
        check_preconditions(pre, pod["metadata"])
        eviction = {"apiVersion": "policy/v1", "kind": "Eviction", **body}
        eviction["metadata"] = {**(meta or {}), "name": name, "namespace": ns}
        self._admit_policies(request, "CREATE", R.PODS, "v1", "eviction", eviction, None, dry_run, name=name)
        if dry_run:
            return json_response(
                {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
            )
        self.registry.pods.evict(ns, name, grace)
        return json_response(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, 201
        )

    # -- exec, logs and metrics ----------------------------------------------------------------------
    async def _connect(self, request: web.Request, ns: str, name: str, sub: str) -> web.StreamResponse:
        """`pods/exec` and `pods/attach` (`ExecREST.Connect`, `AttachREST.Connect`)."""
        # `handlers/rest.go` `ConnectResource`: validating admission of the CONNECT, its object the
        # PodExecOptions or PodAttachOptions the query decodes to, before the pod is looked up and the stream
        # set up
        options: dict[str, Any] = {
            "kind": "PodExecOptions" if sub == "exec" else "PodAttachOptions",
            "apiVersion": "v1",
            **{
                key: request.query.get(key, "").lower() in ("true", "1")
                for key in ("stdin", "stdout", "stderr", "tty")
            },
            "container": request.query.get("container", ""),
        }
        if sub == "exec":
            options["command"] = request.query.getall("command", [])
        self._admit_policies(request, "CONNECT", R.PODS, "v1", sub, options, None, False, name, ns)
        pod = self.store.get(R.PODS, ns, name)

        async def authorize_create() -> None:  # KEP-4006's compound check of a WebSocket upgrade (a GET)
            await self.filters.authorize(request, verb="create")

        compound = authorize_create if self.websocket_upgrade_create and request.method == "GET" else None
        if sub == "exec":
            return await serve_exec(request, pod, self.nodes, compound)
        return await serve_attach(request, pod, self.nodes, compound)

    async def _log(self, request: web.Request, ns: str, name: str) -> web.StreamResponse:
        pod = self.store.get(R.PODS, ns, name)
        since_time = query_time(request, "sinceTime")
        since_seconds = query_int(request, "sinceSeconds")
        if since_seconds is not None:
            if since_time is not None:
                raise ApiError(
                    422, "at most one of `sinceTime` or `sinceSeconds` may be specified", reason="Invalid"
                )
            if since_seconds <= 0:
                raise ApiError(422, "sinceSeconds: Invalid value: must be greater than 0", reason="Invalid")
            try:
                since_time = datetime.now(UTC) - timedelta(seconds=since_seconds)
            except OverflowError:
                since_time = None  # further back than any log line
        tail, limit = query_int(request, "tailLines"), query_int(request, "limitBytes")
        if (tail is not None and tail < 0) or (limit is not None and limit <= 0):
            raise ApiError(422, "tailLines must be >= 0 and limitBytes > 0", reason="Invalid")
        source = self.nodes.log_source(pod, request.query.get("container"), query_bool(request, "previous"))
        timestamps = query_bool(request, "timestamps")
        if not query_bool(request, "follow"):
            data = source.read(
                since_time=since_time, timestamps=timestamps, tail_lines=tail, limit_bytes=limit
            )
            return web.Response(body=data, content_type="text/plain")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        if not await start_stream(resp, request):
            return resp
        sent = 0
        try:
            follow = source.follow(since_time=since_time, timestamps=timestamps, tail_lines=tail)
            async with contextlib.aclosing(follow) as chunks:  # its file and watch released at once
                async for chunk in chunks:
                    if limit is not None and sent + len(chunk) > limit:
                        await resp.write(chunk[: limit - sent])
                        break
                    await resp.write(chunk)
                    sent += len(chunk)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        return resp
