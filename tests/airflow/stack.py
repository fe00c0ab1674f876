"""A real Airflow 3 (scheduler, dag-processor, triggerer, api-server; LocalExecutor, SQLite) on kruise-local.

`kruise-local`
runs in the test's process (so a test can read its store and audit log), the four Airflow components run as
subprocesses in their own AIRFLOW_HOME and process group, with the `kubernetes_default` connection pointing
at the cluster (AIRFLOW_CONN_KUBERNETES_DEFAULT, as tests/e2e does).
Tests drive Airflow only through its public REST API and read task states, DAG run states and task logs from
it, logged in through the API server's real auth path: the SimpleAuthManager with the users of USERS (not "all
admins"), each logged in with its password at `POST /auth/token` (what the UI's login form posts), the JWT
sent as `Authorization: Bearer` (a script) or as the `_token` cookie (the browser, e.g. the chain page).

Airflow 3 has no SequentialExecutor any more; LocalExecutor runs on SQLite (what `airflow standalone` does),
with SQLite's single writer: components retry on a locked database, so everything here polls with generous
timeouts rather than timing anything.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from kruise_local import ClusterConfig, LocalCluster
from kruise_local import resources as R

from airflow_kruise_chain.core.manifest import pod_name_for
from tests.helpers import start_airflow, stop_airflow

ROOT = Path(__file__).resolve().parents[2]
USERS = {"admin": "admin", "viewer": "viewer", "nobody": ""}
"""The SimpleAuthManager's users and their roles; `nobody` has no role (authenticated, allowed nothing)."""
ADMIN = "admin"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINISHED = ("success", "failed")


Stack = TypeVar("Stack", bound="AirflowStack")


@contextmanager
def running_stack(kind: type[Stack], work: Path, **options: Any) -> Iterator[Stack]:
    """A started `kind` of stack in `work` (its DAGs folder holding the example DAG) on a fast kruise-local,
    made with `options`, stopped (with the cluster) on exit."""
    (work / "dags").mkdir()
    shutil.copy(ROOT / "example_dags" / "example_kruise_chain.py", work / "dags")
    with LocalCluster(ClusterConfig(profile="fast", root=str(work / "cluster"))) as cluster:
        stack = kind(work, cluster, cluster.write_kubeconfig(work / "kubeconfig"), **options)
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AirflowStack:
    """The running components, the cluster they use, and REST API helpers."""

    components: tuple[str, ...] = COMPONENTS

    def __init__(
        self, work: Path, cluster: LocalCluster, kubeconfig: Path, *, preimport: bool = False
    ) -> None:
        self.work = work
        self.preimport = preimport
        self.home = work / "airflow"
        self.dags = work / "dags"
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.passwords = {user: secrets.token_urlsafe(16) for user in USERS}
        self.passwords_file = work / "simple_auth_manager_passwords.json"
        self.tokens: dict[str, str] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))}
        self.env.update(
            AIRFLOW_HOME=str(self.home),
            # SQLite's busy timeout 30 s, not pysqlite's 5: four components and the task processes write
            # one file, and on a loaded machine a writer can hold it longer (the api-server's PATCH of a task
            # instance failed with 'database is locked', HTTP 500, after 5.08 s during a -n 4 run)
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{self.home}/airflow.db?timeout=30",
            AIRFLOW__CORE__DAGS_FOLDER=str(self.dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__UNIT_TEST_MODE="False",
            AIRFLOW__CORE__EXECUTOR="LocalExecutor",
            AIRFLOW__CORE__PARALLELISM="4",
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            AIRFLOW__CORE__AUTH_MANAGER=(
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=",".join(f"{u}:{r}" for u, r in USERS.items()),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(self.passwords_file),
            AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"{self.base}/execution/",
            AIRFLOW__API__PORT=str(self.port),
            AIRFLOW__API__HOST="127.0.0.1",
            AIRFLOW__API__WORKERS="1",
            AIRFLOW__API__EXPOSE_CONFIG="False",
            AIRFLOW__API_AUTH__JWT_SECRET=secrets.token_hex(32),
            # new DAG files are found within 5 s (default 300) and parsed at once; a file is parsed again
            # when its mtime changes (the dag-processor's `modified_time` sort mode), so the periodic
            # re-parse of unchanged files (default every 30 s) only burns CPU here: with a session's 21 DAG
            # files the idle dag-processor took 12.8 % of a core at 30 s (tests/airflow is the suite's
            # critical path on a CPU-bound machine)
            AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="5",
            AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL="3600",
            AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False",
            # a dead worker is noticed after this long without a heartbeat (default 300 s), looked for every
            # 2 s (default 10 s)
            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="40",
            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL="2",
            AIRFLOW__KRUISE_CHAIN__MEMORY_SAMPLE_INTERVAL="0",
            AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
            ),
            KRUISE_CHAIN_NAMESPACE="default",
        )

    # -- processes -----------------------------------------------------------------------------------
    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.write_passwords()
        if self.preimport:  # docs/running.md's "Task start-up" (see tests/airflow/conftest.py)
            (self.home / "config").mkdir(exist_ok=True)
            shutil.copy(ROOT / "docs" / "examples" / "airflow_local_settings.py", self.home / "config")
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=300,
        )
        for name in COMPONENTS:  # each in its own process group: stop() ends it with its task processes
            self.procs[name] = start_airflow([name], self.env, self.work / f"{name}.log")
        self.wait(self.healthy, 240, "Airflow's components to report healthy")

    def write_passwords(self) -> None:
        """The SimpleAuthManager's passwords file (it generates passwords only for users not in it)."""
        self.passwords_file.write_text(json.dumps(self.passwords))
        self.passwords_file.chmod(0o600)

    def stop(self) -> None:
        stop_airflow(self.procs.values())

    def restart(self, name: str) -> None:
        """Stop one component (SIGTERM to its process group, SIGKILL after 5 s) and start it again."""
        stop_airflow([self.procs[name]])
        self.procs[name] = start_airflow([name], self.env, self.work / f"{name}.log")
        self.wait(self.healthy, 180, f"airflow {name} to report healthy again")

    def healthy(self) -> bool:
        self.check_processes()
        return self.api_healthy()

    def check_processes(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = self.component_log(name)
                raise AssertionError(f"airflow {name} exited ({proc.returncode}):\n{log}")

    def api_healthy(self) -> bool:
        try:
            health = self.request("GET", "/api/v2/monitor/health", user=None)  # public
        except OSError:
            return False
        return all(
            (health.get(part) or {}).get("status") == "healthy"
            for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        )

    def component_log(self, name: str, chars: int = 4000) -> str:
        path = self.work / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def wait(self, condition: Callable[[], Any], timeout: float, what: str, interval: float = 1.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}:\n{self.component_log(n, 2500)}" for n in self.components)
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")
            time.sleep(interval)

    # -- REST API ------------------------------------------------------------------------------------
    def login(self, user: str) -> str:
        """Log `user` in with its password as the UI's login form does (`POST /auth/token`); its JWT."""
        if user not in self.tokens:
            login = {"username": user, "password": self.passwords[user]}
            self.tokens[user] = self.request("POST", "/auth/token", login, user=None)["access_token"]
        return self.tokens[user]

    def call(
        self, method: str, path: str, body: Any = None, *, user: str | None = ADMIN, cookie: bool = False
    ) -> tuple[int, bytes]:
        """The HTTP status and body of a request as `user` (None: no credentials), its JWT sent as a Bearer
        token or, `cookie`, as the browser sends it."""
        headers = {"Content-Type": "application/json"}
        if user is not None:
            token = self.login(user)
            headers.update({"Cookie": f"_token={token}"} if cookie else {"Authorization": f"Bearer {token}"})
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    def request(
        self, method: str, path: str, body: Any = None, *, user: str | None = ADMIN, cookie: bool = False
    ) -> Any:
        """The JSON answer of a request as `user`; an AssertionError naming the status if it failed."""
        status, text = self.call(method, path, body, user=user, cookie=cookie)
        if status >= 400:
            raise AssertionError(f"{method} {path}: HTTP {status}: {text[:2000]!r}")
        return json.loads(text) if text else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def add_dag(self, filename: str, source: str) -> None:
        """Write a DAG file into the DAGs folder (the dag-processor finds new files within seconds)."""
        (self.dags / filename).write_text(source)

    def wait_dag(self, dag_id: str, timeout: float = 180) -> None:
        def parsed() -> bool:
            try:
                self.get(f"/api/v2/dags/{dag_id}/details")
            except AssertionError as err:
                if "HTTP 404" in str(err):
                    return False
                raise
            return True

        self.wait(parsed, timeout, f"DAG {dag_id} to be parsed")

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        self.wait_dag(dag_id)
        body: dict[str, Any] = {"logical_date": None, **({"conf": conf} if conf else {})}
        run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 300) -> str:
        """Wait until the DAG run has finished and no task of it is still to run; its state."""

        def done() -> str | None:
            state = self.run_state(dag_id, run_id)
            if state not in FINISHED:
                return None
            if any(
                ti["state"] in (None, "scheduled", "queued", "running", "up_for_retry", "deferred")
                for ti in self.task_instances(dag_id, run_id).values()
            ):
                return None
            return state

        return self.wait(done, timeout, f"DAG run {dag_id}/{run_id} to finish")

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        tis = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances?limit=100")
        return {ti["task_id"]: ti for ti in tis["task_instances"]}

    def states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {task: ti["state"] for task, ti in self.task_instances(dag_id, run_id).items()}

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        """The task's log for one try as the API server serves it (events joined as text lines)."""
        data = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
            f"/logs/{try_number}?full_content=true&map_index={map_index}"
        )
        content = data.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(
            str(e.get("event", "")) + (f" {e['error_detail']}" if e.get("error_detail") else "")
            if isinstance(e, dict)
            else str(e)
            for e in content or []
        )

    def clear(self, dag_id: str, run_id: str, task_ids: list[Any], *, downstream: bool = False) -> list[str]:
        """Clear task instances of a run as the UI does (not only failed ones; a [task_id, map_index] pair
        clears one map index); the cleared task ids."""
        out = self.request(
            "POST",
            f"/api/v2/dags/{dag_id}/clearTaskInstances",
            {
                "dry_run": False,
                "dag_run_id": run_id,
                "task_ids": task_ids,
                "only_failed": False,
                "include_downstream": downstream,
                "reset_dag_runs": True,
            },
        )
        return sorted(ti["task_id"] for ti in out["task_instances"])

    # -- cluster -------------------------------------------------------------------------------------
    def objects(self, resource: Any, namespace: str = "default") -> list[dict[str, Any]]:
        return self.cluster.call(lambda: list(self.cluster.store.items(resource, namespace)))

    def pods(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.objects(R.PODS, namespace)

    def chain_pod(self, dag_id: str, run_id: str, chain: str = "c", timeout: float = 180) -> dict[str, Any]:
        """The chain pod of `chain` in this DAG run, once its setup has created it."""
        name = pod_name_for(chain, dag_id, run_id)
        found = lambda: next((p for p in self.pods() if p["metadata"]["name"] == name), None)  # noqa: E731
        return self.wait(found, timeout, f"the chain pod {name}")

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        """Delete a pod as a user would (kubectl delete pod), and wait until it is gone."""
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        api.delete_namespaced_pod(name, namespace)
        gone = lambda: all(p["metadata"]["name"] != name for p in self.pods(namespace))  # noqa: E731
        self.wait(gone, 60, f"pod {name} to be gone")

    def pods_created(self) -> int:
        return sum(1 for m, p, c in self.cluster.audit if m == "POST" and p.endswith("/pods") and c == 201)
