"""The chain core's errors live in one module; the names users catch stay importable where they were."""

from __future__ import annotations

import inspect

import pytest

from airflow_kruise_chain import core
from airflow_kruise_chain.core import errors


def core_errors() -> list[type[BaseException]]:
    return [
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    ]


def test_every_core_error_is_a_chain_error_exported_by_the_core_package() -> None:
    found = core_errors()
    assert len(found) >= 12
    for error in found:
        assert issubclass(error, errors.ChainError), error
        assert getattr(core, error.__name__) is error
        assert error.__name__ in (errors.__doc__ or ""), f"{error.__name__} missing from the hierarchy"


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("airflow_kruise_chain.core.driver", "ConflictError"),
        ("airflow_kruise_chain.core.driver", "StageStartError"),
        ("airflow_kruise_chain.core.driver", "StageTimeoutError"),
        ("airflow_kruise_chain.core.swap", "ResultUnavailableError"),
        ("airflow_kruise_chain.core.sizing", "ResizeInfeasibleError"),
        ("airflow_kruise_chain.core.sizing", "ResizeRefusedError"),
        ("airflow_kruise_chain.core.sizing", "ResizeTimeoutError"),
    ],
)
def test_names_stay_importable_from_their_former_modules(module: str, name: str) -> None:
    import importlib

    assert getattr(importlib.import_module(module), name) is getattr(errors, name)


def test_no_other_core_module_defines_an_error() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(core.__path__):
        if info.name == "errors":
            continue
        module = importlib.import_module(f"{core.__name__}.{info.name}")
        own = [
            name
            for name, value in vars(module).items()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ]
        assert own == [], f"{module.__name__} defines {own}: put them in core/errors.py"


PULL_ERROR = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/acme/load:9": failed to '
    'resolve reference "docker.io/acme/load:9": docker.io/acme/load:9: not found'
)


@pytest.mark.parametrize(
    ("reason", "waiting"),
    [
        ("ErrImagePull", PULL_ERROR),
        # from 1.32 (kubernetes/kubernetes#127918) the back-off's message carries the last pull's error
        ("ImagePullBackOff", f'Back-off pulling image "acme/load:9": ErrImagePull: {PULL_ERROR}'),
        ("ImagePullBackOff", 'Back-off pulling image "acme/load:9"'),  # before 1.32
    ],
)
def test_a_stage_whose_image_cannot_be_pulled_names_the_image_and_the_fix_either_way(
    reason: str, waiting: str
) -> None:
    """The kubelet shows ErrImagePull for a failed pull, then ImagePullBackOff while it backs off: whichever
    the driver reads first, the error says why (the kubelet's message, the registry's answer once), which
    image, and what to check."""
    from airflow_kruise_chain.core.status import StageState, StageStatus

    status = StageStatus(StageState.FAILED_TO_START, "slot-a", 2, "load", "", reason, waiting)
    message = str(errors.StageStartError(status, "acme/load:9"))
    assert message.startswith("stage 'load' could not start in slot-a (generation 2, image acme/load:9): ")
    assert f": {reason}: {waiting}; check that the image reference exists" in message
    said = 1 if PULL_ERROR in waiting else 0  # the pull's error and its kind, each said once at most
    assert (message.count(PULL_ERROR), message.count("ErrImagePull")) == (said, said)
    assert "image_pull_secrets" in message
