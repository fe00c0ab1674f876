"""Secrets and ConfigMaps in chains whose stages are not root: in a `pod_security="restricted"` chain (user
65532) and in a chain of a non-root image (distroless `:nonroot`, no security context) a stage reads a Secret
key into its env, a ConfigMap's keys and a mounted Secret volume of mode 0400, through the pod's `fsGroup`
(the local cluster owns the volumes as the kubelet's `SetVolumeOwnership` does): the files are 0440, root's
and the pod's group's, no one else's."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pendulum
import pytest

from tests.e2e.conftest import xcoms
from tests.e2e.inline import FAST_POD, run_inline, task_states
from tests.e2e.test_chain_pod_security import labelled_namespace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(__import__("os").geteuid() != 0, reason="a container's user is switched only as root"),
]
PASSWORD = "s3cr3t 'pw'\n"
USE = r"""
printf '{"uid": "%s", "env": "%s", "file": "%s", "config": "%s", "modes": "%s"}' "$(id -u)" \
  "$(printf '%s' "$DB_PASSWORD" | sha256sum | cut -d' ' -f1)" \
  "$(sha256sum < /creds/password | cut -d' ' -f1)" "$level" \
  "$(stat -L -c %a /creds/password /kruise-chain-sources/secret/db/password | tr '\n' ' ')" > "$CHAIN_OUTPUT"
"""


def _objects(cluster: Any, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(cluster.write_kubeconfig(tmp_path / "k"))))
    data = {"password": base64.b64encode(PASSWORD.encode()).decode()}
    core.create_namespaced_secret(namespace, {"metadata": {"name": "db"}, "data": data})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "conf"}, "data": {"level": "3"}})


PY_USE = """
import hashlib, json, os
digest = lambda data: hashlib.sha256(data).hexdigest()
files = ("/creds/password", "/kruise-chain-sources/secret/db/password")
modes = "".join(oct(os.stat(p).st_mode & 0o777)[2:] + " " for p in files)
out = {"uid": str(os.getuid()), "env": digest(os.environ["DB_PASSWORD"].encode()),
       "file": digest(open(files[0], "rb").read()), "config": os.environ["level"], "modes": modes}
open(os.environ["CHAIN_OUTPUT"], "w").write(json.dumps(out))
"""


def _run(namespace: str, name: str, image: str = "busybox:1.36", **options: Any) -> Any:
    from airflow.sdk import DAG

    from airflow_kruise_chain.chain import KruiseChain

    with DAG(name, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        with KruiseChain(
            "c",
            namespace=namespace,
            prewarm=False,
            volumes=[{"name": "creds", "secret": {"secretName": "db", "defaultMode": 0o400}}],
            **FAST_POD,
            **options,
        ) as chain:
            chain.stage(
                "use",
                image=image,
                cmds=["/bin/sh", "-c", USE] if image.startswith("busybox") else ["python3", "-c", PY_USE],
                env={"DB_PASSWORD": {"secretKeyRef": {"name": "db", "key": "password"}}},
                env_from=[{"configMapRef": {"name": "conf"}}],
                volume_mounts=[{"name": "creds", "mountPath": "/creds", "readOnly": True}],
            )
    return run_inline(dag)


def _expected(uid: int) -> dict[str, str]:
    """What the stage reports: its user, the Secret through its env and its volume, the ConfigMap key, and
    the modes of the two Secret files (0400 made 0440 by the fsGroup: root and the pod's group only)."""
    digest = hashlib.sha256(PASSWORD.encode()).hexdigest()
    return {"uid": str(uid), "env": digest, "file": digest, "config": "3", "modes": "440 440 "}


@pytest.mark.parametrize(
    ("level", "options"),
    [
        ("restricted", {"pod_security": "restricted"}),  # runs as 65532
        ("baseline", {"image": "gcr.io/distroless/python3-debian12:nonroot"}),  # the image's user, 65532
    ],
    ids=["restricted-chain", "non-root-image"],
)
def test_a_non_root_chain_reads_secret_env_a_secret_volume_and_a_configmap(
    e2e_cluster, capfd, tmp_path, level: str, options: dict[str, Any]
) -> None:
    if e2e_cluster.kubelet.runtime.sandbox not in ("oci", "bwrap"):
        pytest.skip("only the oci and bwrap sandboxes switch users")
    ns = labelled_namespace(e2e_cluster, level, tmp_path)
    _objects(e2e_cluster, ns, tmp_path)
    run = _run(ns, f"{level}_secrets", **options)
    out = capfd.readouterr().out
    assert str(run.state) == "success", (task_states(run), out[-3000:])
    assert xcoms(run)["c.use"]["outputs"] == _expected(65532)
