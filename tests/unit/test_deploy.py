"""deploy/ as kustomize builds it (`kubectl kustomize`, what `kubectl apply -k deploy/` applies): one
identity, named in one place (deploy/identity.yaml), in every object; changing that place changes them all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH (./dev.sh test installs one)")
DEFAULT = {
    "namespace": "chains",
    "serviceAccountNamespace": "chains",
    "serviceAccountName": "airflow-kruise-chain",
}


def render(folder: Path) -> dict[str, dict[str, Any]]:
    """The objects `kubectl kustomize folder` builds, by kind."""
    done = subprocess.run(
        [str(KUBECTL), "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    objects = [o for o in yaml.safe_load_all(done.stdout) if o]
    by_kind = {o["kind"]: o for o in objects}
    assert len(by_kind) == len(objects), "one object of each kind"
    return by_kind


def identity_of(objects: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """Every value each object gives the chains' namespace, the account's namespace and its name."""
    subject = objects["RoleBinding"]["subjects"][0]
    (condition,) = objects["ValidatingAdmissionPolicy"]["spec"]["matchConditions"]
    parts = condition["expression"].split("'")
    assert parts[0].strip() == "request.userInfo.username ==" and parts[1] == "system:serviceaccount:", parts
    return {
        "namespace": {
            objects["Namespace"]["metadata"]["name"],
            objects["Role"]["metadata"]["namespace"],
            objects["RoleBinding"]["metadata"]["namespace"],
        },
        "serviceAccountNamespace": {
            objects["ServiceAccount"]["metadata"]["namespace"],
            subject["namespace"],
            parts[3],
        },
        "serviceAccountName": {objects["ServiceAccount"]["metadata"]["name"], subject["name"], parts[7]},
    }


def test_deploy_is_one_of_each_object_naming_one_identity() -> None:
    objects = render(ROOT / "deploy")
    assert sorted(objects) == [
        "Namespace",
        "Role",
        "RoleBinding",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]  # the identity's ConfigMap is local config: never applied
    assert identity_of(objects) == {key: {value} for key, value in DEFAULT.items()}
    binding = objects["RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": objects["Role"]["metadata"]["name"],
    }
    assert objects["ValidatingAdmissionPolicyBinding"]["spec"]["policyName"] == "airflow-kruise-chain"
    labels = objects["Namespace"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")


def test_the_files_are_what_deploy_applies() -> None:
    """Tests (and the preflight's Role check) read deploy/role.yaml and deploy/admission-policy.yaml alone:
    as shipped, each file is exactly what kustomize applies."""
    rendered = render(ROOT / "deploy")
    for name in ("namespace", "serviceaccount", "role", "rolebinding", "admission-policy"):
        for obj in yaml.safe_load_all((ROOT / "deploy" / f"{name}.yaml").read_text()):
            assert rendered[obj["kind"]] == obj, name


@pytest.mark.parametrize(
    "identity",
    [
        {
            "namespace": "team-chains",
            "serviceAccountNamespace": "airflow",
            "serviceAccountName": "airflow-worker",
        },
        {"namespace": "etl", "serviceAccountNamespace": "etl", "serviceAccountName": "runner"},
    ],
)
def test_changing_the_one_place_changes_every_object(tmp_path: Path, identity: dict[str, str]) -> None:
    folder = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", folder)
    place = folder / "identity.yaml"
    text = place.read_text()
    for key, old in DEFAULT.items():
        text, count = _replace_value(text, key, old, identity[key])
        assert count == 1, f"deploy/identity.yaml names {key} once"
    place.write_text(text)
    objects = render(folder)
    assert identity_of(objects) == {key: {value} for key, value in identity.items()}
    rendered = yaml.safe_dump_all(objects.values())
    assert "namespace: chains" not in rendered and "name: chains" not in rendered  # no namespace left behind


def _replace_value(text: str, key: str, old: str, new: str) -> tuple[str, int]:
    lines, count = text.splitlines(keepends=True), 0
    for i, line in enumerate(lines):
        if line.strip().startswith(f"{key}: {old}"):
            lines[i] = line.replace(f"{key}: {old}", f"{key}: {new}", 1)
            count += 1
    return "".join(lines), count
