"""The pipelines benchmark's DAG processes (bench/pipelines.py): each runs `dag.test()` of the DAGs the
benchmark hands it, in a process of its own with its own AIRFLOW_HOME and SQLite database, warmed up once and
reused across scenarios. `python bench/dag_processes.py FOLDER` is one such process (`Workers` starts them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the repository on the path, for `bench.pipeline_dags`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import REPO, deployment_environment
from bench.pipeline_dags import DAG_HEADER


def child_env(home: Path, kubeconfig: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        }
    )
    deployment_environment(env)  # the repository on PYTHONPATH; bytecode caches, as a deployment has them
    if kubeconfig is not None:
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        )
    return env


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# -- one DAG run (child process) -------------------------------------------------------------------------
def worker(folder: str) -> None:
    """A DAG process: warms dag.test() up once, then runs the DAG of each job file the benchmark drops in
    `folder` (job-0.json, job-1.json, ...): loads it, says ready, waits for the go file, runs `dag.test()`."""
    import importlib.util

    here = Path(folder)
    dags = here / "dags"

    def load(path: Path, name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    warm = load(dags / "warmup.py", "bench_warmup").dag.test()
    (dags / "warmup.py").unlink()
    if str(warm.state) != "success":
        raise RuntimeError(f"warm-up DAG run ended {warm.state}")
    (here / "warm").touch()
    seq = 0
    while True:
        job_file = here / f"job-{seq}.json"
        while not job_file.exists():
            time.sleep(0.02)
        job = json.loads(job_file.read_text())
        if job.get("stop"):
            return
        dag_file = dags / "job.py"
        dag_file.write_text(job["dag_source"])
        dag = load(dag_file, f"bench_job_{seq}").dag
        Path(job["ready"]).touch()
        go = Path(job["go"])
        while not go.exists():
            time.sleep(0.002)
        t0 = time.time()
        try:
            run = dag.test()
            t1 = time.time()
            tis = run.get_task_instances()
            states = {ti.task_id: str(ti.state) for ti in tis}
            times = {  # Airflow's record of each task instance's start and end, by id without task group
                ti.task_id.rsplit(".", 1)[-1]: [
                    d.timestamp() if d else None for d in (ti.start_date, ti.end_date)
                ]
                for ti in tis
            }
            result = {"start": t0, "end": t1, "state": str(run.state), "tasks": states, "ti": times}
        except Exception as e:  # reported by the benchmark; the worker lives on
            result = {"start": t0, "end": time.time(), "state": f"error: {e!r}", "tasks": {}, "ti": {}}
        dag_file.unlink()
        Path(job["result"]).write_text(json.dumps(result))
        seq += 1


class Workers:
    """DAG processes, each with its own AIRFLOW_HOME (a copy of one migrated SQLite database); started as
    needed and reused across scenarios (Python start-up and dag.test()'s first-use cost are paid once)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.kubeconfig = work / "kubeconfig"  # rewritten for each scenario's cluster
        self.template = work / "airflow-template"
        self.template.mkdir(parents=True)
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            env=child_env(self.template, None),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.procs: list[dict[str, Any]] = []

    def ensure(self, count: int) -> list[dict[str, Any]]:
        for w in self.procs:
            if w["proc"].poll() is not None:
                raise RuntimeError(f"DAG process {w['dir'].name} died: {tail(w['dir'] / 'worker.log')}")
        while len(self.procs) < count:
            folder = self.work / f"worker-{len(self.procs)}"
            (folder / "dags").mkdir(parents=True)
            shutil.copy(self.template / "airflow.db", folder / "airflow.db")
            (folder / "dags" / "warmup.py").write_text(DAG_HEADER + "dag = build_warmup_dag()\n")
            log = open(folder / "worker.log", "wb")  # closed in stop()
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), str(folder)],
                env=child_env(folder, self.kubeconfig),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(REPO),
            )
            self.procs.append({"dir": folder, "proc": proc, "log": log, "seq": 0})
        deadline = time.time() + 600
        for w in self.procs[:count]:
            while not (w["dir"] / "warm").exists():
                if w["proc"].poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"DAG process did not start: {tail(w['dir'] / 'worker.log')}")
                time.sleep(0.05)
        return self.procs[:count]

    def submit(self, w: dict[str, Any], job: dict[str, Any]) -> None:
        tmp = w["dir"] / "job.tmp"
        tmp.write_text(json.dumps(job))
        tmp.rename(w["dir"] / f"job-{w['seq']}.json")
        w["seq"] += 1

    def stop(self) -> None:
        for w in self.procs:
            if w["proc"].poll() is None:
                self.submit(w, {"stop": True})
        for w in self.procs:
            try:
                w["proc"].wait(timeout=30)
            except subprocess.TimeoutExpired:
                w["proc"].kill()
                w["proc"].wait()
            w["log"].close()


if __name__ == "__main__":
    worker(sys.argv[1])
