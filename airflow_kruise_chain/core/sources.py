"""Stage credentials and config: keys of Secrets and ConfigMaps a stage reads into its environment.

A stage declares references only (`env_sources`: env NAME -> kind, name, key; `env_from`: every key of a
Secret or ConfigMap). No value ever travels in the run spec, an annotation, an event or a log: the chain pod's
slots mount every Secret and ConfigMap its stages declare (read-only volumes, declared when the pod is
created, since a running pod cannot gain volumes), and the runner reads into each stage's environment only
the keys that stage declared. A stage that reads its slot's mounts itself sees everything the chain declared:
put stages of different trust in different chains.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import ChainConfigError

KINDS = ("secret", "configMap")
SOURCES_MOUNT = "/kruise-chain-sources"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # a DNS subdomain (Secret and ConfigMap names)
_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # IsConfigMapKey, which Secrets share


def mount_path(kind: str, name: str) -> str:
    """Where both slots mount the Secret or ConfigMap `name` (read-only)."""
    return f"{SOURCES_MOUNT}/{kind.lower()}/{name}"


def volume_name(kind: str, name: str) -> str:
    """The pod volume of a source (a DNS label, whatever the source's name)."""
    return f"kc-{kind.lower()[:6]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def _check_ref(where: str, ref: Any, with_key: bool) -> None:
    fields = {"kind", "name", "key"} if with_key else {"kind", "name"}
    if not isinstance(ref, Mapping) or set(ref) != fields:
        raise ChainConfigError(where, f"must be a dict with exactly {', '.join(sorted(fields))}")
    if ref["kind"] not in KINDS:
        raise ChainConfigError(f"{where}.kind", f"must be one of {', '.join(KINDS)}")
    name = ref["name"]
    if not isinstance(name, str) or len(name) > 253 or not _NAME.fullmatch(name):
        raise ChainConfigError(f"{where}.name", "must be the name of a Secret or ConfigMap (a DNS subdomain)")
    if with_key:
        key = ref["key"]
        if not isinstance(key, str) or len(key) > 253 or key in (".", "..") or not _KEY.fullmatch(key):
            raise ChainConfigError(
                f"{where}.key", "must be a key of the Secret or ConfigMap ([-._a-zA-Z0-9]+)"
            )


def check(
    where: str, env_sources: Mapping[str, Any], env_from: Sequence[Any], env: Mapping[str, str]
) -> None:
    """Raise ChainConfigError naming the first invalid reference (env names are checked with `env`'s)."""
    for name, ref in env_sources.items():
        if name in env:
            raise ChainConfigError(
                f"{where}.env[{name!r}]", "is set both as a value and from a Secret/ConfigMap"
            )
        _check_ref(f"{where}.env[{name!r}]", ref, with_key=True)
    for i, ref in enumerate(env_from):
        _check_ref(f"{where}.env_from[{i}]", ref, with_key=False)


def of_stages(stages: Iterable[Any]) -> list[tuple[str, str]]:
    """(kind, name) of every Secret and ConfigMap the stages declare, sorted: what the slots mount."""
    found = set()
    for stage in stages:
        found.update((ref["kind"], ref["name"]) for ref in stage.env_sources.values())
        found.update((ref["kind"], ref["name"]) for ref in stage.env_from)
    return sorted(found)


def readers(stages: Iterable[Any]) -> dict[tuple[str, str], list[str]]:
    """(kind, name) of each Secret and ConfigMap the stages declare -> the stages that read it."""
    found: dict[tuple[str, str], list[str]] = {}
    for stage in stages:
        refs = [*stage.env_sources.values(), *stage.env_from]
        for key in sorted({(ref["kind"], ref["name"]) for ref in refs}):
            found.setdefault(key, []).append(stage.name)
    return found


def volumes(sources: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The pod volumes of `sources` (secret volumes keep their files readable by the owner only)."""
    out = []
    for kind, name in sources:
        if kind == "secret":
            out.append(
                {"name": volume_name(kind, name), "secret": {"secretName": name, "defaultMode": 0o400}}
            )
        else:
            out.append({"name": volume_name(kind, name), "configMap": {"name": name, "defaultMode": 0o444}})
    return out


def volume_mounts(sources: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """A slot's read-only mounts of `sources`."""
    return [
        {"name": volume_name(kind, name), "mountPath": mount_path(kind, name), "readOnly": True}
        for kind, name in sources
    ]


def from_arguments(
    env: Mapping[str, Any] | None, secrets: Sequence[Any] | None, env_from: Sequence[Any] | None
) -> tuple[dict[str, Any], dict[str, dict[str, str]], list[dict[str, str]]]:
    """`chain.stage`'s `env`, `secrets` and `env_from` as (plain env, env_sources, env_from).

    `env` values may be strings or, as a container's `valueFrom`, ``{"secretKeyRef": {"name", "key"}}`` /
    ``{"configMapKeyRef": {"name", "key"}}``; `secrets` takes cncf.kubernetes' `Secret("env", NAME, secret,
    key)` (or, without key, every key as env); `env_from` takes ``{"secretRef": {"name"}}`` /
    ``{"configMapRef": {"name"}}``, as a container's `envFrom`."""
    plain: dict[str, Any] = {}
    refs: dict[str, dict[str, str]] = {}
    every: list[dict[str, str]] = []
    for name, value in (env or {}).items():
        if isinstance(value, Mapping):
            ((ref_type, ref),) = value.items() if len(value) == 1 else ((None, None),)
            kind = {"secretKeyRef": "secret", "configMapKeyRef": "configMap"}.get(str(ref_type))
            if kind is None or not isinstance(ref, Mapping):
                raise ChainConfigError(
                    f"env[{name!r}]",
                    "a dict value must be {'secretKeyRef': {'name': ..., "
                    "'key': ...}} or {'configMapKeyRef': {...}}",
                )
            refs[name] = {"kind": kind, "name": ref.get("name"), "key": ref.get("key")}
        else:
            plain[name] = value
    for i, secret in enumerate(secrets or []):
        deploy_type = getattr(secret, "deploy_type", None)
        if deploy_type != "env":
            raise ChainConfigError(
                f"secrets[{i}]",
                "only Secret('env', ...) is supported: a slot's volumes are fixed when the chain pod is "
                "created; read a key into the env, or mount the Secret for the whole chain with pod_template",
            )
        if getattr(secret, "key", None):
            refs[secret.deploy_target] = {"kind": "secret", "name": secret.secret, "key": secret.key}
        else:
            every.append({"kind": "secret", "name": secret.secret})
    for i, source in enumerate(env_from or []):
        ref_type, ref = (
            next(iter(source.items())) if isinstance(source, Mapping) and len(source) == 1 else (0, 0)
        )
        kind = {"secretRef": "secret", "configMapRef": "configMap"}.get(str(ref_type))
        if kind is None or not isinstance(ref, Mapping):
            raise ChainConfigError(
                f"env_from[{i}]", "must be {'secretRef': {'name': ...}} or {'configMapRef': {...}}"
            )
        every.append({"kind": kind, "name": ref.get("name")})
    return plain, refs, every
