"""One production-shaped deployment (tests/production/stack.py) per test session: PostgreSQL, Redis,
CeleryExecutor with two workers, on kruise-local. Its tests are marked `production` (deselect them locally
with `-m "not production"`); CI runs them, and a missing PostgreSQL or Redis fails them rather than
skipping."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.airflow.stack import running_stack
from tests.production.stack import ProductionStack


@pytest.fixture(scope="session")
def production_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProductionStack]:
    with running_stack(ProductionStack, tmp_path_factory.mktemp("production-stack")) as stack:
        yield stack
