"""`KruiseHook.exec_in_pod` against the local cluster: exit codes and output, a command that cannot run,
and an identity without `pods/exec` (a 403 the fast go turns into the annotation path); an exec opened
first (`open_exec_in_pod`) that is given its stdin later, or closed without any."""

from __future__ import annotations

import time

import pytest
from kruise_local import ClusterConfig, LocalCluster
from kruise_local.testing import container, pod_body, running, service_account_token, wait_for

from airflow_kruise_chain.hooks.kruise import KruiseApiError, KruiseHook


def test_exec_in_pod_gives_the_exit_code_output_and_stdin(core, namespace, kubeconfig):
    core.create_namespaced_pod(namespace, pod_body("p", container("main", "exec sleep 300")))
    wait_for(lambda: running(core, namespace, "p", "main"))
    hook = KruiseHook(conn_id=None, config_file=str(kubeconfig))
    script = 'head -c "$0"; echo; echo err >&2; exit 3'
    code, output = hook.exec_in_pod("p", namespace, "main", ["sh", "-c", script, "5"], b"12345xyz", 30)
    assert code == 3 and "12345\n" in output and "err\n" in output
    assert hook.exec_in_pod("p", namespace, "main", ["true"], b"", 30) == (0, "")
    with pytest.raises(KruiseApiError, match="executable file not found"):
        hook.exec_in_pod("p", namespace, "main", ["no-such-command"], b"", 30)


def test_an_opened_exec_runs_its_command_which_gets_stdin_when_sent_or_none_when_closed(
    core, namespace, kubeconfig
):
    core.create_namespaced_pod(namespace, pod_body("p", container("main", "exec sleep 300")))
    wait_for(lambda: running(core, namespace, "p", "main"))
    hook = KruiseHook(conn_id=None, config_file=str(kubeconfig))

    def up(name: str) -> bool:
        return hook.exec_in_pod("p", namespace, "main", ["cat", f"/tmp/{name}"], b"", 30) == (0, "up\n")

    # the command runs before its stdin comes: it marks that it started, then reads what it is given
    script = (
        'echo up >/tmp/"$1"; n=$(head -c 5 | wc -c); [ "$n" = 0 ] || echo "$n" >/tmp/"$1".got; echo "got $n"'
    )
    given = hook.open_exec_in_pod("p", namespace, "main", ["sh", "-c", script, "sh", "given"])
    wait_for(lambda: up("given"))
    assert given.send(b"12345", 30) == (0, "got 5\n")
    closed = hook.open_exec_in_pod("p", namespace, "main", ["sh", "-c", script, "sh", "closed"])
    wait_for(lambda: up("closed"))
    closed.close()  # nothing sent: the command reads an empty stdin (or the runtime ends it), never data
    time.sleep(1)
    got = hook.exec_in_pod("p", namespace, "main", ["sh", "-c", "cat /tmp/*.got"], b"", 30)
    assert got[1] == "5\n"  # the given exec's only


def test_exec_in_pod_refused_by_rbac_is_a_403(tmp_path):
    with LocalCluster(
        ClusterConfig(profile="fast", root=str(tmp_path / "c"), authorization_mode="RBAC")
    ) as c:
        admin = KruiseHook(conn_id=None, config_file=str(c.write_kubeconfig(tmp_path / "a")))
        rule = {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}
        token = service_account_token(admin.api_client, "default", "sa", [rule])
        admin.create_pod(pod_body("p", container("main", "exec sleep 300")), "default")
        wait_for(lambda: getattr(admin.read_pod("p", "default"), "phase", None) == "Running")
        hook = KruiseHook(conn_id=None, config_file=str(c.write_kubeconfig(tmp_path / "s", token=token)))
        with pytest.raises(KruiseApiError) as err:
            hook.exec_in_pod("p", "default", "main", ["true"], b"", 30)
        assert err.value.status == 403
        assert "Grant the verbs 'get' and 'create' on 'pods/exec'" in str(err.value)
        assert 'cannot get resource "pods/exec"' in str(err.value)


def test_an_exec_leaves_the_hooks_other_requests_alone(core, namespace, kubeconfig):
    """The official client's `stream` swaps its API client's request method while it runs: requests another
    thread makes on the hook meanwhile must still be plain HTTP."""
    import threading

    core.create_namespaced_pod(namespace, pod_body("p", container("main", "exec sleep 300")))
    wait_for(lambda: running(core, namespace, "p", "main"))
    hook = KruiseHook(conn_id=None, config_file=str(kubeconfig))
    hook.read_pod("p", namespace)  # the hook's client made before the exec
    done = threading.Event()
    thread = threading.Thread(
        target=lambda: (hook.exec_in_pod("p", namespace, "main", ["sleep", "1"], b"", 30), done.set())
    )
    thread.start()
    reads = []
    while not done.is_set():
        reads.append(hook.read_pod("p", namespace))
    thread.join()
    assert len(reads) > 1 and all(r and r.name == "p" for r in reads)


def test_an_exec_over_https_checks_the_servers_certificate(tmp_path):
    """The exec's WebSocket is opened by `hooks/podexec.py` itself (with its timeouts): over HTTPS it trusts
    the kubeconfig's CA and nothing else."""
    import yaml

    with LocalCluster(ClusterConfig(profile="fast", root=str(tmp_path / "c"), tls=True)) as c:
        config = c.write_kubeconfig(tmp_path / "kubeconfig")
        hook = KruiseHook(conn_id=None, config_file=str(config))
        hook.create_pod(pod_body("p", container("main", "exec sleep 300")), "default")
        wait_for(lambda: getattr(hook.read_pod("p", "default"), "phase", None) == "Running")
        wait_for(lambda: running(hook.core_v1_client, "default", "p", "main"))
        assert hook.exec_in_pod("p", "default", "main", ["head", "-c", "3"], b"abc", 30) == (0, "abc")
        other = yaml.safe_load(config.read_text())
        other["clusters"][0]["cluster"].pop("certificate-authority-data", None)
        other["clusters"][0]["cluster"].pop("certificate-authority", None)
        (tmp_path / "no-ca").write_text(yaml.safe_dump(other))
        stranger = KruiseHook(conn_id=None, config_file=str(tmp_path / "no-ca"))
        with pytest.raises(KruiseApiError, match="certificate verify failed"):
            stranger.open_exec_in_pod("p", "default", "main", ["true"])
