"""Benchmarks v5 (issue 40), the whole quiet set in one command, one summary file.

    python bench/v5_all.py            # the quiet set: about 46 min on the quiet 2-core machine
    python bench/v5_all.py --list     # the commands it runs, each with its expected duration
    python bench/v5_all.py --smoke    # the same commands made small (N = 3, few modes): about 17 min loaded

Runs, one after the other (nothing else should run meanwhile: every figure is a time), the commands of `STEPS`
(`bench/pipelines.py` scenarios on the realistic profile: chain with the go by exec and by the annotation
alone, tuned KPO, all at once, KubernetesPodExecOperator in one pod (one image) and the no-op floor,
N = 3/10/50, distinct / one / alternating images, skewed requests, 0.2 s and 5 s stages; 10 pipelines at
once on the fast profile; the go path alone, `bench/go_latency.py`; under the real scheduler,
`bench/scheduler.py`: chain and no-op DAGs on LocalExecutor and on CeleryExecutor (PostgreSQL, Redis, two
workers), and deferrable stages of 2, 12 and 60 s against plain ones on both executors, with the provider's
defaults and no settings file), then writes `bench/results/v5-summary.md` (and `.json`): per scenario the
overhead per stage, median and p95, split into the Airflow part, the chain's part up to the go and the
kubelet's part from the go to the stage's start, the modes side by side; peak RSS (or "not measured") and
reserved GiB·s; the go path's latency; the real scheduler's start-to-start and where a deferred stage's time
goes; the MET / MISSED lines of issue 23's targets, issue 16's and issue 40's; each command's duration and
the load average before and after (a quiet machine reads < 0.5 before). Each step's own results stay in
`bench/results/v5-<step>.{md,json}`."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import figures

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
V5_MODES = "noop,chain,chain-annotation,kpo1,all"
MODE_ORDER = ("noop", "chain", "chain-annotation", "podexec", "kpo1", "kpo", "all")
MODE_NAMES = {
    "noop": "no-op tasks (floor)",
    "chain": "chain (go by exec + annotation)",
    "chain-annotation": "chain, go by annotation only",
    "kpo1": "KPO tuned (startup check 1 s)",
    "kpo": "KPO default",
    "all": "all at once",
    "podexec": "KubernetesPodExecOperator, one pod",
}


@dataclass(frozen=True)
class Step:
    """One command of the set: its results' name, its arguments (after `python`), the same made small for
    `--smoke`, and how long it takes on the quiet 2-core machine (minutes, estimated from the smoke runs'
    per-scenario times, the loaded v4 run's walls and the stages' lengths)."""

    name: str
    what: str
    argv: tuple[str, ...]
    smoke: tuple[str, ...]
    minutes: float

    def command(self, smoke: bool) -> list[str]:
        argv = list(self.smoke if smoke else self.argv)
        if argv[0] == "bench/pipelines.py":
            argv += ["--out", f"v5{'smoke' if smoke else ''}-{self.name}"]
        return argv


def pipelines(profile: str, workloads: str, stages: str, modes: str, *more: str) -> tuple[str, ...]:
    """A bench/pipelines.py command (one pipeline at a time unless `more` says --copies)."""
    extra = more if "--copies" in more else (*more, "--copies", "1")
    args = f"--profiles {profile} --workloads {workloads} --stages {stages} --modes {modes}".split()
    return ("bench/pipelines.py", *args, *extra)


def scheduler(*args: str) -> tuple[str, ...]:
    """A bench/scheduler.py command."""
    return ("bench/scheduler.py", *" ".join(args).split())


def deferrable(executor: str, stages: str, pauses: str) -> tuple[str, ...]:
    """Deferrable stages against plain ones under the real scheduler, with the provider's defaults and no
    settings file (issue 40: within 0.3 s start-to-start whatever the stage's length)."""
    return scheduler(
        f"--executor {executor} --stages {stages} --workload long --pause {pauses}",
        "--modes chain,chain-deferrable --profile realistic",
    )


STEPS = (
    Step(
        "distinct",
        "realistic, distinct images, N = 3/10/50, every mode (flat in N; 50 tuned KPO pods take ~3.5 min)",
        pipelines("realistic", "distinct", "3,10,50", V5_MODES),
        pipelines("realistic", "distinct", "3", V5_MODES),
        10.0,
    ),
    Step(
        "images",
        "realistic, one image and alternating images, N = 10, every mode; KubernetesPodExecOperator in one "
        "pod where it can run (one image)",
        pipelines("realistic", "one,alternating", "10", V5_MODES + ",podexec"),
        pipelines("realistic", "one", "3", "chain,podexec,kpo1"),
        4.0,
    ),
    Step(
        "skewed",
        "realistic, skewed requests (the middle stage 1Gi), N = 10: reserved memory vs KPO and all at once",
        pipelines("realistic", "skewed", "10", "chain,kpo1,all"),
        pipelines("realistic", "skewed", "3", "chain,kpo1,all"),
        1.5,
    ),
    Step(
        "long",
        "realistic, 5 s stages, N = 3, every mode",
        pipelines("realistic", "long", "3", V5_MODES),
        pipelines("realistic", "long", "3", "chain"),
        2.5,
    ),
    Step(
        "at-once",
        "fast profile, N = 10: one pipeline, then 10 pipelines at once (10 DAG processes, one cluster)",
        pipelines("fast", "distinct", "10", "noop,chain,kpo1,all", "--copies", "10", "--copies-stages", "10"),
        pipelines("fast", "distinct", "3", "chain", "--copies", "3", "--copies-stages", "3"),
        4.0,
    ),
    Step(
        "go",
        "the go path alone: 40 gos on one chain pod, by the annotation and by exec, realistic profile",
        ("bench/go_latency.py", "--gos", "40", "--profile", "realistic"),
        ("bench/go_latency.py", "--gos", "8", "--profile", "realistic"),
        1.0,
    ),
    Step(
        "scheduler",
        "under the real scheduler (LocalExecutor, default settings): chain vs no-op start-to-start, N = 10",
        scheduler("--stages 10 --profile realistic"),
        scheduler("--stages 3 --profile realistic"),
        1.5,
    ),
    Step(
        "scheduler-celery",
        "under a production-shaped Airflow (PostgreSQL, Redis, CeleryExecutor, two workers; default "
        "settings): chain vs the same DAG of sleeping tasks, start-to-start, N = 10",
        scheduler("--executor celery --stages 10 --profile realistic"),
        scheduler("--executor celery --stages 3 --profile realistic"),
        2.5,
    ),
    Step(
        "deferrable",
        "LocalExecutor: 2, 12 and 60 s stages, plain vs deferrable (provider defaults), N = 3: a deferrable "
        "stage within 0.3 s of a plain one whatever its length",
        deferrable("local", "3", "2,12,60"),
        deferrable("local", "2", "2,12"),
        9.0,
    ),
    Step(
        "deferrable-celery",
        "CeleryExecutor: 2, 12 and 60 s stages, plain vs deferrable (provider defaults), N = 3",
        deferrable("celery", "3", "2,12,60"),
        deferrable("celery", "2", "2,12"),
        10.0,
    ),
)
SCHEDULER_STEPS = {
    "scheduler": "Under the real scheduler, LocalExecutor (`bench/scheduler.py`)",
    "scheduler-celery": "Under the real scheduler, CeleryExecutor (`bench/scheduler.py --executor celery`)",
    "deferrable": "Deferrable stages of 2, 12 and 60 s, LocalExecutor (`bench/scheduler.py`)",
    "deferrable-celery": "Deferrable stages of 2, 12 and 60 s, CeleryExecutor (`bench/scheduler.py`)",
}
"""the bench/scheduler.py steps, each with its summary section's title"""


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def run(steps: Sequence[Step], smoke: bool, repo: Path) -> dict[str, Any]:
    """Run each step's command from the repository, its output through to ours; what each took."""
    done: dict[str, Any] = {}
    for step in steps:
        argv = [sys.executable, *step.command(smoke)]
        expected = "" if smoke else f"  (expected ~{step.minutes:g} min)"
        print(f"== {step.name}: {' '.join(step.command(smoke))}{expected}", flush=True)
        before, t0, started = loadavg(), time.monotonic(), time.time()
        with subprocess.Popen(
            argv, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        ) as proc:
            output = []
            for line in proc.stdout or ():
                sys.stdout.write(line)
                sys.stdout.flush()
                output.append(line)
        done[step.name] = {
            "command": "python " + " ".join(step.command(smoke)),
            "seconds": time.monotonic() - t0,
            "exit": proc.returncode,
            "started": started,
            "load_before": before,
            "load_after": loadavg(),
            "output": "".join(output),
        }
    return done


QUIET_LOAD = 1.5
"""a set that starts above this 1-minute load average does not run on a quiet machine (only the first
command's counts: the set's own scenarios leave a load of about 1-2 behind them)"""


def _load1(text: str) -> float:
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return float("inf")


def _f(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or v != v else f"{v:.{digits}f}"


def _mp(r: Mapping[str, Any], median: str, p95: str) -> str:
    return f"{_f(r.get(median))} ({_f(r.get(p95))})"


def scenario_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per scenario and mode, the modes of a scenario side by side (floor, chain by exec, chain
    by annotation, tuned KPO, all at once)."""
    head = (
        "| profile | workload | N | at once | mode | overhead/stage s median (p95) | Airflow part | "
        "chain part: to the go | kubelet part: go → start | wall s | peak RSS MiB | reserved GiB·s | ok |"
    )
    lines = [head, "|" + "---|" * 13]

    def order(r: Mapping[str, Any]) -> tuple[Any, ...]:
        mode = MODE_ORDER.index(r["mode"]) if r["mode"] in MODE_ORDER else len(MODE_ORDER)
        return (r["profile"] != "realistic", r["workload"], r["copies"], r["stages"], mode)

    for r in sorted(rows, key=order):
        lines.append(
            "| "
            + " | ".join(
                [
                    r["profile"],
                    r["workload"],
                    str(r["stages"]),
                    str(r["copies"]),
                    MODE_NAMES.get(r["mode"], r["mode"]),
                    _mp(r, "overhead_median_s", "overhead_p95_s"),
                    _mp(r, "overhead_to_request_median_s", "overhead_to_request_p95_s"),
                    _mp(r, "own_part_median_s", "own_part_p95_s"),
                    _mp(r, "kubelet_part_median_s", "kubelet_part_p95_s"),
                    _f(r.get("wall_s"), 1),
                    figures.memory_cell(r),
                    _f(r.get("reserved_gib_s"), 2),
                    "yes" if not r.get("problems") else "NO: " + "; ".join(r["problems"])[:200],
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def summary(
    results: Mapping[str, Mapping[str, Any]], runs: Mapping[str, Mapping[str, Any]], smoke: bool
) -> str:
    """The summary file: how it was run, the scenarios, the go path, the targets.

    `results`: step name -> its bench/pipelines.py JSON (`results`, `failures`, `machine`); `runs`: step
    name -> `run`'s record of the command (command, seconds, exit, load before/after, output)."""
    rows = [r for res in results.values() for r in res.get("results", [])]
    chain_modes = [m for m in ("chain", "chain-annotation") if any(r["mode"] == m for r in rows)]
    machine = next((res.get("machine") for res in results.values() if res.get("machine")), {})
    total = sum(r["seconds"] for r in runs.values())
    out = [
        f"# Benchmarks v5{' (SMOKE: small, not for the docs)' if smoke else ''}: `python bench/v5_all.py"
        f"{' --smoke' if smoke else ''}`",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, commit {git_commit()}, {machine.get('cpus', '?')} CPUs "
        f"({machine.get('cpu_model', '?')}), {machine.get('memory', '?')}, "
        f"Python {machine.get('python', '?')}, "
        f"Airflow {machine.get('airflow', '?')}, cncf.kubernetes {machine.get('cncf_kubernetes', '?')}; "
        f"total {total / 60:.1f} min.",
        "",
        "| step | command | took | exit | load average before → after |",
        "|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        out.append(
            f"| {name} | `{r['command']}` | {r['seconds'] / 60:.1f} min | {r['exit']} | "
            f"{r['load_before']} → {r['load_after']} |"
        )
    first = next(iter(runs.values()), None)
    if first is not None and _load1(first["load_before"]) > QUIET_LOAD:
        out += [
            "",
            f"**Not a quiet machine**: load average {first['load_before']} before the first command (above "
            f"{QUIET_LOAD:g}): every time is an upper bound.",
        ]
    out += ["", "## Per stage, median (p95), seconds", "", scenario_table(rows)]
    out.append(
        "Overhead per stage = stage k+1's start - stage k's end. *Airflow part*: stage k's end → the "
        "first API request of task k+1; *chain part: to the go*: that request → the go (the first pod "
        "PATCH, pods/exec or pod POST); *kubelet part*: the go → stage k+1's start (for KPO: the new "
        "pod's start). Peak RSS from the metrics API (*not measured*: metrics-server had no reading); "
        "reserved GiB·s per pipeline from the pods' requests (a pod watch; no metrics). Column "
        "definitions: docs/benchmarks.md."
    )
    if "go" in runs:
        text = runs["go"]["output"].strip().splitlines()
        out += ["", "## The go path alone (`bench/go_latency.py`)", "", "```", *text[-4:], "```"]
    verdicts = []
    for name, title in SCHEDULER_STEPS.items():
        if name in runs:
            text = [
                line for line in runs[name]["output"].strip().splitlines() if not line.startswith("kept ")
            ]
            verdicts += [line for line in text if line.startswith(("MET:", "MISSED:", "NOT MEASURED:"))]
            out += ["", f"## {title}", "", "```", *text, "```"]
    failures = [f for res in results.values() for f in res.get("failures", [])]
    failures += [f"{name}: exit {r['exit']}" for name, r in runs.items() if r["exit"] != 0]
    out += ["", "## Targets (issue 40, issue 23, then issue 16)", ""]
    lines = (
        figures.targets_v5(rows) + figures.targets_v4(rows, chain_modes) + figures.targets(rows, chain_modes)
    )
    if verdicts:  # bench/scheduler.py's own verdicts instead of "not in this run"
        lines = [line for line in lines if "under the real scheduler" not in line] + verdicts
    out += [f"- {line}" for line in lines]
    if failures:
        out += ["", "## Failed", "", *[f"- {f}" for f in failures]]
    return "\n".join(out) + "\n"


def stale_install(repo: Path) -> list[str]:
    """The entry points the checkout's pyproject files declare that the installed packages lack (an editable
    install older than the checkout: e.g. the provider's Airflow plugin, without which the chain page is
    missing). Empty when the install is current."""
    import tomllib
    from importlib.metadata import entry_points

    missing = []
    for pyproject in (repo / "pyproject.toml", repo / "kruise-local" / "pyproject.toml"):
        declared = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {})
        for group, names in declared.items():
            installed = {ep.name for ep in entry_points(group=group)}
            missing += [f"{group}: {name}" for name in names if name not in installed]
    return missing


def git_commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent, capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--smoke", action="store_true", help="the same commands made small (about 17 min on a loaded machine)"
    )
    ap.add_argument("--list", action="store_true", help="print the commands and their expected durations")
    ap.add_argument("--steps", help="comma-separated subset of: " + ", ".join(s.name for s in STEPS))
    args = ap.parse_args()
    steps = list(STEPS)
    if args.steps:
        wanted = args.steps.split(",")
        unknown = [w for w in wanted if w not in {s.name for s in STEPS}]
        if unknown:
            names = ", ".join(s.name for s in STEPS)
            ap.error(f"--steps: unknown step(s) {', '.join(unknown)}; choose from {names}")
        steps = [s for s in STEPS if s.name in wanted]
    if args.list:
        for s in steps:
            took = "" if args.smoke else f"; ~{s.minutes:g} min"
            print(f"python {' '.join(s.command(args.smoke))}   # {s.what}{took}")
        if not args.smoke:
            print(f"# total ~{sum(s.minutes for s in steps):g} min (quiet machine)")
        return 0
    repo = HERE.parent
    missing = stale_install(repo)
    if missing:
        print(
            "the installed packages are older than this checkout (missing entry points: "
            f"{', '.join(missing)}): run `pip install -e ./kruise-local -e '.[test]'` (or ./dev.sh) "
            "in this venv first",
            file=sys.stderr,
        )
        return 2
    runs = run(steps, args.smoke, repo)
    results = {}
    for s in steps:
        path = RESULTS / f"v5{'smoke' if args.smoke else ''}-{s.name}.json"
        fresh = path.exists() and path.stat().st_mtime >= runs[s.name]["started"]
        if s.command(args.smoke)[0] == "bench/pipelines.py" and fresh:
            results[s.name] = json.loads(path.read_text())
    stem = "v5smoke-summary" if args.smoke else "v5-summary"
    text = summary(results, runs, args.smoke)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.md").write_text(text)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"runs": {k: {**v, "output": v["output"][-4000:]} for k, v in runs.items()}}, indent=2)
        + "\n"
    )
    print("\n" + text + f"\nwrote {RESULTS / (stem + '.md')}")
    return 0 if all(r["exit"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    os.chdir(HERE.parent)
    sys.exit(main())
