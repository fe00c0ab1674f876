"""The preflight's frame (`preflight/base.py`), without a cluster: a check that cannot tell fails the verdict,
a waived feature's check is not run, a check whose needs failed is skipped, the JSON document and the
registration rules."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_kruise_chain.preflight import CHECKS, FEATURES, SCHEMA
from airflow_kruise_chain.preflight.base import (
    FAIL,
    OK,
    SKIP,
    UNKNOWN,
    WARN,
    Check,
    Finding,
    Preflight,
    register,
)


def preflight(**kw: Any) -> Preflight:
    return Preflight(hook=None, namespace="chains", runner_image="busybox:1.37.0-musl", **kw)  # type: ignore[arg-type]


def ok(name: str) -> Check:
    return Check(name, lambda p: Finding(name, OK, "fine"), needs=())


def test_a_check_that_raises_could_not_tell_and_fails_the_verdict() -> None:
    def broken(p: Preflight) -> Finding:
        raise ValueError("no answer")

    report = preflight().run([ok("a"), Check("b", broken, needs=())])
    assert [f.status for f in report.findings] == [OK, UNKNOWN]
    assert report.findings[1].detail == "the check itself failed: ValueError: no answer"
    assert report.exit_code == 1
    assert report.verdict() == "1 of 2 checks failed (1 could not tell): chains will fail here until fixed"


def test_a_waived_feature_is_not_checked_and_passes() -> None:
    ran: list[str] = []

    def gate(p: Preflight) -> Finding:
        ran.append("gate")
        return Finding("gate", FAIL, "off", "enable it")

    report = preflight(without=frozenset({"prewarm"})).run([ok("a"), Check("gate", gate, "prewarm", ())])
    assert ran == [] and report.findings[1].status == SKIP and report.exit_code == 0
    assert report.verdict() == "chains can run here (without prewarm)"
    failing = preflight().run([ok("a"), Check("gate", gate, "prewarm", ())])
    assert failing.exit_code == 1 and failing.failing == [Finding("gate", FAIL, "off", "enable it")]


def test_a_check_whose_needs_did_not_pass_is_skipped() -> None:
    broken = Check("connection", lambda p: Finding("connection", FAIL, "unreachable", "the server"), needs=())
    later = Check("later", lambda p: Finding("later", OK, "fine"))
    warned = Check("w", lambda p: Finding("w", WARN, "less"), needs=())
    report = preflight().run(
        [broken, later, warned, Check("after-w", lambda p: Finding("after-w", OK, ""), needs=("w",))]
    )
    assert [f.status for f in report.findings] == [FAIL, SKIP, WARN, OK]  # a warning passes
    assert report.findings[1].detail == "not checked: connection did not pass"


def test_a_skip_asked_for_is_said_in_the_verdict() -> None:
    probe = Check("runner", lambda p: Finding("runner", SKIP, "not checked (--no-probe)"), needs=())
    report = preflight().run([ok("a"), probe])
    assert report.exit_code == 0 and report.verdict() == "chains can run here; not checked: runner"


def test_the_json_document() -> None:
    checks = [ok("a"), Check("gate", lambda p: Finding("gate", WARN, "slow", "faster"), "prewarm", ())]
    p = preflight()
    p.identity = "system:serviceaccount:chains:airflow-kruise-chain"
    doc = p.run(checks).to_json()
    assert doc == {
        "schema": SCHEMA,
        "namespace": "chains",
        "identity": "system:serviceaccount:chains:airflow-kruise-chain",
        "without": [],
        "ok": True,
        "exit_code": 0,
        "verdict": "chains can run here",
        "findings": [
            {"check": "a", "status": OK, "detail": "fine", "fix": "", "required": True, "feature": None},
            {
                "check": "gate",
                "status": WARN,
                "detail": "slow",
                "fix": "faster",
                "required": False,
                "feature": "prewarm",
            },
        ],
    }


def test_a_check_registers_with_a_known_feature_only() -> None:
    with pytest.raises(ValueError, match="unknown feature 'teleport'"):
        register("x", feature="teleport")
    assert {c.feature for c in CHECKS} - {None} <= set(FEATURES)
    names = [c.name for c in CHECKS]
    assert len(names) == len(set(names))
    assert names[0] == "connection" and names[-1] == "runner"
    for check in CHECKS:
        assert set(check.needs) <= set(names[: names.index(check.name)]), check.name  # needs run before
