"""Per-resource rules around storage, as the API server's registry holds them: a strategy per resource
(`pkg/registry/<group>/<resource>/strategy.go`: `PrepareForUpdate`, `Validate`, `ValidateUpdate`, the status
strategy) and its REST storage (`pkg/registry/core/pod/storage/storage.go`: `pods/status`, `pods/resize`,
`pods/eviction`; `k8s.io/apiserver/pkg/registry/rest/delete.go` `BeforeDelete`: graceful deletion;
`pkg/registry/core/namespace/storage`: a namespace goes with everything in it).

The HTTP handler (`server.py`) decodes a request and its options, then asks the resource's strategy what to
store; defaulting and validation are the admission chain's (`admission.py`), which the strategies call.
"""

from __future__ import annotations

from collections.abc import Callable

from . import resources as R
from .admission import Admission
from .errors import ApiError
from .resources import Resource
from .store import Obj, Store, deep_copy


def check_resource_version(res: Resource, name: str, old: Obj, new: Obj) -> None:
    """A stale resourceVersion is a 409 Conflict before any validation: `registry/generic/registry/store.go`
    `Update` compares it inside GuaranteedUpdate's try-update function before `rest.BeforeUpdate` (defaulting,
    validation) and admission run, so a stale write that would also be invalid is still a 409."""
    sent = new["metadata"].get("resourceVersion")
    if sent and sent != old["metadata"].get("resourceVersion"):
        raise ApiError(
            409,
            f"Operation cannot be fulfilled on {res.plural}{'.' + res.group if res.group else ''} "
            f'"{name}": the object has been modified; please apply your changes to the latest '
            "version and try again",
            kind=res.plural,
            name=name,
            group=res.group,
        )


def before_update(old: Obj, new: Obj) -> None:
    """`rest.BeforeUpdate`'s resets, before validation: generation, creationTimestamp and a deletionTimestamp
    already set are the stored ones whatever was sent (so a client that writes times as `+00:00` or drops
    them replaces without a 422), a missing uid or deletionGracePeriodSeconds is the stored one."""
    old_meta, meta = old["metadata"], new["metadata"]
    for key in ("generation", "creationTimestamp", "deletionTimestamp"):
        if key in old_meta:
            meta[key] = old_meta[key]
        elif key == "generation":
            meta.pop(key, None)
    for key in ("uid", "deletionGracePeriodSeconds"):
        if meta.get(key) in (None, "") and old_meta.get(key) is not None:
            meta[key] = old_meta[key]


class Strategy:
    """The rules every stored resource follows."""

    def __init__(self, res: Resource, store: Store, admission: Admission) -> None:
        self.res = res
        self.store = store
        self.admission = admission
        self.subresources: dict[str, Callable[[Obj, Obj], Obj]] = {"status": self.update_status}
        """subresource -> what a write to it stores, from the stored object and the one sent"""

    def validate_create(self, obj: Obj) -> None:
        """Default and validate a new object in place (the admission chain)."""
        self.admission.on_create(self.res, obj)

    def prepare_for_update(self, old: Obj, new: Obj) -> None:
        """`PrepareForUpdate`: a write to the main resource keeps the stored status, which changes through
        the status subresource only."""
        if "status" in old or "status" in new:
            if self.res.subresources and "status" in self.res.subresources:
                new["status"] = deep_copy(old.get("status"))

    def validate_update(self, old: Obj, new: Obj) -> None:
        self.admission.on_update(self.res, old, new)

    def update_status(self, old: Obj, new: Obj) -> Obj:
        """The status strategy: only the status is taken from a status write."""
        kept = deep_copy(old)
        kept["status"] = new.get("status")
        kept["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion")
        self.admission.on_status(self.res, old, kept)
        return kept

    def update_subresource(self, sub: str, old: Obj, new: Obj) -> Obj:
        """What a write to subresource `sub` of `old` stores."""
        return self.subresources[sub](old, new)

    def delete(self, ns: str, name: str, grace: int | None) -> Obj:
        """Delete, or mark deleted while finalizers remain (the store); returns the object as deleted."""
        return self.store.mark_deleted(self.res, ns, name, grace)


class PodStrategy(Strategy):
    """Pods: graceful deletion, `pods/resize` and `pods/eviction`."""

    def __init__(self, store: Store, admission: Admission) -> None:
        super().__init__(R.PODS, store, admission)
        self.subresources["resize"] = self.resize

    def resize(self, old: Obj, new: Obj) -> Obj:
        """`pods/resize` (KEP-1287): only the containers' resources change."""
        rv = new["metadata"].get("resourceVersion")
        resized = self.admission.on_resize(old, new)
        resized["metadata"]["resourceVersion"] = rv
        return resized

    def delete(self, ns: str, name: str, grace: int | None) -> Obj:
        """Graceful deletion (`rest.BeforeDelete`, the pod strategy's `CheckGracefulDelete`): the grace period
        defaults to the pod's `terminationGracePeriodSeconds`; a pod no kubelet runs (unbound) or deleted with
        grace 0 goes at once, else it is marked and its kubelet removes it when its containers are gone."""
        pod = self.store.get(R.PODS, ns, name)
        if grace is None:
            grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        if not (pod.get("spec") or {}).get("nodeName") or grace == 0:
            obj = self.store.mark_deleted(R.PODS, ns, name, 0)
            self.store.remove(R.PODS, ns, name)
            return obj
        return self.store.mark_deleted(R.PODS, ns, name, max(grace, 1))

    def evict(self, ns: str, name: str, grace: int | None) -> Obj:
        """`pods/eviction` (`EvictionREST.Create`) once admitted: the pod is deleted with the eviction's
        grace period. It records no event; the pod's kubelet records a Killing event for each container it
        stops (`killContainer`, `pod_workers.PodWorker.stop_all`)."""
        return self.delete(ns, name, grace)


class NamespaceStrategy(Strategy):
    """Namespaces: the built-in ones may not be deleted; deleting one deletes everything in it."""

    def __init__(self, store: Store, admission: Admission) -> None:
        super().__init__(R.NAMESPACES, store, admission)

    def delete(self, ns: str, name: str, grace: int | None) -> Obj:
        """Delete a namespace and everything in it (the grace period plays no part)."""
        namespace = self.store.get(R.NAMESPACES, "", name)
        if name in R.DEFAULT_NAMESPACES:
            raise ApiError(
                403,
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                reason="Forbidden",
            )
        for res in R.STORED:
            if res.namespaced:
                for obj in list(self.store.items(res, name)):
                    if res is R.PODS and obj["spec"].get("nodeName"):
                        self.store.mark_deleted(res, name, obj["metadata"]["name"], 0)
                    self.store.remove(res, name, obj["metadata"]["name"], force=True)
        self.store.remove(R.NAMESPACES, "", name, force=True)
        namespace["status"] = {"phase": "Terminating"}
        return namespace


class Registry:
    """The strategy of every served resource."""

    def __init__(self, store: Store, admission: Admission) -> None:
        self.pods = PodStrategy(store, admission)
        special: list[Strategy] = [self.pods, NamespaceStrategy(store, admission)]
        self._strategies = {s.res: s for s in special}
        for res in R.STORED:
            self._strategies.setdefault(res, Strategy(res, store, admission))

    def __getitem__(self, res: Resource) -> Strategy:
        return self._strategies[res]

    def register(self, strategy: Strategy) -> None:
        """Serve `strategy.res` with `strategy` (a registry of its own: `rbac_registry.RbacStrategy`)."""
        self._strategies[strategy.res] = strategy
