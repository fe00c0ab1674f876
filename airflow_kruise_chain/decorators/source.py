"""What of a TaskFlow stage's function ships to the chain's pod: its source alone (`function_source`), which
must then be all the function needs (`check_self_contained`), as with ``@task.kubernetes``."""

from __future__ import annotations
import __future__

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from airflow_kruise_chain.core.errors import ChainConfigError


def function_source(function: Callable[..., Any]) -> str:
    """The source of `function` without its decorators (dedented), as the stage defines it."""
    source = textwrap.dedent(inspect.getsource(function))
    node = ast.parse(source).body[0]
    if not isinstance(node, ast.FunctionDef):
        raise ChainConfigError(
            "python_callable", "must be a function defined with `def` (not async, not a lambda)"
        )
    return "\n".join(source.splitlines()[node.lineno - 1 :]) + "\n"


NO_AIRFLOW = "a TaskFlow stage runs in the chain's pod without Airflow (as a @task.kubernetes function does)"
AIRFLOW_RUNTIME = {
    "get_current_context": (
        "calls get_current_context()",
        "pass what it needs as arguments, such as '{{ ds }}' or '{{ run_id }}' (rendered when the stage "
        "runs), or make it a plain @task",
    ),
    "Variable": (
        "reads an Airflow Variable",
        "pass it as an argument, '{{ var.value.KEY }}' (rendered when the stage runs)",
    ),
    "Connection": (
        "reads an Airflow connection",
        "read credentials from a Kubernetes Secret, secrets=[Secret('env', NAME, SECRET, KEY)] on the stage "
        "(docs/credentials.md), and pass what is not secret as arguments ('{{ conn.ID.host }}')",
    ),
    "XCom": (
        "reads XComs",
        "pass them as arguments: an upstream task's output, or '{{ ti.xcom_pull(...) }}'",
    ),
}
"""What the Task SDK serves a task at run time, which a function in the pod cannot reach: the name a function
uses it by, what it does, and what to do instead."""
AIRFLOW_RUNTIME["BaseHook"] = AIRFLOW_RUNTIME["Connection"]


def _airflow_runtime(tree: ast.AST) -> str | None:
    """The first `AIRFLOW_RUNTIME` name `tree` uses: ``get_current_context`` however it is reached, the others
    imported from Airflow."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id == "get_current_context") or (
            isinstance(node, ast.Attribute) and node.attr == "get_current_context"
        ):
            return "get_current_context"
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "airflow":
            used = [alias.name for alias in node.names if alias.name in AIRFLOW_RUNTIME]
            if used:
                return used[0]
    return None


def check_self_contained(function: Callable[..., Any]) -> None:
    """Refuse, naming the function, what its source cannot do in the chain's pod, where only that source
    runs (as with ``@task.kubernetes``): use what the Task SDK serves a task (`AIRFLOW_RUNTIME`: its
    context, Variables, connections, XComs; the pod has no Airflow, or an Airflow without its supervisor), or
    a name its source does not define: a module, constant or function of the DAG file, a variable of the
    function it is defined in (every one would be a NameError when the stage runs)."""
    import builtins
    import dis
    from types import CodeType

    name = function.__name__
    source = function_source(function)
    runtime = _airflow_runtime(ast.parse(source))
    if runtime is not None:
        does, instead = AIRFLOW_RUNTIME[runtime]
        raise ChainConfigError(name, f"{does}, but {NO_AIRFLOW}: {instead}")
    code = compile(source, f"<stage {name}>", "exec", __future__.annotations.compiler_flag, dont_inherit=True)
    codes, loads, stored = [code], [], {name, "__name__"}
    while codes:  # the module (the def: its defaults), the function, the functions and comprehensions in it
        current = codes.pop()
        for ins in dis.get_instructions(current):
            if ins.opname == "LOAD_GLOBAL" or (current is code and ins.opname == "LOAD_NAME"):
                loads.append(ins.argval)
            elif ins.opname in ("STORE_GLOBAL", "STORE_NAME"):
                stored.add(ins.argval)
        codes.extend(c for c in current.co_consts if isinstance(c, CodeType))
    missing = next((n for n in loads if n not in stored and not hasattr(builtins, n)), None)
    if missing is None:
        return
    closure = dict(zip(function.__code__.co_freevars, function.__closure__ or (), strict=True))
    value = function.__globals__.get(missing)
    if missing in closure:
        what, fix = "a variable of the function it is defined in", "pass it as an argument"
    elif inspect.ismodule(value):
        parent, _, last = value.__name__.rpartition(".")
        statement = (
            f"import {missing}"
            if value.__name__ == missing
            else f"from {parent} import {missing}"
            if last == missing
            else f"import {value.__name__} as {missing}"
        )
        what, fix = "a module the DAG file imports", f"import it inside the function ({statement})"
    elif missing in function.__globals__:
        what, fix = (
            "a name of the DAG file",
            "pass it as an argument, or import or define it inside the function",
        )
    else:
        what, fix = "a name nothing defines", "define it"
    raise ChainConfigError(
        name,
        f"uses {missing!r}, {what}, but only the function's source ships to the chain's pod (as with "
        f"@task.kubernetes), where {missing!r} is not defined: {fix}",
    )
