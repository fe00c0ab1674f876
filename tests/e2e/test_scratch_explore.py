from __future__ import annotations

from tests.e2e.conftest import xcoms
from tests.e2e.inline import run_inline, task_states


def test_fail(e2e_cluster, capfd):
    import pendulum
    from airflow.sdk import DAG
    from airflow_kruise_chain.chain import KruiseChain
    with DAG("t_fail", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, swap_timeout=20) as chain:
            a = chain.stage("a", image="busybox:1.36", cmds=["/bin/sh", "-c", "echo a; echo b; exit 3"])
            b = chain.stage("b", image="alpine:3.20", cmds=["/bin/sh", "-c", "echo never"])
            a >> b
    run = run_inline(dag)
    out = capfd.readouterr()
    print("STATE", run.state)
    print(task_states(run))
    print(xcoms(run))
    open("/tmp/explore_out.txt", "w").write(out.out + "\n=====ERR\n" + out.err)
