"""airflow-kruise-chain: run a pipeline's stages as in-place container swaps in one persistent pod."""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata for Airflow's provider manager (entry point `apache_airflow_provider`)."""
    return {
        "package-name": "airflow-kruise-chain",
        "name": "OpenKruise chain",
        "description": "Runs a pipeline's stages as in-place container swaps inside one persistent "
        "Kubernetes pod, with OpenKruise ImagePullJob prewarming and ContainerRecreateRequest re-runs.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "OpenKruise chain",
                "external-doc-url": "https://openkruise.io/",
                "tags": ["software"],
            },
        ],
        "hooks": [
            {"integration-name": "OpenKruise chain", "python-modules": ["airflow_kruise_chain.hooks.kruise"]},
        ],
        "operators": [
            {
                "integration-name": "OpenKruise chain",
                "python-modules": ["airflow_kruise_chain.operators.chain"],
            },
        ],
        "sensors": [
            {
                "integration-name": "OpenKruise chain",
                "python-modules": ["airflow_kruise_chain.sensors.hotswap"],
            },
        ],
        "triggers": [
            {
                "integration-name": "OpenKruise chain",
                "python-modules": ["airflow_kruise_chain.triggers.chain"],
            },
        ],
        # the chain reuses the cncf.kubernetes `kubernetes` connection type; no connection type of its own
        "connection-types": [],
        "extra-links": ["airflow_kruise_chain.links.ChainPodLink"],
    }
