"""The preflight's frame (`__init__.py` says what the preflight is): findings, the checks' list and how a
check registers, the context they share, the report and its verdict."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

OK, WARN, FAIL, UNKNOWN, SKIP = "ok", "warn", "fail", "unknown", "skip"
PASSED = (OK, WARN)
SCHEMA = "airflow-kruise-chain/preflight/v1"
"""`--output json`'s `schema` (docs/connection.md documents its fields)"""
FEATURES: dict[str, str] = {
    "prewarm": "the prewarm task (KruiseChain(prewarm=False) goes without)",
    "resize": "per-stage in-place sizing (sizing='static' goes without)",
    "exec": "the fast go by pods/exec (the go by annotation alone is slower)",
    "metrics": "peak memory per stage (memory_sample_interval = 0 goes without)",
    "events": "naming what a starting chain pod misses at once (without: at the startup timeout)",
    "admission-policy": "the admission policy holding the chain identity to what chains do (docs/rbac.md)",
}
"""The optional features a check may serve, and what going without them means."""


@dataclass(frozen=True)
class Finding:
    """One check's outcome (`status`: ok, warn, fail, unknown or skip), what it found and the fix."""

    check: str
    status: str
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status.upper():7} {self.check}: {self.detail}"
        return f"{text}\n        fix: {self.fix}" if self.fix else text


@dataclass(frozen=True)
class Check:
    """A registered check: its name, its function, the feature it serves (None: required) and the checks
    that must pass before it can run."""

    name: str
    run: Callable[[Preflight], Finding]
    feature: str | None = None
    needs: tuple[str, ...] = ("connection",)


CHECKS: list[Check] = []
"""Every check, in the order they run."""


def register(
    name: str, *, feature: str | None = None, needs: Sequence[str] = ("connection",)
) -> Callable[[Callable[[Preflight], Finding]], Callable[[Preflight], Finding]]:
    """Add the decorated function to `CHECKS` under `name` (its findings must carry that name)."""
    if feature is not None and feature not in FEATURES:
        raise ValueError(f"{name}: unknown feature {feature!r}; add it to FEATURES")

    def add(run: Callable[[Preflight], Finding]) -> Callable[[Preflight], Finding]:
        CHECKS.append(Check(name, run, feature, tuple(needs)))
        return run

    return add


@dataclass
class Preflight:
    """What the checks share: the connection's hook, the namespace, the runner image, the features waived,
    whether the runner probe may start a pod, and what earlier checks found (`found`, `identity`)."""

    hook: KubernetesHook
    namespace: str
    runner_image: str
    without: frozenset[str] = frozenset()
    probe: bool = True
    probe_timeout: float = 120.0
    found: dict[str, Finding] = field(default_factory=dict)
    identity: str | None = None
    """the username the API server knows the connection by (SelfSubjectReview), once `identity` ran"""
    pod_security: str = "baseline"
    """the chain option pod_security the namespace admits (the Pod Security check may raise it)"""

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        timeout: float = 30,
    ) -> tuple[int, Any, list[str]]:
        """(status, JSON body, Warning headers) of one request; API errors are answers, not exceptions (a
        connection failure raises)."""
        from kubernetes.client.exceptions import ApiException

        try:
            resp = self.hook.api_client.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
            resp = resp[0] if isinstance(resp, tuple) else resp
            status, data, headers = resp.status, resp.data, resp.headers
        except ApiException as e:
            status, data, headers = e.status, e.body, e.headers or {}
        try:
            parsed = json.loads(data or b"{}")
        except ValueError:
            parsed = {"message": data.decode(errors="replace") if isinstance(data, bytes) else str(data)}
        if not isinstance(parsed, dict):
            parsed = {"message": str(parsed)}
        getall = getattr(headers, "getlist", None) or getattr(headers, "getall", None)
        warnings = (
            list(getall("Warning")) if getall else [v for k, v in dict(headers).items() if k == "Warning"]
        )
        return status, parsed, warnings

    def get(self, path: str) -> tuple[int, Any]:
        status, body, _ = self.request("GET", path)
        return status, body

    def run(self, checks: Iterable[Check] = ()) -> Report:
        """Run `checks` (default: every registered one) in order."""
        findings = []
        for check in list(checks) or CHECKS:
            finding = self._run_one(check)
            self.found[check.name] = finding
            findings.append((check, finding))
        return Report(self.namespace, self.identity, self.without, findings)

    def _run_one(self, check: Check) -> Finding:
        if check.feature in self.without:
            return Finding(
                check.name, SKIP, f"not checked: chains here go without {check.feature} (--without)"
            )
        failed = [n for n in check.needs if n in self.found and self.found[n].status not in PASSED]
        if failed:
            return Finding(check.name, SKIP, f"not checked: {', '.join(failed)} did not pass")
        try:
            return check.run(self)
        except Exception as e:  # one check that cannot run must not hide the others; it could not tell
            return Finding(check.name, UNKNOWN, f"the check itself failed: {type(e).__name__}: {e}")


@dataclass
class Report:
    """The findings of one preflight, with each check's registration (required or the feature served)."""

    namespace: str
    identity: str | None
    without: frozenset[str]
    checked: list[tuple[Check, Finding]]

    @property
    def findings(self) -> list[Finding]:
        return [finding for _, finding in self.checked]

    @property
    def failing(self) -> list[Finding]:
        """Findings that keep chains from running as configured, or that could not tell."""
        return [f for f in self.findings if f.status in (FAIL, UNKNOWN)]

    @property
    def exit_code(self) -> int:
        """0: chains can run here (every check passed, or was waived); 1: a check failed or could not tell."""
        return 1 if self.failing else 0

    def verdict(self) -> str:
        if self.failing:
            unknown = sum(f.status == UNKNOWN for f in self.failing)
            told = f" ({unknown} could not tell)" if unknown else ""
            return (
                f"{len(self.failing)} of {len(self.findings)} checks failed{told}: chains will fail here "
                "until fixed"
            )
        waived = sorted(self.without)
        verdict = "chains can run here" + (f" (without {', '.join(waived)})" if waived else "")
        unchecked = [f.check for c, f in self.checked if f.status == SKIP and c.feature not in self.without]
        return verdict + (f"; not checked: {', '.join(unchecked)}" if unchecked else "")

    def text(self) -> str:
        return "\n".join([*(f.line() for f in self.findings), self.verdict()])

    def to_json(self) -> dict[str, Any]:
        """The `--output json` document (schema `SCHEMA`, docs/connection.md)."""
        return {
            "schema": SCHEMA,
            "namespace": self.namespace,
            "identity": self.identity,
            "without": sorted(self.without),
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "verdict": self.verdict(),
            "findings": [
                {**asdict(finding), "required": check.feature is None, "feature": check.feature}
                for check, finding in self.checked
            ],
        }
