"""Airflow UI plugin: the chain monitoring pages on the API server, with a nav entry and a DAG run tab."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_kruise_chain.plugins.app import URL_PREFIX, app


class KruiseChainPlugin(AirflowPlugin):
    """Mounts the pages at ``/kruise-chain``: the list of chain runs, and one page per DAG run."""

    name = "kruise_chain"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Kruise chains"}]
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
