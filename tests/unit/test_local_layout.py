"""Shape of the package (ARCHITECTURE.md): no import cycle (imports under `if TYPE_CHECKING:` count), no
module over ~800 lines, the provider never imports the local cluster, the local cluster imports neither the
provider nor its core; `local/validation/` is a package of modules by concern."""

from __future__ import annotations

import functools
from pathlib import Path

import grimp

import airflow_kruise_chain.local.validation as validation
from airflow_kruise_chain.operators import chain, pod

PACKAGE = Path(validation.__file__).parent
MAX_LINES = 800


TOP = "airflow_kruise_chain"
LOCAL = f"{TOP}.local"


@functools.cache
def _graph() -> grimp.ImportGraph:
    """The package's import graph, imports under `if TYPE_CHECKING:` included (they are imports too)."""
    return grimp.build_graph(TOP, cache_dir=None)


def _provider_modules() -> list[str]:
    return sorted(m for m in _graph().modules if m != TOP and not m.startswith(LOCAL))


def test_the_graph_sees_every_module_of_the_package() -> None:
    on_disk = {
        ".".join((TOP, *path.relative_to(PACKAGE.parents[1]).with_suffix("").parts)).removesuffix(".__init__")
        for path in PACKAGE.parents[1].rglob("*.py")
    }
    assert on_disk - set(_graph().modules) == set(), "a subpackage without __init__.py is invisible to grimp"


def _cycles() -> set[tuple[str, str]]:
    """Every pair of modules that import each other, directly or through others."""
    graph = _graph()
    pairs = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if graph.find_shortest_chain(importer=imported, imported=importer) is not None:
                pairs.add(tuple(sorted(m.removeprefix(f"{TOP}.") for m in (importer, imported))))
    return pairs


def test_no_import_cycle_in_the_package() -> None:
    assert _cycles() == set()


def _lines() -> dict[str, int]:
    top = PACKAGE.parents[1]
    return {str(path.relative_to(top)): len(path.read_text().splitlines()) for path in top.rglob("*.py")}


def test_no_module_of_the_package_exceeds_800_lines() -> None:
    sizes = _lines()
    assert len(sizes) > 80
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_provider_never_imports_the_local_cluster() -> None:
    provider = _provider_modules()
    seen = ("chain", "core.driver", "hooks.kruise", "operators.chain", "sensors.hotswap", "triggers.chain")
    assert {f"{TOP}.{module}" for module in seen} <= set(provider)
    for importer in provider:
        chains = _graph().find_shortest_chains(importer=importer, imported=LOCAL, as_packages=True)
        assert chains == set(), f"the provider imports the local cluster: {chains}"


def test_the_local_cluster_imports_neither_the_provider_nor_its_core() -> None:
    local = [m for m in _graph().modules if m.startswith(LOCAL)]
    assert len(local) > 30
    for imported in _provider_modules():
        chains = _graph().find_shortest_chains(importer=LOCAL, imported=imported, as_packages=True)
        assert chains == set(), f"the local cluster imports the provider: {chains}"


def _modules() -> list[Path]:
    return sorted(PACKAGE.glob("*.py"))


def test_validation_is_a_package_of_several_modules() -> None:
    assert len(_modules()) > 5


def test_public_names_are_importable_from_the_package() -> None:
    for name in validation.__all__:
        assert getattr(validation, name) is not None, name


def test_the_operators_keep_their_public_import_paths() -> None:
    """`airflow_kruise_chain.operators.chain.<Name>` still names every operator of a chain, those that moved
    to `operators/pod.py` included (DAG files import them from there)."""
    assert set(chain.__all__) >= {"ChainSetupOperator", "ChainTeardownOperator", "KruiseChainOperator"}
    assert {name for name in chain.__all__ if getattr(chain, name) is None} == set()
    assert (chain.ChainSetupOperator, chain.ChainTeardownOperator) == (
        pod.ChainSetupOperator,
        pod.ChainTeardownOperator,
    )
