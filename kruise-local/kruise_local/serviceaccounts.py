"""The `default` ServiceAccount of every namespace, as kube-controller-manager's serviceaccounts controller
keeps it (`pkg/controller/serviceaccount/serviceaccounts_controller.go`).

The controller's one account is `default` (`DefaultServiceAccountsControllerOptions`). `syncNamespace` creates
it in a namespace that is Active and lacks it, with only its name (no token secret since 1.24: the token
controller is not modelled); `namespaceAdded`/`namespaceUpdated` and `serviceAccountDeleted` queue the
namespace, so a deleted `default` account comes back while its namespace lives. The sync runs after the
change that queued it (a controller's work queue), never inside the write.
"""

from __future__ import annotations

import asyncio

from . import resources as R
from .errors import ApiError
from .store import Obj, Store

DEFAULT = "default"


class ServiceAccountsController:
    """Creates the `default` ServiceAccount in each Active namespace that lacks it."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def start(self) -> None:
        """Follow namespaces and ServiceAccounts; sync the namespaces there are (an informer's first list)."""
        self.store.listen(self.on_change)
        for ns in list(self.store.items(R.NAMESPACES)):
            self.sync(ns["metadata"]["name"])

    def on_change(self, kind: str, res: R.Resource, obj: Obj, old: Obj | None) -> None:
        meta = obj["metadata"]
        if res is R.NAMESPACES and kind != "DELETED":
            namespace = meta["name"]
        elif res is R.SERVICE_ACCOUNTS and kind == "DELETED" and meta["name"] == DEFAULT:
            namespace = meta.get("namespace", "")
        else:
            return
        asyncio.get_running_loop().call_soon(self.sync, namespace)

    def sync(self, namespace: str) -> None:
        """`syncNamespace`: create the account unless the namespace is gone, not Active, or has it."""
        ns = self.store.peek(R.NAMESPACES, "", namespace)
        if ns is None or (ns.get("status") or {}).get("phase") != "Active":
            return
        if ns["metadata"].get("deletionTimestamp"):
            return
        if self.store.peek(R.SERVICE_ACCOUNTS, namespace, DEFAULT) is not None:
            return
        self.store.create(
            R.SERVICE_ACCOUNTS, {"metadata": {"name": DEFAULT, "namespace": namespace}}, owned=True
        )


def admit_pod(store: Store, pod: Obj) -> None:
    """The ServiceAccount admission plugin on a pod create (`plugin/pkg/admission/serviceaccount/admission.go`
    `Admit`, a mutating plugin: after defaulting, before the pod's validation): the pod's service account
    (`default` when it names none) must exist in its namespace, else 403 `pods "<name>" is forbidden: error
    looking up service account <ns>/<sa>: serviceaccount "<sa>" not found` (`admission.NewForbidden`; the
    lister misses and the live lookup's NotFound). Not modelled: the `kube-api-access-*` token volume it
    mounts, the service account's imagePullSecrets it copies, mirror pods."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    namespace, account = str(meta.get("namespace") or ""), spec.get("serviceAccountName") or DEFAULT
    if not isinstance(account, str) or store.peek(R.SERVICE_ACCOUNTS, namespace, account) is not None:
        return
    name = str(meta.get("name") or meta.get("generateName") or "Unknown")
    raise ApiError(
        403,
        f'pods "{name}" is forbidden: error looking up service account {namespace}/{account}: '
        f'serviceaccount "{account}" not found',
        reason="Forbidden",
        kind="pods",
        name=name,
    )
