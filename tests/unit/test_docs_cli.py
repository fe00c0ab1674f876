"""The docs name only what exists: README's table of documentation pages lists each page once, and every
command-line option the docs give one of the project's commands (`airflow`, `kruise-local`, `kruise-chain`,
`kubectl`, `./dev.sh`, the scripts under example_dags/ and bench/, pytest) is one that command's `--help`
names (for `airflow` and pytest, whose start-up is the slow part: their parsers, in this process, which their
`--help` prints). A command is found at the start of a code span or of a code block's line (after `$`, `&&`,
`;` or `|`); its subcommand is the words before its first option. CHANGELOG.md is history: it may name what
is gone."""

from __future__ import annotations

import argparse
import functools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "ARCHITECTURE.md",
    ROOT / "kruise-local" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
BIN = Path(sys.executable).parent
SPAN = re.compile(r"`([^`\n]+)`")
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```$", re.S | re.M)
SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")
OPTION = re.compile(r"^--?[A-Za-z][-A-Za-z0-9_]*")
DEV_SH = {"test": ["-m", "pytest"], "example": ["example_dags/run_example.py"], "bench": ["bench/run.py"]}
"""what `./dev.sh COMMAND ARGS` hands its ARGS to"""


def _lines(page: Path) -> list[str]:
    """The command-like texts of a page: each code span, each line of its code blocks (continuations
    joined), and the commands substituted in them (`$(...)`)."""
    text = page.read_text()
    blocks = [block.replace("\\\n", " ") for block in FENCED.findall(text)]
    outside = FENCED.sub("", text)
    lines = [line for block in blocks for line in block.splitlines()] + SPAN.findall(outside)
    return lines + [inner for line in lines for inner in SUBSTITUTION.findall(line)]


def _commands(text: str) -> list[list[str]]:
    """The commands in one line of shell: its words, split at `&&`, `||`, `;` and `|`."""
    try:
        words = shlex.split(text.lstrip("$ "), comments=True)
    except ValueError:
        return []
    commands, current = [], []
    for word in words:
        if word in ("&&", "||", ";", "|"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    return [c for c in [*commands, current] if c]


def _program(words: list[str]) -> tuple[list[str], list[str]] | None:
    """(the help command of `words`' program and subcommand, the options `words` give it), or None when
    `words` run none of the project's commands."""
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value before the command
        words = words[1:]
    if not words:
        return None
    head, rest = words[0], words[1:]
    if head in ("python", "python3") and rest[:2] == ["-m", "pytest"]:
        base, rest = [sys.executable, "-m", "pytest"], rest[2:]
    elif head in ("python", "python3") and rest and re.match(r"^(example_dags|bench)/\w+\.py$", rest[0]):
        base, rest = [sys.executable, rest[0]], rest[1:]
    elif head == "./dev.sh" and rest and rest[0] in DEV_SH:
        base, rest = [sys.executable, *DEV_SH[rest[0]]], rest[1:]
    elif head == "pytest":
        base = [sys.executable, "-m", "pytest"]
    elif head == "airflow":
        base = [sys.executable, "-m", "airflow"]
    elif head in ("kruise-local", "kruise-chain"):
        base = [str(BIN / head)]
    elif head == "kubectl" and shutil.which("kubectl"):
        base = [shutil.which("kubectl") or "kubectl"]
    else:
        return None
    options = [OPTION.match(w).group(0) for w in rest if OPTION.match(w)]  # type: ignore[union-attr]
    if "pytest" in base or base[-1].endswith(".py"):
        return base, options  # no subcommands
    start = 0
    while start < len(rest) and OPTION.match(rest[start]):  # global options first, each with its value
        start += 1 if "=" in rest[start] else 2
    sub = []
    for word in rest[start:]:
        if OPTION.match(word):
            break
        sub.append(word)
    return base + sub[:3], options


@functools.cache
def _help(command: tuple[str, ...]) -> str:
    """The `--help` of `command`, or of its longest prefix that answers one (the last words may be a
    subcommand's arguments); for kubectl with its global options."""
    for end in range(len(command), 0, -1):
        done = subprocess.run(
            [*command[:end], "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode == 0 and done.stdout:
            extra = ""
            if Path(command[0]).name == "kubectl":
                extra = subprocess.run([command[0], "options"], capture_output=True, text=True).stdout
            return done.stdout + extra
    raise AssertionError(f"{' '.join(command)} answers no --help")


def _documented() -> dict[tuple[str, ...], dict[str, list[str]]]:
    """help command -> option -> the pages that give it."""
    found: dict[tuple[str, ...], dict[str, list[str]]] = {}
    for page in PAGES:
        for line in _lines(page):
            for words in _commands(line):
                if (program := _program(words)) is not None:
                    command, options = program
                    for option in options:
                        pages = found.setdefault(tuple(command), {}).setdefault(option, [])
                        pages.append(str(page.relative_to(ROOT)))
    return found


DOCUMENTED = _documented()


def test_the_docs_give_options_of_every_kind_of_command() -> None:
    programs = {Path(c[0]).name if c[0] != sys.executable else c[1] for c in DOCUMENTED}
    assert {"-m", "kruise-local", "kruise-chain", "bench/scheduler.py"} <= programs, programs
    assert sum(len(options) for options in DOCUMENTED.values()) > 30


def _airflow_options(path: tuple[str, ...]) -> set[str]:
    """The options of `airflow PATH...` (its longest prefix that is a command), from Airflow's CLI parser."""
    from airflow.cli.cli_parser import get_parser

    parser: argparse.ArgumentParser = get_parser()
    for word in path:
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not commands or word not in commands[0].choices:
            break
        parser = commands[0].choices[word]
    return {option for action in parser._actions for option in action.option_strings}


@pytest.mark.parametrize("command", sorted(DOCUMENTED), ids=lambda c: " ".join(Path(w).name for w in c))
def test_every_option_the_docs_give_is_one_the_command_has(
    command: tuple[str, ...], pytestconfig: pytest.Config
) -> None:
    if command[1:3] == ("-m", "airflow"):
        options = _airflow_options(command[3:])
        known = options.__contains__
    elif command[1:3] == ("-m", "pytest"):  # this pytest, with this repository's plugins and conftests

        def known(option: str) -> bool:
            try:
                pytestconfig.getoption(option)
            except ValueError:
                return False
            return True
    else:
        text = _help(command)

        def known(option: str) -> bool:
            return re.search(rf"(?<![-\w]){re.escape(option)}(?![-\w])", text) is not None

    unknown = {option: pages for option, pages in DOCUMENTED[command].items() if not known(option)}
    assert unknown == {}, f"not in `{' '.join(command)} --help`"


def test_readme_lists_each_page_once() -> None:
    text = (ROOT / "README.md").read_text()
    table = text.split("## Documentation", 1)[1]
    linked = re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \|", table, re.M)
    targets = [target for _, target in linked]
    assert len(targets) > 10
    assert sorted({t for t in targets if targets.count(t) > 1}) == []
    on_disk = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert on_disk - set(targets) == set(), "a page of docs/ that README's table does not list"


SCRIPT_USAGE = re.compile(r"^Usage: python (\S+\.py)(.*)$", re.M)
SCRIPTS = sorted(
    (path, match)
    for folder in ("example_dags", "bench")
    for path in (ROOT / folder).glob("*.py")
    for match in SCRIPT_USAGE.findall(path.read_text())
)


@pytest.mark.parametrize(("path", "usage"), SCRIPTS, ids=[str(p.relative_to(ROOT)) for p, _ in SCRIPTS])
def test_a_script_s_usage_line_names_only_its_options(path: Path, usage: tuple[str, str]) -> None:
    """A script's docstring `Usage:` line (argparse shows it in `--help` too) names options its parser has:
    those of the usage argparse writes from the parser, the first paragraph of `--help`."""
    script, options = usage
    assert (ROOT / script) == path
    done = subprocess.run(
        [sys.executable, script, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    generated = done.stdout.split("\n\n", 1)[0]
    named = re.findall(r"(?<![-\w])--?[A-Za-z][-\w]*", options)
    assert named and [o for o in named if o not in generated] == []
