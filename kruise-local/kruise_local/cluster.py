"""The local cluster: API server, scheduler, kubelets and OpenKruise controllers in one process.

`LocalCluster` runs everything on one asyncio loop in a background thread and serves real HTTP on loopback, so
the real `kubernetes` client talks to it through an ordinary kubeconfig.
"""

from __future__ import annotations

import asyncio
import base64
import platform
import random
import tempfile
import threading
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from . import limits
from . import resources as R
from .admission import Admission
from .admission_policy import PolicyAdmission
from .authn import ADMIN_TOKEN, Authenticator
from .catalogue import Catalogue
from .errors import ApiError
from .events import EventRecorder
from .features import IN_PLACE_RESIZE, Features, parse_feature_gates
from .filters import Filters
from .image_puller import image_pull_settings
from .kruise import Kruise
from .kubelet import Kubelet
from .leftovers import reap
from .pod_security import PodSecurityAdmission, PodSecurityConfiguration
from .profiles import Profile, get_profile
from .rbac import RbacAuthorizer
from .rbac_registry import ensure_bootstrap_policy
from .scheduling import DEFAULT_ALLOCATABLE, Scheduler
from .server import ApiServer
from .serviceaccounts import ServiceAccountsController
from .store import Store, now_iso
from .tls import ServingCerts, make_serving_certs

T = TypeVar("T")
AUTHORIZATION_MODES = ("AlwaysAllow", "RBAC")


@dataclass
class ClusterConfig:
    """How to build a local cluster."""

    profile: str = "fast"
    nodes: int = 1
    node_labels: dict[str, str] = field(default_factory=dict)
    catalogue: str | None = None
    sandbox: str = "auto"
    image_pull_job_gate: bool = True
    root: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    bookmark_interval: float = 5.0
    watch_history: int = 5000
    preloaded_images: tuple[str, ...] = ()
    kubernetes_version: str = "1.35.0"
    """the Kubernetes version modelled (1.32 to 1.35, `features.Features`): what `/version` and the OpenAPI
    documents report, the kubelets run, and which version-gated rules apply"""
    feature_gates: dict[str, bool] | str = field(default_factory=dict)
    """feature gates set against the version's defaults, as `--feature-gates` (`A=true,B=false` or a dict;
    the gates modelled are listed in `features.GATES`)"""
    in_place_resize: bool | None = None
    """the InPlacePodVerticalScaling feature gate; None: its default for the version (on from 1.33, locked on
    from 1.35)"""
    allocatable: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ALLOCATABLE))
    """every node's allocatable cpu, memory and pods (the scheduler and resize admission enforce it)"""
    node_allocatable: dict[str, dict[str, str]] = field(default_factory=dict)
    """per node name: allocatable values that differ from `allocatable`"""
    request_timeout: float = limits.REQUEST_TIMEOUT
    idle_timeout: float = limits.IDLE_CONNECTION_TIMEOUT
    max_requests_in_flight: int = limits.MAX_REQUESTS_IN_FLIGHT
    permissive_images: bool = False
    """any image reference missing from the catalogue runs as a generic image with the host's tools"""
    max_container_restart_period: float | None = None
    """every node's kubelet setting crashLoopBackOff.maxContainerRestartPeriod, 1-300 s (None: unset, 300 s);
    only with the KubeletCrashLoopBackOffMax gate on (by default from 1.35, KEP-5593)"""
    serialize_image_pulls: bool | None = None
    """every node's kubelet setting serializeImagePulls (None: unset: true, unless max_parallel_image_pulls is
    2 or more): one pull at a time per node, queued (`image_puller.py`)"""
    max_parallel_image_pulls: int | None = None
    """every node's kubelet setting maxParallelImagePulls (None: unset: no limit once pulls are parallel);
    above 1 only with serialize_image_pulls False or unset"""
    pod_security: PodSecurityConfiguration = field(default_factory=PodSecurityConfiguration)
    """the PodSecurity admission plugin's configuration: defaults for unlabelled namespaces, exemptions"""
    authorization_mode: str = "AlwaysAllow"
    """`--authorization-mode`: AlwaysAllow (every request allowed, and one without a ServiceAccount token
    is the admin's) or RBAC (requests authorized by the cluster's Roles and bindings; `enable_rbac` turns it
    on later)"""
    tls: bool = False
    """serve HTTPS with a self-signed CA (in the kubeconfigs the cluster writes): kubectl sends a bearer
    token only over TLS"""

    def __post_init__(self) -> None:
        if self.authorization_mode not in AUTHORIZATION_MODES:
            raise ValueError(
                f"authorization_mode must be one of {', '.join(AUTHORIZATION_MODES)}, "
                f"not {self.authorization_mode!r}"
            )
        self.features().crash_loop_backoff(self.max_container_restart_period)
        image_pull_settings(self.serialize_image_pulls, self.max_parallel_image_pulls)

    def features(self) -> Features:
        """The version and the gates this configuration sets (ValueError naming the option otherwise)."""
        gates = self.feature_gates
        gates = parse_feature_gates(gates) if isinstance(gates, str) else dict(gates)
        if self.in_place_resize is not None:
            gates[IN_PLACE_RESIZE] = self.in_place_resize
        return Features.parse(self.kubernetes_version, gates)


class LocalCluster:
    """A Kubernetes + OpenKruise emulator serving the real API over HTTP on loopback."""

    def __init__(self, config: ClusterConfig | None = None, **overrides: Any) -> None:
        self.config = config or ClusterConfig(**overrides)
        self.profile: Profile = get_profile(self.config.profile)
        self.catalogue = Catalogue.load(self.config.catalogue, permissive=self.config.permissive_images)
        self.sandbox = self.config.sandbox
        self.gates = {"ImagePullJobGate": self.config.image_pull_job_gate}
        self.features = self.config.features()
        """the Kubernetes version and what it turns on (features.py)"""
        self.resize_enabled = self.features.in_place_resize
        self.memory_limit_decrease = self.features.memory_limit_decrease
        """whether a NotRequired resize may lower a memory limit (1.34+: the kubelet checks the usage)"""
        self._tmp = None if self.config.root else tempfile.TemporaryDirectory(prefix="kruise-local-")
        self.root = Path(self.config.root or self._tmp.name)  # type: ignore[union-attr]
        self.store = Store(history=self.config.watch_history)
        self.events = EventRecorder(self.store)
        self.filters = Filters(Authenticator(self.store))
        if self.config.authorization_mode == "RBAC":
            self.filters.authorizer = RbacAuthorizer(self.store)
        self.certs: ServingCerts | None = make_serving_certs(self.config.host) if self.config.tls else None
        """the CA and serving certificate of an HTTPS cluster (`tls`)"""
        self.requests = self.filters.requests
        self.audit = self.filters.audit
        self.policies = PolicyAdmission(self.store)
        self.pod_security = PodSecurityAdmission(
            self.store, self.config.pod_security, emulated_minor=self.features.minor
        )
        self.admission = Admission(
            self.store,
            self.policies,
            self.pod_security,
            self.gates,
            memory_limit_decrease=self.memory_limit_decrease,
        )
        self.kubelet = Kubelet(
            self.store,
            self.events,
            self.profile,
            self.catalogue,
            self.root,
            sandbox=self.sandbox,
            features=self.features,
        )
        self.scheduler = Scheduler(self.store, self.events, self.profile)
        self.kruise = Kruise(self.store, self.profile, self.kubelet)
        self.service_accounts = ServiceAccountsController(self.store)
        self.server = ApiServer(
            self.store,
            self.admission,
            self.kubelet,
            self.filters,
            features=self.features,
            bookmark_interval=self.config.bookmark_interval,
            request_timeout=self.config.request_timeout,
            max_requests_in_flight=self.config.max_requests_in_flight,
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    @property
    def fault(self) -> Callable[[web.Request], ApiError | None] | None:
        """Fault injection: called with each request, the error it returns answers the request."""
        return self.filters.fault

    @fault.setter
    def fault(self, fault: Callable[[web.Request], ApiError | None] | None) -> None:
        self.filters.fault = fault

    @property
    def bookmark_interval(self) -> float:
        """How long a watch that asked for bookmarks stays silent before it gets one."""
        return self.server.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float) -> None:
        self.server.bookmark_interval = seconds

    # -- start and stop ------------------------------------------------------------------------------
    async def _setup(self) -> None:
        self.loop = asyncio.get_running_loop()
        for ns in R.DEFAULT_NAMESPACES:
            self.store.create(
                R.NAMESPACES,
                {
                    # as the namespace strategy labels every namespace, the built-in ones too
                    "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                    "status": {"phase": "Active"},
                },
            )
        ensure_bootstrap_policy(self.store)
        self.service_accounts.start()
        for i in range(self.config.nodes):
            self.add_node(f"node-{i}" if self.config.nodes > 1 else "kruise-local")
        self.scheduler.start()
        self.kubelet.start()
        self.kruise.start()
        self._runner = web.AppRunner(
            self.server.app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=self.config.idle_timeout,
        )
        await self._runner.setup()
        ssl_context = self.certs.context(self.root / "pki") if self.certs is not None else None
        site = web.TCPSite(
            self._runner, self.config.host, self.config.port, shutdown_timeout=0.5, ssl_context=ssl_context
        )
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"{'https' if self.certs is not None else 'http'}://{self.config.host}:{port}"

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        max_container_restart_period: float | None = None,
        serialize_image_pulls: bool | None = None,
        max_parallel_image_pulls: int | None = None,
    ) -> None:
        """Register a node: its Node object, its kubelet state (`max_container_restart_period`: its kubelet's
        crashLoopBackOff.maxContainerRestartPeriod; `serialize_image_pulls`, `max_parallel_image_pulls`: its
        serializeImagePulls and maxParallelImagePulls; each unset: the cluster's) and its NodeImage."""
        node_labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            **self.config.node_labels,
            **(labels or {}),
        }
        period = max_container_restart_period or self.config.max_container_restart_period
        pulls = (serialize_image_pulls, max_parallel_image_pulls)
        if pulls == (None, None):
            pulls = (self.config.serialize_image_pulls, self.config.max_parallel_image_pulls)
        self.kubelet.add_node(name, node_labels, period, *pulls)
        allocatable = {**self.config.allocatable, **self.config.node_allocatable.get(name, {})}
        kubelet_version = f"v{self.features.version}"
        self.store.create(
            R.NODES,
            {
                "metadata": {"name": name, "labels": node_labels},
                "spec": {},
                "status": {
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now_iso(),
                            "lastTransitionTime": now_iso(),
                        }
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": self.kubelet.nodes[name].ip},
                        {"type": "Hostname", "address": name},
                    ],
                    "capacity": dict(allocatable),
                    "allocatable": allocatable,
                    "nodeInfo": {
                        "kubeletVersion": kubelet_version,
                        "kubeProxyVersion": kubelet_version,
                        "containerRuntimeVersion": "kruise-local://1",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                        "osImage": "kruise-local",
                        "kernelVersion": platform.release(),  # the kubelet's uname
                        "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
                        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                        "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                    },
                },
            },
        )
        for ref in self.config.preloaded_images:
            image = self.catalogue.lookup(ref)
            if image is not None:
                self.kubelet.nodes[name].images[image.ref] = image
        self.kruise.ensure_node_image(name, node_labels)

    def start(self) -> LocalCluster:
        """Start serving in a background thread; returns when the API answers. Containers a previous run of
        the same `root` left running (it was killed, say) are ended first (`leftovers.reap`)."""
        if self.config.root:
            reap(self.root)
        ready: Future[None] = Future()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._setup())
            except BaseException as e:
                ready.set_exception(e)
                return
            ready.set_result(None)
            loop.run_forever()
            loop.run_until_complete(self._teardown())
            loop.close()

        self._thread = threading.Thread(target=main, name="kruise-local", daemon=True)
        self._thread.start()
        ready.result(timeout=60)
        return self

    async def _teardown(self) -> None:
        self.store.close_watches()
        await self.kubelet.shutdown()
        await self.scheduler.shutdown()
        await self.kruise.shutdown()
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self) -> None:
        """Kill every container and stop serving."""
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=60)
            self._thread = None
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, fn: Callable[[], T] | Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a function or coroutine on the cluster's loop from another thread and return its result."""
        assert self.loop is not None

        async def run() -> T:
            if asyncio.iscoroutine(fn):
                return await fn
            return fn()  # type: ignore[operator,return-value]

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    # -- client configuration ------------------------------------------------------------------------
    def kubeconfig(self, token: str | None = None, user: str = "kruise-local-admin") -> dict[str, Any]:
        """A kubeconfig dict pointing at this cluster, with a bearer-token user (`token`, else the admin's
        static token), as clients such as kr8s expect; an HTTPS cluster's CA is in it."""
        creds = {"token": token or ADMIN_TOKEN}
        server: dict[str, Any] = {"server": self.url}
        if self.certs is not None:
            server["certificate-authority-data"] = base64.b64encode(self.certs.ca).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kruise-local", "cluster": server}],
            "users": [{"name": user, "user": creds}],
            "contexts": [
                {
                    "name": "kruise-local",
                    "context": {"cluster": "kruise-local", "user": user, "namespace": "default"},
                }
            ],
            "current-context": "kruise-local",
        }

    def write_kubeconfig(self, path: str | Path, token: str | None = None) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(token)))
        return path

    # -- hooks used by the API server ------------------------------------------------------------------
    def enable_rbac(self) -> None:
        """Authorize every request by the cluster's Roles and bindings from now on (`authorization_mode`
        RBAC, as an API server restarted with `--authorization-mode=RBAC`): a token no authenticator
        accepts is a 401, a request without one is `system:anonymous`."""
        self.filters.authorizer = RbacAuthorizer(self.store)

    def set_random_faults(self, conflict: float = 0.0, error: float = 0.0, seed: int = 0) -> None:
        """Fault injection: answer a share of writes with 409 Conflict and a share of requests with 500."""
        rng = random.Random(seed)

        def fault(request: web.Request) -> ApiError | None:
            if request.path.startswith(("/version", "/api/v1/namespaces/default/events")):
                return None
            if request.method in ("PUT", "PATCH") and rng.random() < conflict:
                return ApiError(
                    409,
                    "Operation cannot be fulfilled: the object has been modified; please apply "
                    "your changes to the latest version and try again (injected)",
                )
            if rng.random() < error:
                return ApiError(500, "etcdserver: request timed out (injected)")
            return None

        self.fault = fault if conflict or error else None

    # -- fault injection (tests and demos) ---------------------------------------------------------------
    def configure_node(
        self,
        node: str,
        max_container_restart_period: float | None,
        serialize_image_pulls: bool | None = None,
        max_parallel_image_pulls: int | None = None,
    ) -> None:
        """Set a node's kubelet `crashLoopBackOff.maxContainerRestartPeriod` (1-300 s, None: unset; only with
        KubeletCrashLoopBackOffMax on), `serializeImagePulls` and `maxParallelImagePulls` (None: unset;
        `image_puller.py`), as a kubelet restarted with that configuration: its crash-loop back-off starts
        empty, its image puller anew. ValueError if the configuration's validation refuses it."""
        self.call(
            lambda: self.kubelet.configure_node(
                node, max_container_restart_period, serialize_image_pulls, max_parallel_image_pulls
            )
        )

    def advance_node_clock(self, node: str, seconds: float) -> None:
        """Move a node's kubelet clock forward by `seconds` (tests of the back-off's doubling and expiry)."""
        self.call(lambda: self.kubelet.advance_clock(node, seconds))

    def kill_processes(self, namespace: str, pod: str, container: str, sig: int = 9) -> int:
        """Signal the processes a container's main process started (e.g. a stage under the runner), as `kill`
        inside the container would; returns how many were signalled."""

        def kill() -> int:
            obj = self.store.peek(R.PODS, namespace, pod)
            worker = self.kubelet.worker_for(obj) if obj else None
            st = worker.containers.get(container) if worker else None
            if st is None or st.current is None or st.current.proc is None:
                raise LookupError(f"no running container {container} in pod {namespace}/{pod}")
            return st.current.proc.signal_children(sig)

        return self.call(kill)

    def lose_node(self, node: str) -> None:
        """The node vanishes: it turns NotReady, its containers die at once and its pods are evicted
        (deleted), as the node lifecycle controller's taint eviction ends it."""

        async def lose() -> None:
            obj = self.store.get(R.NODES, "", node)
            obj["status"]["conditions"] = [
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": now_iso(),
                    "lastTransitionTime": now_iso(),
                }
            ]
            self.store.update(R.NODES, obj, check_rv=False)
            for worker in [w for w in self.kubelet.workers.values() if w.node == node]:
                pod = self.store.peek(R.PODS, worker.ns, worker.name)
                if pod is not None:
                    self.events.record(pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller")
                    self.events.record(
                        pod,
                        "Normal",
                        "TaintManagerEviction",
                        f"Marking for deletion Pod {worker.ns}/{worker.name}",
                        "taint-controller",
                    )
                await worker.terminate(0, minimum=False)  # the node is gone: its containers die at once

        self.call(lose())
