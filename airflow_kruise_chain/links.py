"""Extra links on chain tasks."""

from __future__ import annotations

import os
from typing import Any

from airflow.sdk import BaseOperatorLink

DASHBOARD_ENV = "AIRFLOW_KRUISE_CHAIN_DASHBOARD_URL"


class ChainPodLink(BaseOperatorLink):
    """Link to the chain pod in a Kubernetes dashboard.

    The base URL comes from the `AIRFLOW_KRUISE_CHAIN_DASHBOARD_URL` environment variable (default: the
    Kubernetes Dashboard's path layout on localhost:8001 through `kubectl proxy`).
    """

    name = "Chain pod"

    @staticmethod
    def url(namespace: str, pod: str) -> str:
        base = os.environ.get(
            DASHBOARD_ENV,
            "http://localhost:8001/api/v1/namespaces/kubernetes-dashboard/services/https:kubernetes-dashboard:/proxy",
        ).rstrip("/")
        return f"{base}/#/pod/{namespace}/{pod}?namespace={namespace}"

    @classmethod
    def persist(cls, context: Any, namespace: str, pod: str) -> None:
        context["ti"].xcom_push(key=cls().xcom_key, value=cls.url(namespace, pod))

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(key=self.xcom_key, ti_key=ti_key) or ""
