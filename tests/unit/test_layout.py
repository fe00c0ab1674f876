"""Shape of the two packages (ARCHITECTURE.md): no import cycle in either (imports under `if TYPE_CHECKING:`
count, and imports inside functions), none between the provider's top-level parts either, the provider's
layers (`LAYER_RULES`: the core imports nothing of Airflow nor of the Airflow-facing layer, the hooks no
operator), no module and no test file over ~800 lines, the provider never imports the local cluster and the
local cluster never imports the provider; the provider's wheel holds no local cluster file
(tests/unit/test_packaging.py)."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import grimp
import kruise_local

import airflow_kruise_chain
from airflow_kruise_chain.operators import chain, pod

PROVIDER = "airflow_kruise_chain"
LOCAL = "kruise_local"
PACKAGES = {PROVIDER: Path(airflow_kruise_chain.__file__).parent, LOCAL: Path(kruise_local.__file__).parent}
ROOT = Path(__file__).resolve().parents[2]
TEST_FOLDERS = ("tests", "kruise-local/tests")
"""the two distributions' tests, and the modules they share"""
MAX_LINES = 800
DRIVER_MAX_LINES = 500
"""core/driver.py stays well under the cap (issue 21): its follow loop and pod session are modules apart"""


AIRFLOW_FACING = (
    "chain",
    "cli",
    "config",
    "connection",
    "hooks",
    "links",
    "operators",
    "plugins",
    "preflight",
    "sensors",
    "templating",
    "triggers",
)
"""the provider's Airflow-facing layer: every part but `core` (and `version`, which imports nothing)"""
ABOVE_HOOKS = ("chain", "operators", "plugins", "sensors", "triggers")
"""the Airflow-facing classes the hooks serve"""
LAYER_RULES = [
    (f"{PROVIDER}.core", "airflow", "the core imports nothing of Airflow"),
    *(
        (f"{PROVIDER}.core", f"{PROVIDER}.{part}", "the core imports nothing of the Airflow-facing layer")
        for part in AIRFLOW_FACING
    ),
    *((f"{PROVIDER}.hooks", f"{PROVIDER}.{part}", "the hooks import no operator") for part in ABOVE_HOOKS),
]
"""(importer, imported, rule): no chain of imports may lead from the one to the other (ARCHITECTURE.md)"""


def _build() -> grimp.ImportGraph:
    """Both packages' import graph, imports under `if TYPE_CHECKING:` and inside functions included (they are
    imports too), the external packages each imports as one node each."""
    return grimp.build_graph(PROVIDER, LOCAL, include_external_packages=True, cache_dir=None)


@functools.cache
def _graph() -> grimp.ImportGraph:
    return _build()


def layer_violations(graph: grimp.ImportGraph) -> list[str]:
    """Each chain of imports that breaks one of `LAYER_RULES`, with its rule."""
    found = []
    for importer, imported, rule in LAYER_RULES:
        if imported in graph.modules:
            for chain in graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True):
                found.append(f"{rule}: {' -> '.join(chain)}")
    return sorted(found)


def part_cycles(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Each pair of the provider's top-level parts (`core`, `hooks`, ...) that import each other."""
    parts = sorted({m.split(".")[1] for m in graph.modules if m.startswith(f"{PROVIDER}.")})
    return [
        (a, b)
        for a, b in itertools.combinations(parts, 2)
        if graph.chain_exists(importer=f"{PROVIDER}.{a}", imported=f"{PROVIDER}.{b}", as_packages=True)
        and graph.chain_exists(importer=f"{PROVIDER}.{b}", imported=f"{PROVIDER}.{a}", as_packages=True)
    ]


def _modules(top: str) -> list[str]:
    return sorted(m for m in _graph().modules if m == top or m.startswith(f"{top}."))


def test_the_graph_sees_every_module_of_both_packages() -> None:
    for top, folder in PACKAGES.items():
        on_disk = {
            ".".join((top, *path.relative_to(folder).with_suffix("").parts)).removesuffix(".__init__")
            for path in folder.rglob("*.py")
        }
        assert on_disk - set(_graph().modules) == set(), (
            "a subpackage without __init__.py is invisible to grimp"
        )


def _cycles() -> set[tuple[str, str]]:
    """Every pair of modules that import each other, directly or through others."""
    graph = _graph()
    pairs = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if graph.find_shortest_chain(importer=imported, imported=importer) is not None:
                pairs.add(tuple(sorted((importer, imported))))
    return pairs


def test_the_provider_keeps_its_layers() -> None:
    assert {rule[0] for rule in LAYER_RULES} <= set(_graph().modules)
    assert "airflow" in _graph().modules  # the Airflow-facing layer imports it: the rule can see it
    assert layer_violations(_graph()) == []
    assert part_cycles(_graph()) == []


def test_the_layer_rules_catch_a_core_module_that_imports_airflow_or_a_hook() -> None:
    """A graph of the tree as it is, with a core module made to import Airflow (and one to import a hook, and
    a hook an operator): the rules name each. Nothing broken is written to the tree."""
    graph = _build()
    core, hooks = f"{PROVIDER}.core.spec", f"{PROVIDER}.hooks.retry"
    graph.add_import(importer=core, imported="airflow", line_number=1, line_contents="import airflow")
    assert layer_violations(graph) == [f"the core imports nothing of Airflow: {core} -> airflow"]
    graph.add_import(
        importer=f"{PROVIDER}.core.errors",
        imported=hooks,
        line_number=1,
        line_contents="from ..hooks import retry",
    )
    graph.add_import(
        importer=hooks, imported=f"{PROVIDER}.operators.base", line_number=1, line_contents="import operators"
    )
    broken = layer_violations(graph)
    assert (
        f"the core imports nothing of the Airflow-facing layer: {PROVIDER}.core.errors -> {hooks}" in broken
    )
    assert f"the hooks import no operator: {hooks} -> {PROVIDER}.operators.base" in broken
    assert ("core", "hooks") in part_cycles(graph)  # the hooks import the core: now a cycle


def test_no_import_cycle_in_either_package() -> None:
    assert _cycles() == set()


def test_no_module_of_either_package_exceeds_800_lines() -> None:
    sizes = {
        str(path.relative_to(folder.parent)): len(path.read_text().splitlines())
        for folder in PACKAGES.values()
        for path in folder.rglob("*.py")
    }
    assert len(sizes) > 80
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
    assert sizes[str(Path(PROVIDER, "core", "driver.py"))] <= DRIVER_MAX_LINES


def test_no_test_file_exceeds_800_lines() -> None:
    """Tests too are read by people: a file over the cap is split by subject (helpers shared in a module)."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for folder in TEST_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
    }
    assert len(sizes) > 150
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_test_module_basenames_are_unique() -> None:
    """kruise-local's test folders have no __init__.py: pytest imports each of their modules by its basename
    (a test module, or the helpers its neighbours import), so no two test modules anywhere, and no two of
    kruise-local's test helpers, share one."""
    seen: dict[str, list[str]] = {}
    for folder in TEST_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if path.name.startswith("test_") or (
                folder == "kruise-local/tests" and path.name != "conftest.py"
            ):
                seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_the_provider_never_imports_the_local_cluster() -> None:
    provider = _modules(PROVIDER)
    seen = ("chain", "core.driver", "hooks.kruise", "operators.chain", "sensors.hotswap", "triggers.chain")
    assert {f"{PROVIDER}.{module}" for module in seen} <= set(provider)
    for importer in provider:
        chains = _graph().find_shortest_chains(importer=importer, imported=LOCAL, as_packages=True)
        assert chains == set(), f"the provider imports the local cluster: {chains}"


def test_the_local_cluster_never_imports_the_provider() -> None:
    assert len(_modules(LOCAL)) > 30
    chains = _graph().find_shortest_chains(importer=LOCAL, imported=PROVIDER, as_packages=True)
    assert chains == set(), f"the local cluster imports the provider: {chains}"


def test_the_operators_keep_their_public_import_paths() -> None:
    """`airflow_kruise_chain.operators.chain.<Name>` still names every operator of a chain, those that moved
    to `operators/pod.py` included (DAG files import them from there)."""
    assert set(chain.__all__) >= {"ChainSetupOperator", "ChainTeardownOperator", "KruiseChainOperator"}
    assert {name for name in chain.__all__ if getattr(chain, name) is None} == set()
    assert (chain.ChainSetupOperator, chain.ChainTeardownOperator) == (
        pod.ChainSetupOperator,
        pod.ChainTeardownOperator,
    )
