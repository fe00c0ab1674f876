"""`kruise_local/validation/` is a package of modules by concern, its public names importable from it."""

from __future__ import annotations

from pathlib import Path

import kruise_local.validation as validation


def test_validation_is_a_package_of_several_modules() -> None:
    assert len(list(Path(validation.__file__).parent.glob("*.py"))) > 5


def test_public_names_are_importable_from_the_package() -> None:
    for name in validation.__all__:
        assert getattr(validation, name) is not None, name
