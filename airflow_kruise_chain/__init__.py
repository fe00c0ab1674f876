"""airflow-kruise-chain: run a pipeline's stages as in-place container swaps in one persistent pod."""

from __future__ import annotations

from airflow_kruise_chain.version import __version__


def get_provider_info() -> dict:
    """Provider metadata for Airflow's provider manager (entry point `apache_airflow_provider`)."""
    from airflow_kruise_chain.config import OPTIONS

    return {
        "package-name": "airflow-kruise-chain",
        "name": "OpenKruise chain",
        "description": "Runs a pipeline's stages as in-place container swaps inside one persistent "
        "Kubernetes pod, with OpenKruise ImagePullJob prewarming.",
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
                "python-modules": [
                    "airflow_kruise_chain.operators.chain",
                    "airflow_kruise_chain.operators.pod",
                    "airflow_kruise_chain.operators.prewarm",
                ],
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
        # the chain's tasks take the cncf.kubernetes `kubernetes` connection or this one (the same fields);
        # this one's Test button runs `KruiseHook.test_connection`
        "connection-types": [
            {
                "hook-class-name": "airflow_kruise_chain.hooks.kruise.KruiseHook",
                "hook-name": "Kubernetes (OpenKruise chain)",
                "connection-type": "kruise_chain",
            },
        ],
        "extra-links": ["airflow_kruise_chain.links.ChainPodLink"],
        # @task.kruise_chain(image=...): a Python function as a stage of the chain it is called in
        "task-decorators": [
            {
                "name": "kruise_chain",
                "class-name": "airflow_kruise_chain.decorators.kruise_chain.kruise_chain_task",
            },
        ],
        # the UI plugin is registered by the `airflow.plugins` entry point: Airflow loads a provider's
        # "plugins" only with [core] lazy_discover_providers = False, and a second registration is an error
        "config": {
            "kruise_chain": {
                "description": "OpenKruise chain provider: the stage runner's image, the chain page and "
                "the stages' memory sampling.",
                "options": OPTIONS,
            }
        },
    }
