"""`kruise-chain check --conn-id ID` reads the connection where Airflow keeps it: a connection made with
`airflow connections add` or the UI lives in the metadata database, which the Task SDK's hooks do not read
outside a task or an Airflow server process (only the environment and secrets backends there).
docs/getting-started-cluster.md checks its connection so; before 758d7c4, the check failed with "The conn_id
`kruise_chains` isn't defined"."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kruise_local import ClusterConfig, LocalCluster

from airflow_kruise_chain.preflight import FAIL, OK
from tests.e2e.conftest import airflow_home  # noqa: F401  (a migrated metadata database)

CONN_ID = "chains_in_the_database"


@pytest.fixture
def stored_connection(tmp_path: Path, airflow_home: Path) -> Iterator[None]:  # noqa: F811
    """A local cluster, and a kruise_chain connection to it in Airflow's metadata database (its kubeconfig in
    the connection, as `airflow connections add --conn-extra '{"kube_config": ...}'` stores it)."""
    from airflow.models.connection import Connection
    from airflow.utils.session import create_session

    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "cluster"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig").read_text()
        extra = json.dumps({"kube_config": kubeconfig, "namespace": "default"})
        with create_session() as session:
            session.add(Connection(conn_id=CONN_ID, conn_type="kruise_chain", extra=extra))
        try:
            yield
        finally:
            with create_session() as session:
                session.query(Connection).filter(Connection.conn_id == CONN_ID).delete()


def test_a_connection_in_the_metadata_database_is_checked(stored_connection, monkeypatch) -> None:
    from airflow_kruise_chain.cli import PROCESS_CONTEXT, main

    assert f"AIRFLOW_CONN_{CONN_ID.upper()}" not in os.environ  # only in the database
    monkeypatch.delenv(PROCESS_CONTEXT, raising=False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--conn-id", CONN_ID, "--no-probe", "--without", "admission-policy"])
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"{OK.upper():7} connection: http") for line in lines), out.getvalue()
    assert any(line.startswith(f"{OK.upper():7} Kubernetes: v1.") for line in lines), out.getvalue()
    # the process reads connections as before once the check is done (a server's reads were the check's)
    assert PROCESS_CONTEXT not in os.environ


def test_the_check_gives_the_process_its_context_back(airflow_home: Path, monkeypatch) -> None:  # noqa: F811
    """A task's process ("client": connections through its supervisor) that runs the check in-process reads
    its connections as before afterwards."""
    from airflow_kruise_chain.cli import PROCESS_CONTEXT, main

    monkeypatch.setenv(PROCESS_CONTEXT, "client")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["check", "--conn-id", "no_such_connection", "--output", "json"]) == 1
    assert os.environ[PROCESS_CONTEXT] == "client"


def test_a_connection_nowhere_still_fails_naming_the_fix(airflow_home: Path) -> None:  # noqa: F811
    from airflow_kruise_chain.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check", "--conn-id", "no_such_connection", "--output", "json"])
    doc = json.loads(out.getvalue())
    (connection,) = [f for f in doc["findings"] if f["check"] == "connection"]
    assert status == 1 and connection["status"] == FAIL
    assert "no_such_connection" in connection["detail"] and "--conn-id" in connection["fix"]


def test_the_console_script_prints_one_json_document(tmp_path: Path) -> None:
    """`kruise-chain check --output json` as installed, through an AIRFLOW_CONN_* connection holding its
    kubeconfig inline: standard output is the JSON document alone, whatever Airflow logs while the check
    runs (its secrets masker warns of the connection's short extra value as the connection is read; the
    probe's setup logs its chain pod). Both went to standard output before the document."""
    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "cluster"))) as cluster:
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig").read_text()
        extra = {"kube_config": kubeconfig, "preflight_without": "exec"}  # a value of 4 characters
        env = {**os.environ, "AIRFLOW_CONN_INLINE": json.dumps({"conn_type": "kruise_chain", "extra": extra})}
        done = subprocess.run(
            [
                Path(sys.executable).parent / "kruise-chain",
                "check",
                "--conn-id",
                "inline",
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
    doc = json.loads(done.stdout)  # nothing else on standard output
    assert doc["schema"] == "airflow-kruise-chain/preflight/v1"
    assert done.returncode == 1 and not doc["ok"]  # the bare cluster has no admission policy
    (runner,) = [f for f in doc["findings"] if f["check"] == "runner"]
    assert runner["status"] == OK, runner  # the probe chain pod ran
    assert "Skipping masking for a secret as it's too short" in done.stderr  # "exec": logged, on stderr
