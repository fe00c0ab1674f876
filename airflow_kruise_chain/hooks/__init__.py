"""Hooks of the airflow-kruise-chain provider.

Importing any of them first defers the Kubernetes clients (`lazyclients`): cncf.kubernetes' hook module, which
`KruiseHook` is built on, imports `kubernetes`, `kubernetes_asyncio` and `aiohttp` at its top, each whole, and
a stage task uses a few of their modules.
"""

from airflow_kruise_chain.hooks.lazyclients import defer_clients

defer_clients()
