"""The go path's latency: from a go's patch to its stage's start, by the annotation alone and with the fast
go (`core/fastgo.py`: the run spec also through `pods/exec`), on the local cluster.

    python bench/go_latency.py --gos 40 --profile realistic

One chain pod whose two slots hold the same image, so every swap is a go (annotations only). The gos
alternate between the two paths (`--gos` in all, half each) and between the slots, each followed to its
result before the next (as a chain's stages are), `--pause` seconds apart (a slot's runner polls every
0.02 s for about 5 s after a generation of its own ends, every 0.1 s otherwise; the next go goes into the
other slot). A go's latency: from just before the patch request to the runner's start of the stage (the
start time its result line carries, on the same host clock). Prints median, p95 and max per path, and the
exec request's own duration (`deliver_go`, from its start to the `--go` command's end).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a script: the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IMAGE = "busybox:1.36"


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gos", type=int, default=40, help="gos in all (half by each path)")
    parser.add_argument("--profile", default="realistic", choices=["fast", "realistic"])
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between a result and the next go")
    args = parser.parse_args()

    from kruise_local import ClusterConfig, LocalCluster

    from airflow_kruise_chain.core.driver import StageDriver, Timeouts
    from airflow_kruise_chain.core.fastgo import deliver_go
    from airflow_kruise_chain.core.manifest import build_chain_pod
    from airflow_kruise_chain.core.spec import ChainSpec, StageSpec
    from airflow_kruise_chain.hooks.kruise import KruiseHook

    work = tempfile.TemporaryDirectory(prefix="bench-go-")  # removed at the end, the cluster's files with it
    root = Path(work.name)
    latencies: dict[str, list[float]] = {"annotation": [], "exec": []}
    notes: list[str] = []
    exec_calls: list[float] = []  # the exec request alone, from its start to the command's end
    annotation_first = 0  # exec gos the annotation started first (the runner said the exec was not needed)
    with work, LocalCluster(ClusterConfig(profile=args.profile, root=str(root / "cluster"))) as cluster:
        hook = KruiseHook(conn_id=None, config_file=str(cluster.write_kubeconfig(root / "kubeconfig")))
        chain = ChainSpec(name="go", namespace="default", stages=[StageSpec("s", IMAGE, ["true"])])
        hook.ensure_runner_configmap("default")  # as a chain's setup does
        hook.create_pod(
            build_chain_pod(chain, pod_name="go", dag_id="go", run_id="r", first_images=(IMAGE, IMAGE)),
            "default",
        )
        deadline = time.monotonic() + 120
        while getattr(hook.read_pod("go", "default"), "phase", "") != "Running":
            if time.monotonic() > deadline:
                sys.exit("the chain pod did not run within 120 s")
            time.sleep(0.2)
        time.sleep(6)  # past the runners' fast polls after their start
        driver = StageDriver(hook, "go", "default")
        for i in range(args.gos):
            path = ("annotation", "exec")[(i // 2) % 2]  # a, a, e, e, ...: each path into both slots
            t0 = time.time()
            plan = driver.swap(StageSpec(f"s{i}", IMAGE, ["true"]), 1, Timeouts())
            if plan.action != "go":
                sys.exit(f"go {i} was planned as {plan.action!r}, not a go")
            if path == "exec":
                t1 = time.time()
                if not deliver_go(hook, plan, notes.append):
                    if "not needed" not in notes[-1]:  # the exec failed: this path was not measured
                        sys.exit(f"the fast go was not taken: {notes}")
                    annotation_first += 1  # both were sent, as the provider does; the annotation won the race
                exec_calls.append(time.time() - t1)
            result = driver.follow(plan, Timeouts())
            latencies[path].append(result.started_at.timestamp() - t0)
            time.sleep(args.pause)
    print(
        f"go latency, {args.profile} profile, {args.gos} gos ({args.pause:g} s apart), patch -> stage start:"
    )
    for path, values in latencies.items():
        print(
            f"  {path:10} n={len(values):3}  median {statistics.median(values):.3f} s  "
            f"p95 {p95(values):.3f} s  max {max(values):.3f} s"
        )
    print(
        f"  (the exec request itself: median {statistics.median(exec_calls):.3f} s, "
        f"p95 {p95(exec_calls):.3f} s; the annotation was first in {annotation_first} of "
        f"{len(exec_calls)} exec gos)"
    )


if __name__ == "__main__":
    main()
