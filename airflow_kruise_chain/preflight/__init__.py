"""Preflight: can chains run in this namespace, through this connection? Used by `kruise-chain check`
(`cli.py`) and the `kruise_chain` connection's Test button (`KruiseHook.test_connection`).

The checks are a list (`base.CHECKS`) that grows by one function each: `@register("name")` on a function that
takes the `Preflight` and returns a `Finding` (`checks.py`, `probe.py`). A check is either required for any
chain (`feature=None`), or serves an optional feature (`base.FEATURES`) the user may say their chains go
without (`--without prewarm`): it is then not run. A check runs only once those it `needs` passed.

Every finding is ok, warn (chains run, with less), fail, unknown (the check could not tell) or skip (not run:
waived, or a check it needs did not pass). The verdict fails (`Report.exit_code` 1) on any fail or unknown:
a preflight that cannot tell does not say "chains can run here". Each finding that is not ok names the fix.

Every check is a read, a discovery request, an access review or a server-side dry run (`dryRun=All`:
admitted as a real create is, webhooks and Pod Security included, never stored), except the runner probe
(`probe.py`), which starts one chain pod as the setup does and deletes it: only a node can say whether it can
pull the runner's image and start a chain pod.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from airflow_kruise_chain.preflight import checks as builtin_checks  # noqa: F401 (registers them)
from airflow_kruise_chain.preflight import probe as runner_probe  # noqa: F401 (registers it)
from airflow_kruise_chain.preflight.base import (
    CHECKS,
    FAIL,
    FEATURES,
    OK,
    SCHEMA,
    SKIP,
    UNKNOWN,
    WARN,
    Check,
    Finding,
    Preflight,
    Report,
    register,
)
from airflow_kruise_chain.preflight.checks import PERMISSIONS

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

__all__ = [
    "CHECKS",
    "FAIL",
    "FEATURES",
    "OK",
    "PERMISSIONS",
    "SCHEMA",
    "SKIP",
    "UNKNOWN",
    "WARN",
    "Check",
    "Finding",
    "Preflight",
    "Report",
    "check",
    "register",
    "summary",
]


def check(
    hook: KubernetesHook,
    namespace: str,
    runner_image: str | None = None,
    *,
    without: Iterable[str] = (),
    probe: bool = True,
    probe_timeout: float = 120.0,
) -> Report:
    """The preflight of chains in `namespace` through `hook`'s connection."""
    from airflow_kruise_chain.config import runner_image as configured_runner_image

    image = runner_image or configured_runner_image()
    return Preflight(hook, namespace, image, frozenset(without), probe, probe_timeout).run()


def summary(report: Report) -> tuple[bool, str]:
    """(chains can run here, one line per finding and the verdict) for the connection's Test button."""
    lines = [f.line().replace("\n        ", " ") for f in report.findings]
    return report.exit_code == 0, " | ".join([*lines, report.verdict()])
