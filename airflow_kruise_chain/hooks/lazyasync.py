"""The async clients, `kubernetes_asyncio` and `aiohttp`, loaded when first used, not when cncf.kubernetes'
hook module is imported.

Every stage task imports cncf.kubernetes' hook module (`KruiseHook` is built on its `KubernetesHook`), which
imports `kubernetes_asyncio`'s `client`, `config` and `watch` at its top, for its async hook only, and
`aiohttp` (for one exception class). The async client's package imports all of its ~800 API and model modules,
`aiohttp` its whole client and server: 1.2-1.7 s of each stage task's start (docs/benchmarks.md), although
only a trigger, in the triggerer, uses them. Celery's worker imports the sync client once for all its tasks
(celery provider, `on_celery_import_modules`); nothing imports the async one.

`defer_async_clients` puts a stand-in module in `sys.modules` for each of the two packages and each subpackage
of `kubernetes_asyncio` that loads API and model modules, unless the package is imported already. A stand-in
carries the real module's spec and `__path__`, so import statements (``from kubernetes_asyncio import
client``) bind it without loading it, and a submodule (``kubernetes_asyncio.client.exceptions``, which
cncf.kubernetes' helper functions import) loads on its own. A name cncf.kubernetes reads at import is read
from the module it comes from (`HOMES`). The first read of any other attribute loads the real module in the
stand-in's place, through the import system (so under its locks), and answers from it; the stand-in goes on
answering from the real module, for whoever bound it. A module loaded under a stand-in is the one the real
package then uses: no class exists twice.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import threading
import types
from typing import Any

DEFERRED = {
    "kubernetes_asyncio": (
        "client",
        "client.api",
        "client.models",
        "config",
        "dynamic",
        "stream",
        "utils",
        "watch",
    ),
    "aiohttp": (),
}
"""each package deferred, with its subpackages that get stand-ins too (for `kubernetes_asyncio`: what its
`__init__` imports, and the two subpackages of `client` that hold its API and model modules)"""

HOMES = {
    "kubernetes_asyncio.client.ApiClient": "kubernetes_asyncio.client.api_client",
    "kubernetes_asyncio.client.Configuration": "kubernetes_asyncio.client.configuration",
    "aiohttp.ClientConnectionError": "aiohttp.client_exceptions",
}
"""the module a name of a package comes from, where cncf.kubernetes reads it at import (kube_client subclasses
`ApiClient`, the helper functions count `ClientConnectionError` as transient): read from there, it needs
none of the package's other modules"""

_taking_out = threading.Lock()


class DeferredModule(types.ModuleType):
    """Stands for a module of an async client that nobody has used yet (see the module's docstring)."""

    def __getattr__(self, attr: str) -> Any:
        real = sys.modules.get(self.__name__)
        if real is not None and real is not self:  # loaded: answer from the real module
            return getattr(real, attr)
        sub = f"{self.__name__}.{attr}"
        if importlib.machinery.PathFinder.find_spec(sub, self.__path__) is not None:
            return importlib.import_module(sub)  # a submodule, as `from package import submodule` has it
        if sub in HOMES:
            return getattr(importlib.import_module(HOMES[sub]), attr)
        return getattr(load(self.__name__), attr)


def load(name: str) -> types.ModuleType:
    """The real module `name`, loaded now if a stand-in holds its place."""
    module = sys.modules.get(name)
    if not isinstance(module, DeferredModule):
        return importlib.import_module(name)
    with _taking_out:  # one thread takes the stand-in out; the import system's locks order the rest
        taken = sys.modules.get(name) is module
        if taken:
            del sys.modules[name]
    real = importlib.import_module(name)
    if taken:
        for attr, value in vars(module).items():  # submodules loaded under the stand-in
            if isinstance(value, types.ModuleType) and not hasattr(real, attr):
                setattr(real, attr, value)
    return real


def defer_async_clients() -> None:
    """Put the stand-ins in place, for each package that is not imported already (and is installed)."""
    for package, subpackages in DEFERRED.items():
        if package in sys.modules:
            continue
        top_spec = importlib.machinery.PathFinder.find_spec(package)
        if top_spec is None or not top_spec.submodule_search_locations:
            continue
        stand_ins = {package: _stand_in(top_spec)}
        for sub in subpackages:
            parent, _, child = f"{package}.{sub}".rpartition(".")
            spec = importlib.machinery.PathFinder.find_spec(f"{package}.{sub}", stand_ins[parent].__path__)
            if spec is None:  # another layout than the one known: import it as it comes
                break
            stand_ins[spec.name] = _stand_in(spec)
            setattr(stand_ins[parent], child, stand_ins[spec.name])
        else:
            sys.modules.update(stand_ins)


def _stand_in(spec: importlib.machinery.ModuleSpec) -> DeferredModule:
    module = DeferredModule(spec.name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__package__ = spec.name
    module.__path__ = list(spec.submodule_search_locations or [])
    module.__file__ = spec.origin
    return module


def load_async_clients() -> None:
    """Load what every stand-in stands for, now: for a process whose triggers will use the async clients (the
    triggerer's pre-import, docs/examples/airflow_local_settings.py). Deepest first, so that each real module
    binds the real modules below it."""
    for name in sorted(
        (n for n, m in list(sys.modules.items()) if isinstance(m, DeferredModule)), reverse=True
    ):
        load(name)
