"""A production-shaped Airflow 3 on kruise-local: PostgreSQL as the metadata database, Redis as the Celery
broker, CeleryExecutor with TWO workers (separate processes, each with its own hostname and queue, both also
consuming the default queue), and the scheduler, dag-processor, triggerer and api-server as separate
processes.

PostgreSQL and Redis are Debian's servers (`postgresql`, `redis-server`, installed by ./dev.sh), started here
as plain processes in a temporary folder on free loopback ports (no system service); `stop()` ends every
process it started. The workers' hostnames come from `[core] hostname_callable` (tests/production/hostname.py
reads `KRUISE_CHAIN_TEST_HOSTNAME`), which is what Airflow records as a task instance's `hostname`: each
worker is a "host" of its own, as a worker on another machine would be, while they share the DAGs and logs
folders (as a deployment shares its DAG bundle and remote logging)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kruise_local import LocalCluster

from tests.airflow.stack import ROOT, AirflowStack, free_port
from tests.helpers import start_airflow, stop_airflow

WORKERS = {"worker-a": "queue_a", "worker-b": "queue_b"}
"""Each worker's hostname and its own queue (both consume the default queue too)."""
CONCURRENCY = 8


def _postgres_bin(name: str) -> str:
    found = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not found:
        raise RuntimeError(
            f"PostgreSQL's {name} not found: install Debian's postgresql package (./dev.sh does)"
        )
    return str(found[-1])


class Postgres:
    """A throwaway PostgreSQL server on 127.0.0.1:`port`, trust authentication, database `airflow`.

    PostgreSQL refuses to run as root: as root, its folder belongs to, and the server runs as, the
    `postgres` user that the Debian package creates."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kruise-chain-pg-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def _as_owner(self, argv: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv

    def start(self) -> None:
        data = self.dir / "data"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        subprocess.run(
            self._as_owner(
                [_postgres_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
        argv = [_postgres_bin("postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(self.port)]
        argv += ["-k", str(self.dir), "-c", "max_connections=300", "-c", "fsync=off"]
        with (self.dir / "postgres.log").open("wb") as log:
            self.proc = subprocess.Popen(
                self._as_owner(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while True:
            ready = subprocess.run(
                [_postgres_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if ready.returncode == 0:
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not start: {(self.dir / 'postgres.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        subprocess.run(
            [_postgres_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "airflow"],
            check=True,
            timeout=60,
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/airflow"

    def stop(self) -> None:
        if self.proc is not None:
            stop_airflow([self.proc], grace=10.0)
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """A throwaway Redis server on 127.0.0.1:`port`, no persistence."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="kruise-chain-redis-"))
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError(
                "redis-server not found: install Debian's redis-server package (./dev.sh does)"
            )
        argv = [server, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        with (self.dir / "redis.log").open("wb") as log:
            self.proc = subprocess.Popen(
                [*argv, "--dir", str(self.dir)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        import redis

        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(redis.exceptions.ConnectionError):
                if redis.Redis(host="127.0.0.1", port=self.port).ping():
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Redis did not start: {(self.dir / 'redis.log').read_text()[-2000:]}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.proc is not None:
            stop_airflow([self.proc], grace=10.0)
        shutil.rmtree(self.dir, ignore_errors=True)


class ProductionStack(AirflowStack):
    """AirflowStack on PostgreSQL + Redis + CeleryExecutor with the two workers of WORKERS."""

    components = ("api-server", "scheduler", "dag-processor", "triggerer", *WORKERS)

    def __init__(
        self, work: Path, cluster: LocalCluster, kubeconfig: Path, *, preimport: bool = False
    ) -> None:
        super().__init__(work, cluster, kubeconfig, preimport=preimport)
        self.postgres = Postgres()
        self.redis = Redis()
        self.env.update(
            AIRFLOW__CORE__EXECUTOR="CeleryExecutor",
            AIRFLOW__CORE__PARALLELISM="32",
            AIRFLOW__CORE__HOSTNAME_CALLABLE="tests.production.hostname.hostname",
            AIRFLOW__CELERY__WORKER_CONCURRENCY=str(CONCURRENCY),
            AIRFLOW__CELERY__SYNC_PARALLELISM="2",
            AIRFLOW__SCHEDULER__MAX_TIS_PER_QUERY="64",
            PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        )

    def start(self) -> None:
        self.postgres.start()
        self.redis.start()
        self.env.update(
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=self.postgres.url,
            AIRFLOW__CELERY__BROKER_URL=self.redis.url,
            AIRFLOW__CELERY__RESULT_BACKEND="db+" + self.postgres.url,
        )
        if self.preimport:
            (self.home / "config").mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / "docs" / "examples" / "airflow_local_settings.py", self.home / "config")
        self.home.mkdir(parents=True, exist_ok=True)
        self.write_passwords()
        migrate = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if migrate.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed:\n{(migrate.stdout + migrate.stderr)[-4000:]}")
        for name in ("api-server", "scheduler", "dag-processor", "triggerer"):
            self.procs[name] = start_airflow([name], self.env, self.work / f"{name}.log")
        for hostname in WORKERS:
            self.start_worker(hostname)
        self.wait(self.healthy, 300, "Airflow's components to report healthy")
        self.wait(self.workers_ready, 120, "both Celery workers to consume their queues")

    def start_worker(self, hostname: str) -> None:
        """Start (or restart) the Celery worker `hostname`: its own queue and the default one."""
        env = {**self.env, "KRUISE_CHAIN_TEST_HOSTNAME": hostname}
        env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
        argv = ["celery", "worker", "--celery-hostname", hostname, "--queues", f"default,{WORKERS[hostname]}"]
        self.procs[hostname] = start_airflow(argv, env, self.work / f"{hostname}.log")

    def workers_ready(self) -> bool:
        return all("ready." in self.component_log(hostname, 200_000) for hostname in WORKERS)

    def kill_worker(self, hostname: str) -> None:
        """SIGKILL the worker's process group (its pool processes and their task processes): a dead host."""
        proc = self.procs[hostname]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def check_processes(self) -> None:
        """Every component but the workers, which a test may kill, is running."""
        for name, proc in self.procs.items():
            if proc.poll() is not None and name not in WORKERS:
                raise AssertionError(
                    f"airflow {name} exited ({proc.returncode}):\n{self.component_log(name)}"
                )

    def stop(self) -> None:
        """End every process the deployment started; fail (the fixture's teardown) if one is left.

        A group's leader may exit before the rest of its group (PostgreSQL's and the Celery pool's children
        shut down after it): each group gets `grace` seconds to empty, then SIGKILL, then the check."""
        groups = [proc.pid for proc in self.procs.values()]
        groups += [server.proc.pid for server in (self.redis, self.postgres) if server.proc is not None]
        try:
            super().stop()
        finally:
            self.redis.stop()
            self.postgres.stop()
        for pgid in groups:
            if not _wait_empty(pgid, 15.0):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
        left = {pgid: _members(pgid) for pgid in groups if not _wait_empty(pgid, 10.0)}
        assert not left, f"processes left after the deployment stopped (process group: pids): {left}"


def _members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(stat.parent.name))
    return found


def _wait_empty(pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
