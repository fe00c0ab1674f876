"""DAGs written the way KubernetesPodOperator and TaskFlow users write them, run end to end (`dag.test()` on
the local cluster): each shape gives what KPO or TaskFlow would (XCom values, logs, skip and fail semantics,
retries, timeouts). Many shapes share one DAG run, each test one cluster."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

pytestmark = pytest.mark.slow
START = pendulum.datetime(2026, 1, 1, tz="UTC")
FLAKY = '[ -e "$CHAIN_SCRATCH/tried" ] || { touch "$CHAIN_SCRATCH/tried"; echo "first try fails"; exit 2; }'


def mapped_xcoms(run: Any, task_id: str) -> list[Any]:
    """The return_value XComs of a mapped task's indexes, in map-index order."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value")
        ).all()
        return [XComModel.deserialize_value(r) for r in sorted(rows, key=lambda r: r.map_index)]


def test_kpo_tasks_as_stages(e2e_cluster, tmp_path, monkeypatch) -> None:
    """KPO tasks moved into a chain as they were written: a tag from params, `{{ ds }}` and a Variable in the
    command, `env_vars` as V1EnvVars (one from a Secret key), `secrets=[Secret(...)]`, numbers as quantities,
    an XComArg as `arguments`, `task_id` with KPO's pod `name`, `skip_on_exit_code` (its downstream skipped
    as KPO's would be), `retries`, a failure with an `all_done` task after it, `execution_timeout`."""
    from airflow.providers.cncf.kubernetes.secret import Secret
    from airflow.sdk import DAG, task
    from kubernetes import client, config
    from kubernetes.client import models as k8s

    from airflow_kruise_chain.chain import KruiseChain

    monkeypatch.setenv("AIRFLOW_VAR_GREETING", "bonjour")
    core = client.CoreV1Api(config.new_client_from_config(str(e2e_cluster.write_kubeconfig(tmp_path / "k"))))
    core.create_namespaced_secret("default", {"metadata": {"name": "creds"}, "stringData": {"token": "t0k"}})
    failures = Failures()
    with DAG(
        "users_kpo",
        schedule=None,
        start_date=START,
        params={"tag": "1.36"},
        default_args={"on_failure_callback": failures},
    ) as dag:

        @task
        def argv() -> list[str]:
            return ["hello", "from", "xcom"]

        with KruiseChain(
            "c",
            namespace="default",
            prewarm=False,
            image_pull_secrets="regcred",
            tolerations=[k8s.V1Toleration(key="dedicated", operator="Exists", effect="NoSchedule")],
            node_selector={"kubernetes.io/os": "linux"},
            labels={"team": "data"},
            on_finish_action="delete_pod",
            startup_timeout_seconds=120,
            **FAST_POD,
        ) as chain:
            templated = chain.stage(
                task_id="templated_env",
                name="templated",
                image="busybox:{{ params.tag }}",
                cmds=["sh", "-c"],
                arguments=[
                    'echo "ds={{ ds }} greeting={{ var.value.greeting }} tag=$TAG token=$TOKEN key=$KEY"; '
                    'printf \'{"tag": "%s"}\' "$TAG" > "$CHAIN_OUTPUT"'
                ],
                env_vars=[
                    k8s.V1EnvVar(name="TAG", value="{{ params.tag }}"),
                    k8s.V1EnvVar(
                        name="KEY",
                        value_from=k8s.V1EnvVarSource(
                            secret_key_ref=k8s.V1SecretKeySelector(name="creds", key="token")
                        ),
                    ),
                ],
                secrets=[Secret("env", "TOKEN", "creds", "token")],
                container_resources=k8s.V1ResourceRequirements(limits={"memory": "64Mi", "cpu": 1}),
                get_logs=True,
            )
            echoed = chain.stage(task_id="echo_args", image="busybox:1.36", cmds=["echo"], arguments=argv())
            maybe = chain.stage(
                "maybe", image="busybox:1.36", cmds=["sh", "-c", "exit 99"], skip_on_exit_code=99
            )
            after_skip = chain.stage("after-skip", image="busybox:1.36", cmds=["true"])
            flaky = chain.stage(
                "flaky",
                image="busybox:1.36",
                cmds=["sh", "-c", FLAKY],
                retries=1,
                retry_delay=timedelta(seconds=1),
            )
            broken = chain.stage("broken", image="busybox:1.36", cmds=["sh", "-c", "echo doomed; exit 7"])
            cleanup = chain.stage("cleanup", image="busybox:1.36", cmds=["true"], trigger_rule="all_done")
            slow = chain.stage(
                "slow",
                image="busybox:1.36",
                cmds=["sleep", "60"],
                execution_timeout=timedelta(seconds=3),
            )
            templated >> echoed >> maybe >> after_skip
            echoed >> flaky >> broken >> cleanup
            echoed >> slow

    run = run_inline(dag)
    states = {task: state for task, (state, _, _) in task_states(run).items()}
    tries = {task: tried for task, (_, tried, _) in task_states(run).items()}
    assert {
        t: states[t] for t in ("c.templated_env", "c.echo_args", "c.flaky", "c.cleanup")
    } == dict.fromkeys(("c.templated_env", "c.echo_args", "c.flaky", "c.cleanup"), "success"), failures.errors
    assert (states["c.maybe"], states["c.after-skip"]) == ("skipped", "skipped")
    assert (states["c.broken"], states["c.slow"], states["c.teardown"]) == ("failed", "failed", "failed")
    assert tries["c.flaky"] == 2
    assert "exit code 7" in str(failures.errors["c.broken"]) and "doomed" in str(failures.errors["c.broken"])
    assert "Timeout" in type(failures.errors["c.slow"]).__name__
    values = xcoms(run)
    result = values["c.templated_env"]
    assert (result["stage"], result["image"], result["outputs"]) == (
        "templated",
        "busybox:1.36",
        {"tag": "1.36"},
    )
    line = result["log_tail"][0]
    assert f"ds={run.logical_date:%Y-%m-%d} greeting=bonjour tag=1.36 token=t0k key=t0k" == line
    assert values["c.echo_args"]["log_tail"] == ["hello from xcom"]


def test_taskflow_stages_as_task_kubernetes_users_write_them(e2e_cluster) -> None:
    """`@task.kubernetes`-style functions as stages: KPO's `name`, no return (None), defaults, *args and
    **kwargs, a dict return (multiple_outputs given, and inferred from `-> dict[str, int]`), a stage mapped
    over the list an earlier stage returned and reduced, `expand_kwargs`, a classic stage mapped over a
    TaskFlow stage's XCom, `skip_on_exit_code` by `sys.exit`, an exception's last line in the failure, mapped
    indexes that fail once and are retried."""
    from airflow.sdk import DAG, task

    from airflow_kruise_chain.chain import KruiseChain

    failures = Failures()
    with DAG(
        "users_taskflow",
        schedule=None,
        start_date=START,
        params={"n": 3},
        default_args={"on_failure_callback": failures},
    ) as dag:
        with KruiseChain("tf", namespace="default", prewarm=False, **FAST_POD) as chain:

            @task.kruise_chain(image="python:3.11-slim", name="k8s_test", namespace="default")
            def execute_in_k8s_pod() -> None:
                import time

                print("Hello from k8s pod")
                time.sleep(0.1)

            @chain.task(image="python:3.11-slim")
            def signature(a: int, b: int = 2, *rest: int, c: str = "x", **named: int) -> dict:
                return {"a": a, "b": b, "rest": list(rest), "c": c, "named": named}

            @chain.task(image="python:3.11-slim")
            def listing(n: str) -> list[int]:
                return list(range(1, int(n) + 1))

            @chain.task(image="python:3.11-slim")
            def double(x: int) -> int:
                return 2 * x

            @chain.task(image="python:3.11-slim", multiple_outputs=True)
            def stats(values: list[int]) -> dict:
                return {"total": sum(values), "count": len(values)}

            @chain.task(image="python:3.11-slim")
            def inferred(total: int) -> dict[str, int]:
                return {"half": total // 2}

            @chain.task(image="python:3.11-slim")
            def add(x: int, y: int) -> int:
                return x + y

            @chain.task(image="python:3.11-slim")
            def words() -> list[list[str]]:
                return [["one"], ["two"]]

            @chain.task(image="python:3.11-slim", skip_on_exit_code=99)
            def nothing_to_do() -> None:
                import sys

                sys.exit(99)

            @chain.task(image="python:3.11-slim")
            def boom() -> None:
                raise ValueError("bad input file")

            # a fourth mapped stage: the pod's annotations have room for it with fewer indexes recorded
            @chain.task(
                image="python:3.11-slim", retries=1, retry_delay=timedelta(seconds=1), max_map_length=8
            )
            def flaky(x: int) -> int:
                import os

                marker = os.path.join(os.environ["CHAIN_SCRATCH"], f"tried-{x}")
                if not os.path.exists(marker):
                    open(marker, "w").close()
                    raise RuntimeError("first try fails")
                return x

            execute_in_k8s_pod() >> signature(1, 3, 4, 5, c="y", k=6)
            summary = stats(double.expand(x=listing("{{ params.n }}")))
            inferred(summary["total"])
            add.expand_kwargs([{"x": 1, "y": 2}, {"x": 3, "y": 4}])
            chain.stage.partial("say", image="busybox:1.36", cmds=["echo"], max_map_length=8).expand(
                arguments=words()
            )
            nothing_to_do()
            boom()
            flaky.expand(x=[1, 2])
            halves = inferred(summary["count"])

        @task
        def check(half: int) -> int:  # a plain task downstream reads a TaskFlow stage's key
            return half

        check(halves["half"])

    run = run_inline(dag)
    states = {task: state for task, (state, _, _) in task_states(run).items()}
    tries = {task: tried for task, (_, tried, _) in task_states(run).items()}
    assert (states["tf.nothing_to_do"], states["tf.boom"]) == ("skipped", "failed")
    assert all(
        s == "success" for t, s in states.items() if t not in ("tf.nothing_to_do", "tf.boom", "tf.teardown")
    )
    assert "ValueError: bad input file" in str(failures.errors["tf.boom"])
    values = xcoms(run)
    assert values.get("tf.execute_in_k8s_pod") is None  # as for any @task returning None
    assert xcoms(run, "stage_result")["tf.execute_in_k8s_pod"]["log_tail"] == ["Hello from k8s pod"]
    assert values["tf.signature"] == {"a": 1, "b": 3, "rest": [4, 5], "c": "y", "named": {"k": 6}}
    assert mapped_xcoms(run, "tf.double") == [2, 4, 6]
    assert values["tf.stats"] == {"total": 12, "count": 3}
    assert xcoms(run, "total")["tf.stats"] == 12
    assert values["tf.inferred"] == {"half": 6} and xcoms(run, "half")["tf.inferred"] == 6
    assert values["check"] == 1
    assert mapped_xcoms(run, "tf.add") == [3, 7]
    assert mapped_xcoms(run, "tf.flaky") == [1, 2] and tries["tf.flaky"] == 2  # each index retried once
    assert [r["log_tail"] for r in mapped_xcoms(run, "tf.say")] == [["one"], ["two"]]
