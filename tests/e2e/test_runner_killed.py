"""A stage whose runner (its container's pid 1) is SIGKILLed from outside the pod, as a node's OOM killer or
an agent on the node would: the kubelet records the container's end as exit code 137, reason Error (runc's
128 + signal, which kruise-local models on every sandbox: kruise-local/tests/runtime/
test_conformance_signal_exit.py), the runner restarts and records the generation as `interrupted`, and the
task's error says the container was killed from outside, not that the stage exited so."""

from __future__ import annotations

from kruise_local import resources as R

from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states
from tests.e2e.test_faults import START, slot_running, when_file_appears

WORK = r"""
echo "working, then the runner is killed"
touch "$CHAIN_SCRATCH/runner.kill"
sleep 60
"""


def test_a_runner_killed_from_outside_fails_its_stage_naming_the_kill(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    cluster = e2e_cluster
    failed = Failures()
    with DAG("fault_runner_kill", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=60, **FAST_POD) as chain:
            chain.stage("work", image="alpine:3.20", cmds=["/bin/sh", "-c", WORK], on_failure_callback=failed)

    def kill(pod):
        slot = slot_running(pod, "work") or ""

        def kill_pid_1() -> None:  # the whole container: its pid 1 SIGKILLed, its namespace goes with it
            worker = cluster.kubelet.worker_for(
                cluster.store.peek(R.PODS, "default", pod["metadata"]["name"])
            )
            worker.containers[slot].current.proc.signal(9)

        cluster.call(kill_pid_1)

    killer = when_file_appears(cluster, "runner.kill", kill)
    run = run_inline(dag)
    killer.join(timeout=5)
    out = capfd.readouterr().out
    assert task_states(run)["c.work"][0] == "failed", out[-3000:]
    error = str(failed.errors["c.work"])
    assert "(interrupted; killed by SIGKILL)" in error, error
    assert "was killed by SIGKILL from outside the pod" in error and "exit code 137, reason Error" in error
    assert "working, then the runner is killed" in error  # with the stage's last lines
