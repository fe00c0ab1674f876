"""Fixtures of the runtime's tests: a runtime of each sandbox kind."""

from __future__ import annotations

import pytest
from kruise_local.runtime import ContainerRuntime


@pytest.fixture(params=["bwrap", "oci"])
def runtime(request: pytest.FixtureRequest) -> ContainerRuntime:
    return ContainerRuntime(request.param)


@pytest.fixture(params=["bwrap", "unshare", "oci"])
def any_runtime(request: pytest.FixtureRequest) -> ContainerRuntime:
    return ContainerRuntime(request.param)
