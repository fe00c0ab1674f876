"""Hooks of the airflow-kruise-chain provider.

Importing any of them first defers `kubernetes_asyncio` (`lazyasync`): cncf.kubernetes' hook module, which
`KruiseHook` is built on, imports it at its top, and only a trigger uses it.
"""

from airflow_kruise_chain.hooks.lazyasync import defer_kubernetes_asyncio

defer_kubernetes_asyncio()
