"""`KubeConnection`: how a chain's tasks, triggers and pages reach the cluster, as one value.

Light to import (a DAG file's operators hold one); the hooks are imported only when one is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook, KruiseHook

DEFAULT_CONN_ID = "kubernetes_default"


@dataclass(frozen=True)
class KubeConnection:
    """The cluster and credentials, as cncf.kubernetes' `KubernetesHook` resolves them: the `kubernetes`
    connection `kubernetes_conn_id`, overridden by `config_file` (a kubeconfig), `cluster_context` and
    `in_cluster` (the pod's service account) where given.

    The fields are the chain tasks' keyword arguments of the same names, so `to_dict()` can be passed to any
    of them, and to and from a trigger's serialized form.
    """

    kubernetes_conn_id: str | None = DEFAULT_CONN_ID
    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-safe dict (a trigger's serialized kwargs)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KubeConnection:
        """The connection `to_dict` gave; ValueError names a key that is not a field."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            choose = ", ".join(sorted(names))
            raise ValueError(f"connection: unknown key {unknown[0]!r}; choose from {choose}")
        return cls(**data)

    def _hook_kwargs(self) -> dict[str, Any]:
        return {
            "conn_id": self.kubernetes_conn_id,
            "config_file": self.config_file,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
        }

    def hook(self) -> KruiseHook:
        """A `KruiseHook` on this connection."""
        from airflow_kruise_chain.hooks.kruise import KruiseHook

        return KruiseHook(**self._hook_kwargs())

    def async_hook(self) -> AsyncKruiseHook:
        """An `AsyncKruiseHook` on this connection (for triggers)."""
        from airflow_kruise_chain.hooks.kruise import AsyncKruiseHook

        return AsyncKruiseHook(**self._hook_kwargs())
