"""Airflow's operator-init rules over every operator, sensor and trigger of the provider.

Airflow checks providers' operators with `scripts/ci/prek/validate_operators_init.py`: a constructor assigns
each template field exactly as given (``self.f = f``, ``self.f = f or default``, a value-preserving ternary,
or forwarded as ``super().__init__(f=f)``) and applies no logic to it (no read of the field other than
those, and ``f is None`` checks): rendering happens after the constructor, so logic there would act on the
unrendered Jinja. That script reads one file at a time and sees only template fields written as a literal
tuple in the class's own body; this test applies the same rules to the classes as Python sees them: the
full `template_fields` (inherited ones included) of every operator, sensor and trigger class the provider
defines, against each constructor of the provider in the class's MRO. A trigger is checked for the
template fields of the operators that defer to it (Airflow renders those a trigger shares with its task
when the task starts from the triggerer).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from typing import Any

import pytest
from airflow.sdk import BaseOperator
from airflow.triggers.base import BaseTrigger

import airflow_kruise_chain


def provider_classes() -> list[type]:
    """Every operator, sensor and trigger class defined in the provider (its modules imported)."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(airflow_kruise_chain.__path__, "airflow_kruise_chain."):
        if ".plugins" in info.name or info.name.endswith(".cli"):
            continue
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and issubclass(cls, (BaseOperator, BaseTrigger))
                and cls.__module__ == module.__name__
            ):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[name] for name in sorted(found)]


def template_fields_of(cls: type) -> set[str]:
    if issubclass(cls, BaseOperator):
        return set(cls.template_fields)
    operators = [c for c in provider_classes() if issubclass(c, BaseOperator)]
    return set().union(*(set(c.template_fields) for c in operators))


def constructor(cls: type) -> ast.FunctionDef | None:
    """The AST of `cls`'s own `__init__`, when it defines one."""
    init = vars(cls).get("__init__")
    if init is None:
        return None
    init = inspect.unwrap(init)
    tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _name(node: ast.AST | None) -> str | None:
    """The field an expression names: ``self.x`` or ``x``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _kept(value: ast.AST | None, field: str) -> ast.AST | None:
    """The read of `field` in a value that keeps it as given (``f``, ``f or d``, ``f if f [is not None] else
    d``), or None."""
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        value = value.values[0]
    elif isinstance(value, ast.IfExp) and _name(value.body) == field and isinstance(value.body, ast.Name):
        test = value.test
        if not (
            _name(test) == field
            or (
                isinstance(test, ast.Compare)
                and _name(test.left) == field
                and isinstance(test.ops[0], ast.IsNot)
                and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None
            )
        ):
            return None
        value = value.body
    return value if isinstance(value, ast.Name) and value.id == field else None


def _is_super_init(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "__init__"
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "super"
    )


def check(cls: type, ctor: ast.FunctionDef | None) -> tuple[list[str], set[str]]:
    """(what `ctor`, `cls`'s own constructor, does against the rules, as readable findings; the template
    fields it assigns as given)."""
    fields = template_fields_of(cls)
    if ctor is None or not fields:
        return [], set()
    params = {a.arg for a in [*ctor.args.posonlyargs, *ctor.args.args, *ctor.args.kwonlyargs]}
    found: list[str] = []
    sanctioned: set[int] = set()
    assigned: set[str] = set()
    for node in ast.walk(ctor):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                field = _name(target)
                if field not in fields:
                    continue
                kept = _kept(node.value, field)
                if kept is None:
                    found.append(f"line {node.lineno}: {ast.unparse(node)} (not assigned as given)")
                    continue
                sanctioned.add(id(kept))
                if isinstance(node.value, ast.IfExp):
                    sanctioned.update(id(n) for n in ast.walk(node.value.test))
                if isinstance(target, ast.Attribute):
                    assigned.add(field)
        elif _is_super_init(node):
            for keyword in node.keywords:  # type: ignore[attr-defined]
                if keyword.arg in fields:
                    kept = _kept(keyword.value, keyword.arg)
                    if kept is None:
                        found.append(f"line {node.lineno}: super().__init__({keyword.arg}=...) not as given")
                    else:
                        sanctioned.add(id(kept))
                        assigned.add(keyword.arg)
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Is, ast.IsNot))
            and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value is None
        ):
            sanctioned.add(id(node.left))
    for node in ast.walk(ctor):
        if isinstance(getattr(node, "ctx", None), ast.Load) and id(node) not in sanctioned:
            field = _name(node)
            if field in fields and (isinstance(node, ast.Attribute) or field in params):
                found.append(f"line {node.lineno}: logic on template field {field!r}")  # type: ignore[attr-defined]
    for field in sorted(fields & params - assigned):
        found.append(f"template field {field!r} is a parameter but not assigned as given")
    return found, assigned


def violations(cls: type) -> list[str]:
    return check(cls, constructor(cls))[0]


CLASSES = provider_classes()


def test_the_check_sees_every_operator_sensor_and_trigger() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {
        "ChainBaseOperator",
        "ChainSetupOperator",
        "ChainPrewarmOperator",
        "KruiseChainOperator",
        "ChainTeardownOperator",
        "HotSwapSensor",
        "StageTrigger",
    } <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_template_fields_are_assigned_as_given_and_carry_no_logic(cls: type) -> None:
    assert violations(cls) == []


@pytest.mark.parametrize("cls", [c for c in CLASSES if issubclass(c, BaseOperator)], ids=lambda c: c.__name__)
def test_every_template_field_is_assigned_by_a_constructor_of_the_class(cls: type) -> None:
    """Airflow renders a template field by its attribute name: some constructor in the class's MRO sets it
    (Airflow's `DecoratedOperator` sets `op_args` and `op_kwargs`)."""
    inits = [
        k
        for k in cls.__mro__
        if k.__module__.startswith(("airflow_kruise_chain", "airflow.sdk.bases.decorator"))
    ]
    assigned = set().union(*(check(cls, constructor(k))[1] for k in inits))
    assert set(cls.template_fields) <= assigned


SAMPLE = """
class BadOperator(BaseOperator):
    template_fields = ("cmds", "image")

    def __init__(self, *, cmds, image, **kwargs):
        super().__init__(**kwargs)
        if not image:
            raise ValueError("image")
        self.image = image
        self.cmds = list(cmds)
"""


def test_the_check_finds_what_airflow_refuses() -> None:
    """Counter-check: the rules flag a transform (`list(cmds)`) and logic (`if not image`)."""
    namespace: dict[str, Any] = {"BaseOperator": BaseOperator}
    exec(compile(SAMPLE, "<sample>", "exec"), namespace)
    tree = ast.parse(SAMPLE).body[0]
    assert isinstance(tree, ast.ClassDef)
    ctor = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    found, assigned = check(namespace["BadOperator"], ctor)
    assert any("self.cmds = list(cmds)" in f for f in found), found
    assert any("logic on template field 'image'" in f for f in found), found
    assert assigned == {"image"}
