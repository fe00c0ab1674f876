"""Deferrable stages with the provider's defaults on the production-shaped deployment (PostgreSQL, Redis,
CeleryExecutor with two workers, the triggerer on its own; tests/production/stack.py), issue 40: stages of 2,
12 and 60 s, as tests/airflow/test_deferrable.py runs them on LocalExecutor. Under Celery a task that resumed
after its trigger would wait for a worker's pick-up a second time: a deferred stage that succeeds is ended
by its trigger instead, once, and a stage shorter than `defer_after` never defers."""

from __future__ import annotations

import pytest

from tests.airflow.test_deferrable import run_lengths
from tests.production.stack import ProductionStack

pytestmark = [pytest.mark.slow, pytest.mark.production]


def test_deferrable_stages_of_2_12_and_60_s_with_the_providers_defaults_on_celery(
    production_stack: ProductionStack,
) -> None:
    run_lengths(production_stack, "celery_deferrable_lengths")
