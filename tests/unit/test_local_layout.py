"""Shape of the local cluster's admission code: `local/validation/` is split by concern into small modules."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_kruise_chain.local.validation as validation

PACKAGE = Path(validation.__file__).parent
MAX_LINES = 800


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def test_validation_is_a_package_of_several_modules() -> None:
    assert len(_modules()) > 5


def test_no_validation_module_exceeds_800_lines() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in _modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_validation_modules_import_each_other_without_a_cycle() -> None:
    deps: dict[str, set[str]] = {}
    for path in _modules():
        tree = ast.parse(path.read_text())
        deps[path.stem] = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
        }
    assert deps["__init__"], "the package re-exports its modules' public names"
    done: set[str] = set()

    def visit(module: str, stack: tuple[str, ...]) -> None:
        assert module not in stack, f"import cycle: {' -> '.join((*stack, module))}"
        if module in done:
            return
        for dep in deps.get(module, set()):
            visit(dep, (*stack, module))
        done.add(module)

    for module in deps:
        if module != "__init__":
            visit(module, ())


def test_public_names_are_importable_from_the_package() -> None:
    for name in validation.__all__:
        assert getattr(validation, name) is not None, name
