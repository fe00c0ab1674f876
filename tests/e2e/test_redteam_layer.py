"""Red team of sealed stages, round 2 (issue 37): an attacker stage goes after a later stage of its slot
through the container's own filesystem, which a same-image swap keeps (the writable layer: `/bin/sh`,
`python3`, site-packages and `.pth` files, `PATH` folders, `$HOME` and its rc files, `/tmp`), and through
/dev, end to end on the local cluster with `dag.test()` (kruise-local as root gives each container its
writable layer, as containerd does). Each case asserts the safe outcome: the victim runs its own command with
its own env, exit code and outputs, and sees nothing of what the attacker wrote outside the scratch."""

from __future__ import annotations

import base64
import os
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, Failures, run_inline, task_states

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the writable layer needs kruise-local as root"),
]

START = pendulum.datetime(2026, 1, 1, tz="UTC")
PY = "python:3.11-slim"

# Finding 1 exactly: a `.pth` in the user site-packages of the image's HOME (/root) and of whatever HOME the
# stage has; Python runs it at every start, before the victim's own code.
PTH = (
    "import json, os; json.dump({'hijacked': True, 'secret': os.environ.get('SECRET')}, "
    "open(os.environ['CHAIN_OUTPUT'], 'w')); print('HIJACKED-PTH'); os._exit(0)\n"
)
PLANT_PTH = f"""
import os
pth = {PTH!r}
for home in sorted({{"/root", os.environ["HOME"]}}):
    site = os.path.join(home, ".local/lib/python3.11/site-packages")
    try:
        os.makedirs(site, exist_ok=True)
        open(os.path.join(site, "zz.pth"), "w").write(pth)
        print("PLANTED", site)
    except OSError as e:
        print("REFUSED", site, e.strerror)
"""
VICTIM_PY = """
import json, os, sys
json.dump({"me": sys.argv[1], "secret": os.environ.get("SECRET")}, open(os.environ["CHAIN_OUTPUT"], "w"))
sys.exit(int(sys.argv[2]))
"""


def _api(cluster: Any, tmp_path: Any) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(cluster.write_kubeconfig(tmp_path / "admin"))))


def _states(run: Any, *names: str) -> list[str]:
    states = task_states(run)
    return [states[f"c.{name}"][0] for name in names]


def test_a_pth_file_in_the_slots_home_does_not_take_over_the_next_stage(e2e_cluster, tmp_path, capfd):
    """Issue 37 finding 1: three python:3.11-slim stages; the attacker plants
    `/root/.local/lib/python3.11/site-packages/zz.pth`; the victim, in the same slot (generation 3) with a
    Secret in its env, must exit 3 with its own outputs."""
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    _api(e2e_cluster, tmp_path).create_namespaced_secret(
        "default",
        {"metadata": {"name": "victim"}, "data": {"password": base64.b64encode(b"s3cret").decode()}},
    )
    failures = Failures()
    with DAG("redteam_layer_pth", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            attacker = chain.stage("attacker", image=PY, cmds=["python3", "-c", PLANT_PTH])
            middle = chain.stage("middle", image=PY, cmds=["python3", "-c", VICTIM_PY, "middle", "0"])
            victim = chain.stage(
                "victim",
                image=PY,
                cmds=["python3", "-c", VICTIM_PY, "victim", "3"],
                env={"SECRET": {"secretKeyRef": {"name": "victim", "key": "password"}}},
                on_failure_callback=failures,
            )
            attacker >> middle >> victim
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "PLANTED" in out or "REFUSED" in out, out[-3000:]  # the attack ran
    assert _states(run, "attacker", "middle", "victim") == ["success", "success", "failed"], out[-3000:]
    assert "failed with exit code 3" in str(failures.errors["c.victim"])
    results = xcoms(run)
    assert results["c.middle"]["outputs"] == {"me": "middle", "secret": None}
    assert "HIJACKED-PTH" not in out
    assert "/root/.local/lib/python3.11/site-packages" not in [
        line.split()[1] for line in out.splitlines() if line.startswith("PLANTED ")
    ]  # the image's HOME is read-only


# A root stage rewrites its image in its layer: /bin/sh (renamed into place: the running shell's file is
# busy), python3 and a PATH folder ahead of /usr/bin, and a .pth in the system site-packages.
REWRITE = r"""
hijack='#!/usr/bin/dash
echo HIJACKED
'
for target in /usr/local/bin/python3 /usr/local/bin/cat /usr/bin/sh.new; do
  { printf '%s' "$hijack" > "$target" && chmod 755 "$target"; } 2>/dev/null && echo "WROTE $target"
done
mv -f /usr/bin/sh.new /bin/sh 2>/dev/null && echo "WROTE /bin/sh"
echo 'print("HIJACKED-SITE")' > /usr/lib/python3/dist-packages/zz.pth 2>/dev/null && echo "WROTE zz.pth"
echo attacked
"""
VICTIM_SH = 'cat /etc/hostname > /dev/null; printf \'{"me": "%s"}\' "$1" > "$CHAIN_OUTPUT"; exit "$2"'


def test_a_root_stage_rewriting_its_image_changes_nothing_for_the_next_stage_of_its_slot(e2e_cluster, capfd):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG("redteam_layer_rewrite", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD) as chain:
            attacker = chain.stage("attacker", image=PY, cmds=["/bin/sh", "-c", REWRITE])
            middle = chain.stage("middle", image=PY, cmds=["python3", "-c", VICTIM_PY, "middle", "0"])
            victim_py = chain.stage(
                "victim-py", image=PY, cmds=["python3", "-c", VICTIM_PY, "victim-py", "0"]
            )
            victim_sh = chain.stage(
                "victim-sh", image=PY, cmds=["/bin/sh", "-c", VICTIM_SH, "sh", "vsh", "5"]
            )
            attacker >> middle >> victim_py >> victim_sh
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "attacked" in out, out[-3000:]
    assert "HIJACKED" not in out and "WROTE" not in out, out[-3000:]  # the slot's root is read-only
    states = _states(run, "attacker", "middle", "victim-py", "victim-sh")
    assert states == ["success", "success", "success", "failed"], out[-3000:]  # victim_sh's own exit 5
    results = xcoms(run)
    assert results["c.middle"]["outputs"] == {"me": "middle", "secret": None}
    assert results["c.victim-py"]["outputs"] == {"me": "victim-py", "secret": None}


# What a stage leaves in its temporary folders and HOME (rc files, a planted tool, a config), read by the next
# stage of its slot, which lists them and runs a login shell (it reads $HOME/.profile).
PLANT_HOME = r"""
for d in "$HOME" /tmp /dev/shm /var/tmp; do
  { mkdir -p "$d/.config" && echo "plant-$d" > "$d/.config/plant" \
    && echo "echo HIJACKED-PROFILE" > "$d/.profile"; } 2>/dev/null && echo "PLANTED $d"
done
mkdir -p "$CHAIN_SCRATCH/by-design" && echo shared > "$CHAIN_SCRATCH/by-design/note"
"""
LOOK = r"""
seen() { ls -A "$1" 2>/dev/null | tr '\n' ' '; }
found=$(for d in "$HOME" /tmp /dev/shm /var/tmp; do cat "$d/.config/plant" 2>/dev/null; done)
printf '{"home": "%s", "tmp": "%s", "shm": "%s", "var_tmp": "%s", "found": "%s", "scratch": "%s"}' \
  "$(seen "$HOME")" "$(seen /tmp)" "$(seen /dev/shm)" "$(seen /var/tmp)" "$found" \
  "$(cat "$CHAIN_SCRATCH/by-design/note")" > "$CHAIN_OUTPUT"
"""
SECURITY = {
    "root": {},
    "nonroot": {"security_context": {"runAsUser": 65532, "runAsGroup": 65532}},
    "restricted": {"pod_security": "restricted"},
}


@pytest.mark.parametrize("security", sorted(SECURITY))
def test_home_and_temporary_files_of_a_stage_are_gone_for_the_next(e2e_cluster, capfd, security):
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(f"redteam_layer_home_{security}", schedule=None, start_date=START) as dag:
        with KruiseChain("c", namespace="default", prewarm=False, **FAST_POD, **SECURITY[security]) as chain:
            attacker = chain.stage("attacker", image="busybox:1.36", cmds=["/bin/sh", "-c", PLANT_HOME])
            middle = chain.stage("middle", image="busybox:1.36", cmds=["/bin/sh", "-c", LOOK])
            same = chain.stage("same", image="busybox:1.36", cmds=["/bin/sh", "-l", "-c", LOOK])
            other = chain.stage("other", image=PY, cmds=["/bin/sh", "-l", "-c", LOOK])
            attacker >> middle >> same >> other
    run = run_inline(dag)
    out = capfd.readouterr().out
    assert "PLANTED" in out, out[-3000:]  # HOME, /tmp and /dev/shm are writable
    assert _states(run, "attacker", "middle", "same", "other") == ["success"] * 4, out[-3000:]
    results = xcoms(run)
    for name in ("same", "other", "middle"):  # "same": the attacker's slot, its image
        outputs = results[f"c.{name}"]["outputs"]
        # the scratch is shared by design; /tmp holds only the stage's own empty HOME
        assert outputs == {
            "home": "",
            "tmp": ".kruise-chain-home ",
            "shm": "",
            "var_tmp": "",
            "found": "",
            "scratch": "shared",
        }, (name, outputs)
    assert "HIJACKED-PROFILE" not in out
