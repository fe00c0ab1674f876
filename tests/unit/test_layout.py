"""Shape of the two packages (ARCHITECTURE.md): no import cycle in either (imports under `if TYPE_CHECKING:`
count), no module and no test file over ~800 lines, the provider never imports the local cluster and the local
cluster never imports the provider; the provider's wheel holds no local cluster file
(tests/unit/test_packaging.py)."""

from __future__ import annotations

import functools
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


@functools.cache
def _graph() -> grimp.ImportGraph:
    """Both packages' import graph, imports under `if TYPE_CHECKING:` included (they are imports too)."""
    return grimp.build_graph(PROVIDER, LOCAL, cache_dir=None)


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
