"""tests/doc_pages.py, the runner of a page's blocks in order (the tests' and the kind job's): which blocks a
run takes, the markers it refuses, and the script it runs (order, fresh folder, the environment it gives)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import doc_pages

IN_ORDER = doc_pages.IN_ORDER


def _page(tmp_path: Path, *blocks: tuple[str, str, str]) -> Path:
    """A page of (marker, language, code) blocks."""
    parts = ["# a page\n"]
    for marker, lang, code in blocks:
        parts.append(f"<!-- docs-test: {marker} -->\n" if marker else "")
        parts.append(f"```{lang}\n{code}\n```\n\nsome prose\n")
    page = tmp_path / "page.md"
    page.write_text("".join(parts))
    return page


def _codes(steps: list[doc_pages.Step]) -> list[str]:
    return [s.block.code.strip() for s in steps]


def test_a_run_takes_its_blocks_in_order_the_optional_ones_when_asked(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        ("real cluster only: helm installs from the internet", "bash", "helm install x"),
        (IN_ORDER, "bash", "echo one"),
        (f"{IN_ORDER}; variant mirror", "bash", "echo mirror"),
        ("skip: never run anywhere, for a reason", "bash", "echo skipped"),
        (f"{IN_ORDER}; saved as dags/a.py", "python", "A = 1"),
        ("", "bash", "echo not in order"),
        (IN_ORDER, "bash", "echo two"),
    )
    assert _codes(doc_pages.steps(page)) == ["echo one", "A = 1", "echo two"]
    assert _codes(doc_pages.steps(page, ["mirror"])) == ["echo one", "echo mirror", "A = 1", "echo two"]
    assert _codes(doc_pages.steps(page, real_cluster=True))[:2] == ["helm install x", "echo one"]
    assert doc_pages.variants_of(page) == ["mirror"]
    with pytest.raises(ValueError, match="no step of variant other"):
        doc_pages.steps(page, ["other"])


@pytest.mark.parametrize(
    ("marker", "lang", "says"),
    [
        (IN_ORDER, "python", "says where it is saved"),
        (f"{IN_ORDER}; saved as a.py", "bash", "says where it is saved"),
        (f"{IN_ORDER}; saved as ../outside.py", "python", "unknown modifier"),
        (f"{IN_ORDER}; saved as /etc/x.py", "python", "unknown modifier"),
        (f"{IN_ORDER}; variant", "bash", "unknown modifier"),
        (f"{IN_ORDER}; in a hurry", "bash", "unknown modifier"),
        (IN_ORDER, "yaml", "says where it is saved"),
        ("real cluster only: why", "bash", "says why"),
        ("real cluster only: helm installs from the internet", "python", "marks a bash block"),
    ],
)
def test_a_marker_the_runner_cannot_follow_is_refused_naming_the_block(
    tmp_path: Path, marker: str, lang: str, says: str
) -> None:
    (block,) = doc_pages.page_blocks(_page(tmp_path, (marker, lang, "x")))
    with pytest.raises(ValueError, match=says) as raised:
        doc_pages.step(block)
    assert f"{tmp_path / 'page.md'}:3" in str(raised.value)


def test_the_script_runs_in_a_new_folder_with_deploy_the_saved_files_and_the_kubeconfig(
    tmp_path: Path,
) -> None:
    page = _page(
        tmp_path,
        (IN_ORDER, "bash", 'echo "$KUBECONFIG" > seen; ls deploy/kustomization.yaml >> seen'),
        (f"{IN_ORDER}; saved as dags/first.py", "python", "print('hello')"),
        (IN_ORDER, "bash", 'env | grep -c "^AIRFLOW_CONN_\\|^AIRFLOW__KRUISE_CHAIN__" >> seen || true'),
        (IN_ORDER, "bash", 'echo "$HOME|$AIRFLOW__CORE__DAGS_FOLDER" >> seen; python dags/first.py >> seen'),
    )
    work = tmp_path / "work"
    base = {**os.environ, "AIRFLOW_CONN_X": "{}", "AIRFLOW__KRUISE_CHAIN__RUNNER_IMAGE": "y"}
    base["KUBECONFIG"] = "z"
    done = doc_pages.run(page, tmp_path / "admin.kubeconfig", work, base_env=base)
    assert done.returncode == 0, done.stderr
    assert "### " in done.stdout and f"{page}:3" in done.stdout  # each step announced with its place
    assert (work / "seen").read_text().splitlines() == [
        str(tmp_path / "admin.kubeconfig"),
        "deploy/kustomization.yaml",
        "0",  # the caller's connections and provider options are not the page's
        f"{work / 'home'}|{work / 'dags'}",
        "hello",
    ]
    with pytest.raises(ValueError, match="exists"):  # never run over a folder that holds something
        doc_pages.run(page, tmp_path / "admin.kubeconfig", work)


def test_a_failing_step_fails_the_run_and_nothing_after_it_runs(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        (IN_ORDER, "bash", "false | cat"),  # pipefail: a failure inside a pipe counts
        (IN_ORDER, "bash", "touch after"),
    )
    done = doc_pages.run(page, tmp_path / "admin", tmp_path / "work")
    assert done.returncode != 0
    assert not (tmp_path / "work" / "after").exists()


def test_airflow_is_set_up_only_for_a_page_that_calls_it(tmp_path: Path) -> None:
    calls = _page(tmp_path, (IN_ORDER, "bash", "echo x\nairflow dags test first"))
    assert doc_pages.needs_airflow(doc_pages.steps(calls))
    quiet = _page(tmp_path, (IN_ORDER, "bash", "echo airflow dags test first"))
    assert not doc_pages.needs_airflow(doc_pages.steps(quiet))
    db = tmp_path / "template.db"
    db.write_bytes(b"migrated")
    page = _page(tmp_path, (IN_ORDER, "bash", 'airflow() { cat "$AIRFLOW_HOME/airflow.db"; }\nairflow'))
    done = doc_pages.run(page, tmp_path / "admin", tmp_path / "work", airflow_db=db)
    assert done.returncode == 0 and done.stdout.endswith("migrated"), done.stderr


def test_the_command_line_runs_a_page_and_answers_its_exit_status(tmp_path: Path, capfd) -> None:
    page = _page(tmp_path, (IN_ORDER, "bash", "echo ran; exit 3"))
    status = doc_pages.main([str(page), "--kubeconfig", str(tmp_path / "k"), "--work", str(tmp_path / "w")])
    assert status == 3
    out = capfd.readouterr().out
    assert "ran" in out and "exit status 3" in out
