"""`kruise-chain check` keeps standard output for its report: what the check's libraries write while it runs
(Airflow's logs, a hook's log lines, a stray print, a write to file descriptor 1) goes to standard error.
tests/provider/test_cli_connection.py runs the installed script through a connection whose short extra
value Airflow's secrets masker warns about."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import pytest

from airflow_kruise_chain.preflight.base import OK, Check, Finding, Preflight, Report


def noisy_check(hook: Any, namespace: str, *args: Any, **kwargs: Any) -> Report:
    """A check whose libraries write to standard output every way they can."""
    hook.log.warning("a hook's log line")
    logging.getLogger("airflow").warning("an Airflow log line")
    print("a stray print")
    sys.stdout.flush()
    os.write(1, b"a write to fd 1\n")
    found = Check("connection", lambda p: Finding("connection", OK, "fine"), needs=())
    return Preflight(hook=hook, namespace=namespace, runner_image="busybox").run([found])


@pytest.mark.parametrize("output", ["json", "text"])
def test_standard_output_holds_the_report_alone(
    output: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow_kruise_chain import preflight
    from airflow_kruise_chain.cli import main

    monkeypatch.setattr(preflight, "check", noisy_check)
    assert main(["check", "--kubeconfig", os.devnull, "--output", output]) == 0
    out, err = capfd.readouterr()
    if output == "json":
        assert json.loads(out)["findings"][0]["check"] == "connection"
    else:
        assert out.splitlines()[0].startswith("OK      connection: fine"), out
    for line in ("a stray print", "a write to fd 1"):
        assert line not in out and line in err
    assert "log line" not in out
