"""Airflow UI plugin: the chain monitoring pages on the API server, with a nav entry and a DAG run tab.

Every Airflow process loads the plugins, each task process too (for their macros: task-sdk
`get_template_context`, `integrate_macros_plugins`); only the API server serves the pages. Their app
(`plugins/app.py`) imports the API server's own modules (its auth manager, security dependencies, models:
0.2-0.4 s), so it is imported when `fastapi_apps` is read, which only the API server and `airflow plugins` do.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_kruise_chain.plugins.urls import URL_PREFIX


class KruiseChainPlugin(AirflowPlugin):
    """Mounts the pages at ``/kruise-chain``: the list of chain runs, and one page per DAG run."""

    name = "kruise_chain"
    external_views = [
        {
            "name": "Kruise chains",
            "href": f"{URL_PREFIX}/",
            "url_route": "kruise-chains",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Chain",
            "href": f"{URL_PREFIX}/runs/{{DAG_ID}}/{{RUN_ID}}",
            "url_route": "kruise-chain-run",
            "destination": "dag_run",
        },
    ]

    @property  # type: ignore[override]
    def fastapi_apps(self) -> list[dict[str, Any]]:
        """The pages' app, imported on first read (the API server's plugin mount)."""
        from airflow_kruise_chain.plugins.app import app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "Kruise chains"}]
