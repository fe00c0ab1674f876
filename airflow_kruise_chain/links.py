"""Extra links on chain tasks."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from airflow_kruise_chain.config import dashboard_url


def pod_dashboard_url(namespace: str, pod: str, base: str | None = None) -> str:
    """The chain pod's page in a Kubernetes dashboard, from ``[kruise_chain] dashboard_url`` (or `base`).

    A base holding ``{namespace}``/``{pod}`` is a template; any other is a Kubernetes Dashboard's base URL.
    """
    base = base or dashboard_url()
    ns, name = quote(namespace, safe=""), quote(pod, safe="")
    if "{pod}" in base or "{namespace}" in base:
        return base.replace("{namespace}", ns).replace("{pod}", name)
    return f"{base.rstrip('/')}/#/pod/{ns}/{name}?namespace={ns}"


class ChainPodLink(BaseOperatorLink):
    """'Chain pod': the chain pod in a Kubernetes dashboard (``[kruise_chain] dashboard_url``).

    Airflow 3's API server resolves operator links from XCom only, so the task stores the URL when it runs
    (`persist`), and Airflow stores `get_link`'s answer again when the task ends; the link then shows on that
    task instance, also after the pod is gone. A chain task's URL follows from the task and its DAG run, so
    `get_link` computes it rather than reading the XCom back.
    """

    name = "Chain pod"

    @classmethod
    def persist(cls, context: Any, namespace: str, pod: str) -> None:
        context["ti"].xcom_push(key=cls().xcom_key, value=pod_dashboard_url(namespace, pod))

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        pod_url = getattr(operator, "chain_pod_url", None)
        if pod_url is not None:
            return pod_url(ti_key.dag_id, ti_key.run_id)
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""
