"""The Kubernetes clients a stage task imports, loaded module by module as they are used.

Every stage task imports cncf.kubernetes' hook module (`KruiseHook` is built on its `KubernetesHook`), which
imports at its top the sync client `kubernetes`, the async client `kubernetes_asyncio` (for its async hook
only) and `aiohttp` (for one exception class). Each client's package imports all of its ~800 generated API and
model modules, `aiohttp` its whole client and server: 0.6 s of each stage task's start on the benchmark's
machine (docs/benchmarks.md), for a task that uses a few of them. Celery's worker pre-imports the sync client
for all its tasks (celery provider, `on_celery_import_modules`); LocalExecutor's task processes import it
themselves, and nothing pre-imports the async one, which only a trigger in the triggerer uses.

`defer_clients` puts a stand-in module in `sys.modules` for each of the three packages, and for the
subpackages of the clients that import the generated modules, unless the package is imported already. A
stand-in carries the real module's spec and `__path__`, so import statements (``from kubernetes import
client``) bind it without loading it, and a submodule (``kubernetes.client.rest``) loads on its own. A name
read from a stand-in is read from the module that defines it, when that is known without the package
(`home_of`: `HOMES`, or the generator's layout, `CoreV1Api` in `api/core_v1_api.py`); any other read loads
the real module in the stand-in's place, through the import system (so under its locks), and answers from
it, and the stand-in goes on answering from the real module, for whoever bound it. A module loaded under a
stand-in is the one the real package then uses: no class exists twice.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import re
import sys
import threading
import types
from typing import Any

DEFERRED = {
    "kubernetes": ("client", "client.api", "client.models"),
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
"""each package deferred, with its subpackages that get stand-ins too: those of `client` that import the
generated API and model modules, and for `kubernetes_asyncio` what its `__init__` imports"""

HOMES = {
    **{
        f"{client}.{name}": f"{client}.{module}"
        for client in ("kubernetes.client", "kubernetes_asyncio.client")
        for name, module in (
            ("ApiClient", "api_client"),
            ("Configuration", "configuration"),
            ("ApiException", "exceptions"),
            ("ApiValueError", "exceptions"),
            ("OpenApiException", "exceptions"),
        )
    },
    "aiohttp.ClientConnectionError": "aiohttp.client_exceptions",
}
"""the module a name of a package comes from, where cncf.kubernetes reads it at import (kube_client subclasses
`ApiClient`, the helper functions count `ClientConnectionError` as transient): read from there, it needs
none of the package's other modules"""

GENERATED = ("kubernetes.client", "kubernetes_asyncio.client")
"""the OpenAPI-generated clients: each API class and model in a module of its own, named after it"""
_SNAKE_ACRONYM = re.compile(r"(?<=.)(?=[A-Z][a-z]+)")
_SNAKE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

_taking_out = threading.Lock()


class DeferredModule(types.ModuleType):
    """Stands for a module of a Kubernetes client that nobody has used yet (see the module's docstring)."""

    def __getattr__(self, attr: str) -> Any:
        real = sys.modules.get(self.__name__)
        if real is not None and real is not self:  # loaded: answer from the real module
            return getattr(real, attr)
        sub = f"{self.__name__}.{attr}"
        if importlib.machinery.PathFinder.find_spec(sub, self.__path__) is not None:
            return importlib.import_module(sub)  # a submodule, as `from package import submodule` has it
        home = home_of(self.__name__, attr)
        if home is not None:
            try:
                found = importlib.import_module(home)
            except ModuleNotFoundError:
                found = None
            if found is not None and hasattr(found, attr):
                return getattr(found, attr)
        return getattr(load(self.__name__), attr)


def home_of(package: str, attr: str) -> str | None:
    """The module that defines `package`'s `attr`, if known without loading `package` (`HOMES`, or the
    OpenAPI generator's layout of a `GENERATED` client: `CoreV1Api` in `api/core_v1_api.py`, `V1Pod` in
    `models/v1_pod.py`)."""
    if f"{package}.{attr}" in HOMES:
        return HOMES[f"{package}.{attr}"]
    module = _SNAKE.sub("_", _SNAKE_ACRONYM.sub("_", attr)).lower()
    for client in GENERATED:
        if package == client:
            return f"{client}.{'api' if attr.endswith('Api') else 'models'}.{module}"
        if package in (f"{client}.api", f"{client}.models"):
            return f"{package}.{module}"
    return None


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
        for attr, value in list(vars(module).items()):  # submodules loaded under the stand-in
            if isinstance(value, types.ModuleType) and not hasattr(real, attr):
                setattr(real, attr, value)
    return real


def defer_clients() -> None:
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


def load_clients(*packages: str) -> None:
    """Load now what the stand-ins of `packages` (every deferred package by default) stand for: for a
    process that forks task processes, or runs triggers, and should import them once for all
    (docs/examples/airflow_local_settings.py). Deepest first, so that each real module binds the real modules
    below it."""
    chosen = packages or tuple(DEFERRED)
    deferred = [n for n, m in list(sys.modules.items()) if isinstance(m, DeferredModule)]
    for name in sorted((n for n in deferred if n.split(".")[0] in chosen), reverse=True):
        load(name)
