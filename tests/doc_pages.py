"""A page of the docs run as one script: its marked blocks, in order, in a fresh folder holding a copy of
deploy/, with $KUBECONFIG a cluster admin's. tests/unit/test_docs.py runs each such page against a fresh
local cluster that authorizes by RBAC and serves TLS; .github/workflows/kind.yml runs
docs/getting-started-cluster.md with this same module against a kind cluster, so that what CI runs on a real
cluster is what the tests run here:

    python tests/doc_pages.py docs/getting-started-cluster.md --kubeconfig FILE --real-cluster

Which blocks run follows the marker on the line before a block's fence, ``<!-- docs-test: MARKER -->``:

- ``run in order against a local cluster with RBAC``: a bash block runs, in the page's order. A python block
  is a file the page asks the reader to save: it says where (``...; saved as dags/first.py``), and is written
  there before the script starts;
- ``...; variant NAME``: the block is an optional step, run only when NAME is asked for (``--variant NAME``);
- ``real cluster only: REASON``: a bash block that runs only with ``--real-cluster`` (helm's own: the local
  cluster is OpenKruise already and cannot be installed into).

Airflow: when a run block calls ``airflow``, the script gets an Airflow of its own (``AIRFLOW_HOME`` in the
folder, an SQLite database migrated there or copied from ``airflow_db``, ``dags/`` its DAGs folder), the
Airflow the page's reader already has.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?:<!-- docs-test: (?P<marker>[^\n]*?) -->\n)?```(?P<lang>[^\n]*)\n(?P<code>.*?)^```$", re.S | re.M
)
IN_ORDER = "run in order against a local cluster with RBAC"
REAL_ONLY = "real cluster only:"
CALLS_AIRFLOW = re.compile(r"^\s*airflow\s", re.M)
SAVED_AS = re.compile(r"^[\w.-]+(/[\w.-]+)*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    marker: str
    code: str

    @property
    def id(self) -> str:
        where = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{where}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, with its language, marker and the line its fence opens on."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("lang")) + 1
        found.append(Block(page, line, m.group("lang").strip(), m.group("marker") or "", m.group("code")))
    return found


@dataclass(frozen=True)
class Step:
    """A block the script runs (bash) or writes (python, `saved_as`)."""

    block: Block
    saved_as: str | None = None
    variant: str | None = None
    real_cluster_only: bool = False


def step(block: Block) -> Step | None:
    """The block as a step of its page's script, None when the runner leaves it alone; ValueError naming the
    block for a marker it cannot follow."""
    if block.marker.startswith(REAL_ONLY):
        if block.lang != "bash" or len(block.marker[len(REAL_ONLY) :].strip()) <= 10:
            raise ValueError(f"{block.id}: `{REAL_ONLY} REASON` marks a bash block and says why")
        return Step(block, real_cluster_only=True)
    base, *modifiers = (part.strip() for part in block.marker.split(";"))
    if base != IN_ORDER:
        return None
    saved_as = variant = None
    for modifier in modifiers:
        if modifier.startswith("saved as ") and SAVED_AS.match(modifier[9:]) and ".." not in modifier:
            saved_as = modifier[9:]
        elif modifier.startswith("variant ") and re.fullmatch(r"[a-z][-a-z0-9]*", modifier[8:]):
            variant = modifier[8:]
        else:
            raise ValueError(f"{block.id}: unknown modifier {modifier!r} (`saved as PATH` or `variant NAME`)")
    if (block.lang == "python") != (saved_as is not None) or block.lang not in ("bash", "python"):
        raise ValueError(
            f"{block.id}: a python block says where it is saved (`; saved as PATH`), a bash block runs"
        )
    return Step(block, saved_as, variant)


def steps(page: Path, variants: Iterable[str] = (), real_cluster: bool = False) -> list[Step]:
    """The page's steps for a run with `variants` (optional steps asked for), on a real cluster or not."""
    wanted = set(variants)
    found = [s for s in map(step, page_blocks(page)) if s is not None]
    unknown = wanted - {s.variant for s in found}
    if unknown:
        raise ValueError(f"{page.name} has no step of variant {', '.join(sorted(unknown))}")
    return [
        s
        for s in found
        if (s.variant is None or s.variant in wanted) and (real_cluster or not s.real_cluster_only)
    ]


def variants_of(page: Path) -> list[str]:
    """The optional steps' variants the page names."""
    return sorted({s.variant for s in map(step, page_blocks(page)) if s is not None and s.variant})


def script(chosen: list[Step]) -> str:
    """The bash steps as one script, each announced with the page and line it comes from."""
    return "\n".join(f"echo '### {s.block.id}'\n{s.block.code}" for s in chosen if s.saved_as is None)


def needs_airflow(chosen: list[Step]) -> bool:
    return any(s.saved_as is None and CALLS_AIRFLOW.search(s.block.code) for s in chosen)


def environment(work: Path, kubeconfig: Path, base: Mapping[str, str]) -> dict[str, str]:
    """`base` without any Airflow connection, provider option or kubeconfig of its own, plus the folder's
    Airflow and the admin's kubeconfig; the running Python's scripts first on PATH."""
    env = {
        k: v
        for k, v in base.items()
        if not k.startswith(("AIRFLOW_CONN_", "AIRFLOW__KRUISE_CHAIN__")) and k != "KUBECONFIG"
    }
    airflow = work / "airflow"
    env.update(
        KUBECONFIG=str(kubeconfig),
        HOME=str(work / "home"),
        AIRFLOW_HOME=str(airflow),
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{airflow}/airflow.db",
        AIRFLOW__CORE__DAGS_FOLDER=str(work / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}",
    )
    return env


def migrate(env: Mapping[str, str], timeout: float = 600) -> None:
    """A fresh Airflow metadata database where `env` points (`airflow db migrate`)."""
    Path(env["AIRFLOW_HOME"]).mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["airflow", "db", "migrate"], env=dict(env), check=True, stdout=subprocess.DEVNULL, timeout=timeout
    )


def run(
    page: Path,
    kubeconfig: Path,
    work: Path,
    *,
    variants: Iterable[str] = (),
    real_cluster: bool = False,
    airflow_db: Path | None = None,
    base_env: Mapping[str, str] | None = None,
    capture: bool = True,
    timeout: float = 1200,
) -> subprocess.CompletedProcess[str]:
    """Run the page's steps with `bash -euo pipefail` in `work`, a new folder (a copy of deploy/ and the saved
    files in it). `airflow_db`: a migrated database to copy instead of migrating one."""
    chosen = steps(page, variants, real_cluster)
    if work.exists():
        raise ValueError(f"{work} exists: give a folder to create")
    shutil.copytree(ROOT / "deploy", work / "deploy")
    (work / "dags").mkdir()
    (work / "home").mkdir()
    for s in chosen:
        if s.saved_as is not None:
            target = work / s.saved_as
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(s.block.code)
    env = environment(work, kubeconfig, os.environ if base_env is None else base_env)
    if needs_airflow(chosen):
        if airflow_db is None:
            migrate(env)
        else:
            (work / "airflow").mkdir()
            shutil.copy(airflow_db, work / "airflow" / "airflow.db")
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script(chosen)],
        cwd=work,
        env=env,
        capture_output=capture,
        text=True,
        timeout=timeout,
    )


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(prog="python tests/doc_pages.py", description=__doc__.split("\n\n")[0])
    cli.add_argument("page", type=Path, help="the page, e.g. docs/getting-started-cluster.md")
    cli.add_argument("--kubeconfig", type=Path, required=True, help="the cluster admin's kubeconfig")
    cli.add_argument("--work", type=Path, help="a new folder to run in (default: a temporary one)")
    cli.add_argument("--variant", action="append", default=[], help="run this optional step too")
    cli.add_argument(
        "--real-cluster", action="store_true", help=f"run the `{REAL_ONLY}` blocks too (helm's own)"
    )
    return cli


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="doc-page-")) / "work"
    done = run(
        args.page.resolve(),
        args.kubeconfig.resolve(),
        work.resolve(),
        variants=args.variant,
        real_cluster=args.real_cluster,
        capture=False,
    )
    print(f"### {args.page}: exit status {done.returncode} (ran in {work})")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
