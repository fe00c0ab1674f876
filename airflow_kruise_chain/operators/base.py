"""`ChainBaseOperator`: what every task of a chain holds (its chain, its connection, its hook and pod)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, Context

from airflow_kruise_chain.connection import DEFAULT_CONN_ID, KubeConnection
from airflow_kruise_chain.core.errors import ChainConfigError
from airflow_kruise_chain.core.image import parse_image_reference
from airflow_kruise_chain.links import ChainPodLink, pod_dashboard_url
from airflow_kruise_chain.templating import templated

if TYPE_CHECKING:
    # the hook pulls in the Kubernetes clients: imported when a task runs, not when its DAG file is parsed
    from airflow_kruise_chain.hooks.kruise import KruiseHook


class ChainBaseOperator(BaseOperator):
    """Base of a chain's tasks (setup, prewarm, stages, teardown, and `HotSwapSensor`).

    Holds the chain's identity (`chain_name`, its task-group path `chain_path`, `namespace`), how the task
    reaches the cluster (a `KubeConnection` from `kubernetes_conn_id`, `config_file`, `cluster_context` and
    `in_cluster`, as cncf.kubernetes' KubernetesPodOperator takes them), the `KruiseHook` made on first use,
    and the chain pod's name and its 'Chain pod' link. Templated: `namespace` and `config_file`; as Airflow
    wants of template fields, each is kept as given and checked once rendered (`KruiseChain` checks what is
    known before, at parse time).
    """

    template_fields: Sequence[str] = ("namespace", "config_file")

    def __init__(
        self,
        *,
        chain_name: str,
        namespace: str,
        chain_path: str | None = None,
        kubernetes_conn_id: str | None = DEFAULT_CONN_ID,
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.chain_name = chain_name
        self.chain_path = chain_path
        """the chain's full task-group path (``group.etl``), set by `KruiseChain`; None: the chain's name"""
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.config_file = config_file
        self.cluster_context = cluster_context
        self.in_cluster = in_cluster

    @property
    def connection(self) -> KubeConnection:
        """How the task reaches the cluster, from its connection arguments (`config_file` as rendered)."""
        return KubeConnection(
            self.kubernetes_conn_id, self.config_file, self.cluster_context, self.in_cluster
        )

    @cached_property
    def hook(self) -> KruiseHook:
        return self.connection.hook()

    @property
    def chain_id(self) -> str:
        """What identifies the chain in its DAG: its full task-group path, or its name."""
        return self.chain_path or self.chain_name

    def pod_name(self, context: Context) -> str:
        """The chain pod of this DAG run."""
        return self._pod_name(context["dag"].dag_id, context["run_id"])

    def _pod_name(self, dag_id: str, run_id: str) -> str:
        from airflow_kruise_chain.core.manifest import pod_name_for

        return pod_name_for(self.chain_name, dag_id, run_id, self.chain_path)

    def pod_url(self, context: Context) -> None:
        """Record the chain pod's dashboard URL: the task's 'Chain pod' link."""
        ChainPodLink.persist(context, self.namespace, self.pod_name(context))

    def chain_pod_url(self, dag_id: str, run_id: str) -> str:
        """The dashboard URL of the chain pod of DAG run `run_id` (what the 'Chain pod' link shows); '' while
        the namespace is not rendered (the task failed before it rendered its fields)."""
        if templated(self.namespace):
            return ""
        return pod_dashboard_url(self.namespace, self._pod_name(dag_id, run_id))


# -- argument checks at parse time, shared by the chain's tasks and `KruiseChain` ------------------------
def check_positive(field: str, value: Any) -> None:
    """ChainConfigError naming `field` unless `value` is a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ChainConfigError(field, f"must be a positive number of seconds, not {value!r}")


def check_image(field: str, value: Any) -> None:
    """ChainConfigError naming `field` unless `value` is an image reference (as rendered)."""
    if not isinstance(value, str):
        raise ChainConfigError(field, f"must be an image reference (a string), not {value!r}")
    try:
        parse_image_reference(value)
    except ValueError as err:
        raise ChainConfigError(field, f"{err}; example: registry.example.com/team/app:1.2") from None


def check_defer_after(value: Any) -> None:
    """ChainConfigError naming `defer_after` unless `value` is None (the default: the trigger's hold) or a
    finite number of seconds >= 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ChainConfigError(
            "defer_after", f"must be a finite number of seconds >= 0, or None for the default, not {value!r}"
        )
