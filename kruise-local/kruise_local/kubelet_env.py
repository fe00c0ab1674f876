"""A container's environment (`pkg/kubelet/kubelet_pods.go` `makeEnvironmentVariables`): env and envFrom,
configMap, secret and downward-API references (a missing one, unless optional, fails the start with
CreateContainerConfigError), resourceFieldRef, and `$(VAR)` expansion
(`third_party/forked/golang/expansion`)."""

from __future__ import annotations

import base64
import re
from typing import Any

from . import resources as R
from .catalogue import Image
from .store import Obj
from .validation import parse_quantity
from .volumes import VolumeError, resolve_field

_VAR = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes, others stay as is."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def _decoded(value: str) -> str:
    """A secret's value as the container sees it: its bytes, as Go's `string([]byte)` makes them."""
    return base64.b64decode(value).decode("utf-8", "replace")


class ContainerEnvironment:
    """The pod worker's part that builds a container's environment."""

    def container_env(self, pod: Obj, spec: dict[str, Any], image: Image) -> dict[str, str]:
        env: dict[str, str] = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": self.name,
        }  # no HOME: runc sets it from the image's /etc/passwd when the env has none (the runtime's part)
        env.update(image.env)
        for src in spec.get("envFrom") or []:
            ref = src.get("configMapRef")
            if ref:
                cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, ref.get("name", ""))
                if cm is None and not ref.get("optional"):
                    raise VolumeError(f'configmap "{ref.get("name")}" not found')
                for k, v in ((cm or {}).get("data") or {}).items():
                    env[src.get("prefix", "") + k] = v
            ref = src.get("secretRef")
            if ref:
                secret = self.kubelet.store.peek(R.SECRETS, self.ns, ref.get("name", ""))
                if secret is None and not ref.get("optional"):
                    raise VolumeError(f'secret "{ref.get("name")}" not found')
                for k, v in ((secret or {}).get("data") or {}).items():
                    env[src.get("prefix", "") + k] = _decoded(v)
        for item in spec.get("env") or []:
            if "value" in item:
                env[item["name"]] = expand(str(item.get("value", "")), env)
            elif item.get("valueFrom", {}).get("fieldRef"):
                env[item["name"]] = resolve_field(pod, item["valueFrom"]["fieldRef"]["fieldPath"])
            elif item.get("valueFrom", {}).get("configMapKeyRef"):
                ref = item["valueFrom"]["configMapKeyRef"]
                cm = self.kubelet.store.peek(R.CONFIGMAPS, self.ns, ref.get("name", ""))
                if cm is None and not ref.get("optional"):  # the configMap manager's NotFound
                    raise VolumeError(f'configmap "{ref.get("name")}" not found')
                value = ((cm or {}).get("data") or {}).get(ref.get("key", ""))
                if value is None and cm is not None and not ref.get("optional"):
                    raise VolumeError(
                        f"couldn't find key {ref.get('key')} in ConfigMap {self.ns}/{ref.get('name')}"
                    )
                if value is not None:
                    env[item["name"]] = value
            elif item.get("valueFrom", {}).get("secretKeyRef"):
                ref = item["valueFrom"]["secretKeyRef"]
                secret = self.kubelet.store.peek(R.SECRETS, self.ns, ref.get("name", ""))
                if secret is None and not ref.get("optional"):
                    raise VolumeError(f'secret "{ref.get("name")}" not found')
                value = ((secret or {}).get("data") or {}).get(ref.get("key", ""))
                if value is None and secret is not None and not ref.get("optional"):
                    raise VolumeError(
                        f"couldn't find key {ref.get('key')} in Secret {self.ns}/{ref.get('name')}"
                    )
                if value is not None:
                    env[item["name"]] = _decoded(value)
            elif item.get("valueFrom", {}).get("resourceFieldRef"):
                env[item["name"]] = self.resource_field(spec, item["valueFrom"]["resourceFieldRef"])
            else:
                env[item["name"]] = ""
        return env

    @staticmethod
    def resource_field(spec: dict[str, Any], ref: dict[str, Any]) -> str:
        kind, _, res = ref.get("resource", "").partition(".")
        value = ((spec.get("resources") or {}).get(kind) or {}).get(res)
        if value is None:
            return "0"
        return str(int(parse_quantity(str(value))))


def verify_run_as_non_root(pod: Obj, spec: dict[str, Any], pod_ref: str, image_uid: int = 0) -> str | None:
    """`kuberuntime` `verifyRunAsNonRoot` (security_context_others.go) over the effective security context
    (`securitycontext.DetermineEffectiveSecurityContext`: the container's fields over the pod's): with
    runAsNonRoot, a runAsUser of 0 breaks the policy, and without a runAsUser the image's user decides
    (`image_uid`: `getImageUser`, root for an image that names none). Returns the error a start fails with
    (CreateContainerConfigError), or None. `pod_ref` is `format.Pod`: name_namespace(uid)."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    sc = spec.get("securityContext") or {}
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
    if not non_root:
        return None
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    where = f'(pod: "{pod_ref}", container: {spec.get("name")})'
    if user is not None:
        return f"container's runAsUser breaks non-root policy {where}" if user == 0 else None
    return None if image_uid else f"container has runAsNonRoot and image will run as root {where}"
