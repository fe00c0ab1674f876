""".github/workflows/kind.yml, the job that runs docs/getting-started-cluster.md on a real (kind) cluster,
checked here where it cannot run (no Docker, no internet): valid YAML, every tool and action pinned and every
download checked, its shell clean, and its cluster steps nothing but the page's own, run by the same runner
with the same blocks the tests run against the local cluster (helm's install added). And every helm command
the project gives (README, docs, the provider's own advice) is the safe one: a chart version named, an
upgrade's values and feature gates kept."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_kruise_chain.core.kruise import GATE_HELP
from tests import doc_pages

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "kind.yml"
PAGE = ROOT / "docs" / "getting-started-cluster.md"
CLUSTER_TOOLS = ("kubectl", "helm", "airflow", "kruise-chain")


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _steps() -> list[dict[str, Any]]:
    (job,) = _workflow()["jobs"].values()
    return job["steps"]


def _commands(script: str) -> list[list[str]]:
    """The commands of a shell script: its lines (continuations joined), split at `|`, `&&`, `||`, `;`."""
    commands = []
    for line in script.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for word in [*words, ";"]:
            if word in ("|", "&&", "||", ";"):
                commands += [current] if current else []
                current = []
            else:
                current.append(word)
    return commands


def test_the_workflow_is_a_job_of_pinned_steps() -> None:
    workflow = _workflow()
    assert workflow["name"] == "kind" and workflow["permissions"] == {"contents": "read"}
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request", "workflow_dispatch"} <= set(triggers)
    env = workflow["env"]
    assert re.fullmatch(r"kindest/node:v1\.(3[3-9])\.\d+@sha256:[0-9a-f]{64}", env["KIND_NODE_IMAGE"])
    for tool in ("KIND", "HELM", "KUBECTL"):
        assert re.fullmatch(r"v\d+\.\d+\.\d+", env[f"{tool}_VERSION"]), tool
    for tool in ("KIND", "HELM"):
        assert re.fullmatch(r"[0-9a-f]{64}", env[f"{tool}_SHA256"]), tool
    uses = [step["uses"] for step in _steps() if "uses" in step]
    assert uses and all(re.fullmatch(r"actions/[-\w]+@[0-9a-f]{40}", u) for u in uses), uses
    for line in WORKFLOW.read_text().splitlines():
        if "uses:" in line:  # the commit's tag said beside it, for the reader
            assert re.search(r"@[0-9a-f]{40}\s+# v\d+\.\d+\.\d+$", line), line


def test_every_download_is_checked_before_use() -> None:
    (tools,) = [s["run"] for s in _steps() if "curl" in s.get("run", "")]
    commands = _commands(tools)
    downloads = [c[c.index("-o") + 1] for c in commands if c[0] == "curl" and "-o" in c]
    checked = [line for line in tools.splitlines() if "sha256sum -c -" in line]
    assert len(downloads) == 3 and len(checked) == 3
    for target, check in zip(downloads, checked, strict=True):
        assert target in check, (target, check)


def test_the_cluster_steps_are_the_pages_own_run_by_the_tests_runner() -> None:
    runs = [s for s in _steps() if "run" in s and s.get("if") != "failure()"]
    (page_step,) = [s for s in runs if "doc_pages.py" in s["run"]]
    (command,) = _commands(page_step["run"])
    assert command[:3] == ["python", "tests/doc_pages.py", "docs/getting-started-cluster.md"]
    args = doc_pages.parser().parse_args(command[2:])  # options the runner has
    assert args.real_cluster and (ROOT / args.page) == PAGE and args.variant == []  # no optional step
    for step in runs:  # no step but the page's touches the cluster or Airflow
        if step is not page_step:
            used = {c[0] for c in _commands(step["run"])}
            assert not used & set(CLUSTER_TOOLS), (step.get("name"), used)
    (kind,) = [c for s in runs for c in _commands(s["run"]) if c[:3] == ["kind", "create", "cluster"]]
    assert "--image" in kind and kind[kind.index("--image") + 1] == "$KIND_NODE_IMAGE"


def test_on_kind_the_page_runs_the_tested_steps_and_helms_install_only() -> None:
    here = doc_pages.steps(PAGE)
    there = doc_pages.steps(PAGE, real_cluster=True)
    added = [s for s in there if s not in here]
    assert [s for s in there if s in here] == here  # the same steps, in the same order
    assert added and all(s.real_cluster_only for s in added)
    for step in added:
        assert {c[0] for c in _commands(step.block.code)} == {"helm"}, step.block.id


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="./dev.sh test installs Debian's shellcheck")
def test_the_shell_it_runs_is_shellcheck_clean() -> None:
    scripts = [s["run"] for s in _steps() if "run" in s]
    scripts.append(doc_pages.script(doc_pages.steps(PAGE, doc_pages.variants_of(PAGE), real_cluster=True)))
    for script in scripts:
        done = subprocess.run(
            ["shellcheck", "--shell=bash", "--format=gcc", "-"], input=script, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + script


def _helm_commands() -> dict[str, list[str]]:
    """Every `helm install` and `helm upgrade` the project gives: where -> the commands' texts."""
    found: dict[str, list[str]] = {}
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in [ROOT / "README.md", *ROOT.glob("docs/*.md")]}
    texts["core/kruise.py GATE_HELP"] = GATE_HELP
    texts[str(WORKFLOW.relative_to(ROOT))] = WORKFLOW.read_text()
    for where, text in texts.items():
        joined = text.replace("\\\n", " ")
        commands = re.findall(r"helm (?:install|upgrade)\b[^`\n]*", joined)
        found[where] = commands
    return {where: commands for where, commands in found.items() if commands}


def test_every_helm_command_given_names_the_version_and_keeps_what_is_set() -> None:
    """Finding 6 of issue 36: `helm upgrade kruise openkruise/kruise --set
    featureGates="ImagePullJobGate=true"` upgraded the chart to whatever is newest, reset every value set
    before and replaced the gates set."""
    found = _helm_commands()
    assert {"README.md", "docs/getting-started-cluster.md", "core/kruise.py GATE_HELP"} <= set(found)
    for where, commands in found.items():
        for command in commands:
            assert "--version " in command, (where, command)
            if command.startswith("helm upgrade"):
                assert "--reuse-values" in command, (where, command)
                gates = re.search(r'featureGates="([^"]*)"', command)
                assert gates and re.search(r".\\,ImagePullJobGate=true$", gates.group(1)), (where, command)


def test_the_readme_says_the_kind_job_has_not_run() -> None:
    readme = (ROOT / "README.md").read_text()
    at = readme.index(".github/workflows/kind.yml")
    assert "has not run" in readme[at : at + 400]
