"""Hooks of the airflow-kruise-chain provider.

Importing any of them first defers the async clients, `kubernetes_asyncio` and `aiohttp` (`lazyasync`):
cncf.kubernetes' hook module, which `KruiseHook` is built on, imports them at its top, and only a trigger uses
them.
"""

from airflow_kruise_chain.hooks.lazyasync import defer_async_clients

defer_async_clients()
