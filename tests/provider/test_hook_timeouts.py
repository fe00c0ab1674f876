"""`KruiseHook`'s timeouts against a healthy server (the local cluster over real HTTP): a quiet watch and a
silent stage's log follow are not taken for a server that stalls (`hooks/timeouts.py`; the stalling server is
tests/unit/test_hooks_stalled_server.py)."""

from __future__ import annotations

import time
from pathlib import Path

import structlog
from kruise_local.testing import container, pod_body, running, wait_for

from airflow_kruise_chain.hooks.kruise import KruiseHook, RetryPolicy
from airflow_kruise_chain.hooks.timeouts import ApiTimeouts

QUICK = RetryPolicy(attempts=4, initial=0.01, maximum=0.05)


def test_a_quiet_watch_window_longer_than_a_reads_timeout_ends_when_the_server_ends_it(
    core, namespace, kubeconfig: Path
) -> None:
    """Its read timeout is its window plus a grace: cncf.kubernetes' one 60 s for all made a quiet window of
    60 s race the client's timer, and the watch was retried with a warning."""
    core.create_namespaced_pod(namespace, pod_body("quiet", container("main", "exec sleep 300")))
    wait_for(lambda: running(core, namespace, "quiet", "main"))
    hook = KruiseHook(
        conn_id=None, config_file=str(kubeconfig), retry_policy=QUICK, api_timeouts=ApiTimeouts(read=1.0)
    )
    version = hook.read_pod("quiet", namespace).resource_version
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        seen = list(hook.watch_pod("quiet", namespace, 3, resource_version=version))
    assert seen == [] and time.monotonic() - started >= 2.5  # the server's end of the window, not a timer
    assert [e for e in logs if e["log_level"] == "warning"] == []


def test_a_silent_stages_log_follow_ends_after_its_idle_time_without_a_warning(
    core, namespace, kubeconfig: Path
) -> None:
    """A stage may be silent for long: its follow ends every `idle_stream` s (the follow loop reads the pod
    and follows again), which is no cut connection."""
    core.create_namespaced_pod(namespace, pod_body("silent", container("main", "echo hello; exec sleep 300")))
    wait_for(lambda: running(core, namespace, "silent", "main"))
    hook = KruiseHook(conn_id=None, config_file=str(kubeconfig), api_timeouts=ApiTimeouts(idle_stream=1.0))
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        lines = list(hook.follow_log("silent", namespace, "main"))
    assert lines == ["hello"] and time.monotonic() - started < 30
    assert [e["log_level"] for e in logs] == ["info"]
    assert "no output on the log stream" in logs[0]["event"] % tuple(logs[0].get("positional_args", ()))
