"""pytest fixtures for tests against a local cluster: one cluster per test session, reached through the
official `kubernetes` client (`cluster`, `kubeconfig`, `api_client`, `core`, `custom`, and `namespace`, a
fresh namespace per test). Load it with `-p kruise_local.pytest_plugin` (or `pytest_plugins` in a top-
level conftest).

Loaded, it also makes `ast.parse` take one lock: see `serialize_ast_parse`, and fails a session that leaves a
container running: see `pytest_sessionfinish`."""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import leftover_containers


def serialize_ast_parse() -> None:
    """Make `ast.parse` parse one source at a time in this process (CPython before 3.13 only).

    Those CPythons count the depth of the tree they build in interpreter-wide state (`Python-ast.c`
    `ast2obj_*`): when a cluster thread formats a traceback (3.11's traceback.py parses the line to place its
    carets) while the test thread parses (hypothesis describing a strategy, pytest rewriting asserts), either
    can fail with "SystemError: AST constructor recursion depth mismatch"."""
    if sys.version_info >= (3, 13) or getattr(ast.parse, "serialized", False):
        return
    lock = threading.RLock()  # re-entrant: a finalizer run mid-parse may format a traceback itself
    unlocked = ast.parse

    @functools.wraps(unlocked)
    def parse(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return unlocked(*args, **kwargs)

    parse.serialized = True  # type: ignore[attr-defined]
    ast.parse = parse  # type: ignore[assignment]


serialize_ast_parse()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    c = LocalCluster(ClusterConfig(profile="fast", nodes=1, root=str(tmp_path_factory.mktemp("cluster"))))
    c.start()
    c.kubelet.volume_retry = 0.2
    yield c
    c.stop()


@pytest.fixture(scope="session")
def kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="session")
def api_client(kubeconfig: Path) -> Any:
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: Any) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


LEAK_GRACE_SECONDS = 5.0
"""how long a container ended by the session's last teardown may take to go before it counts as left"""


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session when a container it started still runs once its tests and fixtures are done (pid 1
    of its namespace with a mount from the session's temporary folder, `testing.leftover_containers`): the
    container is killed and named. Nothing a local cluster or a test starts may outlive it."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)
    if basetemp is None:  # the session made no temporary folder: it mounted none in a container
        return
    deadline = time.monotonic() + LEAK_GRACE_SECONDS
    while (left := leftover_containers(basetemp)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not left:
        return
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"containers left running by the session (killed now): {left}"
    if reporter is not None:
        reporter.write_line(message, red=True)
    else:
        print(message, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
