"""The admission chain: defaulting and validation before anything is stored, as the API server and the
OpenKruise webhooks do it."""

from __future__ import annotations

from collections.abc import Mapping

from . import resources as R
from . import validation as V
from .admission_policy import Attributes, PolicyAdmission
from .errors import invalid
from .pod_security import PodSecurityAdmission
from .resources import Resource
from .serviceaccounts import admit_pod
from .store import Obj, Store


class Admission:
    """Mutating and validating admission for every stored resource."""

    def __init__(
        self,
        store: Store,
        policies: PolicyAdmission,
        pod_security: PodSecurityAdmission,
        gates: Mapping[str, bool],
        memory_limit_decrease: bool,
    ) -> None:
        self.store = store
        self.policies = policies
        self.pod_security = pod_security
        self.gates = gates
        """the feature gates (a live view: tests turn a gate off and on)"""
        self.memory_limit_decrease = memory_limit_decrease

    def _metadata(self, res: Resource, obj: Obj) -> None:
        causes = V.validate_metadata(res.kind, obj, res.namespaced)
        if causes:
            raise invalid(res.kind, str((obj.get("metadata") or {}).get("name", "")), causes, group=res.group)

    def on_create(self, res: Resource, obj: Obj) -> None:
        """Default and validate a new object in place; raises ApiError to refuse it."""
        V.check_decodable(res.kind, obj)
        if res is R.IMAGE_PULL_JOBS:
            V.admit_image_pull_job(obj, self.gates.get("ImagePullJobGate", False))
        elif res is R.CRRS:
            spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
            pod_name = spec.get("podName") if isinstance(spec.get("podName"), str) else ""
            ns = (obj.get("metadata") or {}).get("namespace", "")
            pod = self.store.peek(R.PODS, ns, pod_name) if pod_name else None
            node_name = ((pod or {}).get("spec") or {}).get("nodeName") or ""
            V.admit_crr(obj, pod, node=self.store.peek(R.NODES, "", node_name) if node_name else None)
        if res is R.PODS:  # pod validation reports metadata and spec causes together, as the real server
            V.default_pod(obj)
            admit_pod(self.store, obj)  # the ServiceAccount plugin, a mutating one: before validation
            V.validate_pod_create(obj)
            return
        if res is R.SECRETS:  # decoded (stringData into data), defaulted, then validated with its metadata
            V.convert_secret(obj)
            V.default_secret(obj)
            V.validate_secret(obj)
            return
        self._metadata(res, obj)
        if res is R.NAMESPACES:
            V.default_namespace(obj)
        elif res is R.CONFIGMAPS:
            V.validate_configmap(obj)
        elif res is R.NODE_IMAGES:
            V.admit_node_image(obj)
        elif res in (R.VALIDATING_ADMISSION_POLICIES, R.VALIDATING_ADMISSION_POLICY_BINDINGS):
            self.policies.validate(res, obj)

    def on_update(self, res: Resource, old: Obj, new: Obj) -> None:
        """Validate a replacement of `old` by `new` (spec rules and metadata)."""
        V.check_decodable(res.kind, new)
        if res is R.PODS:
            V.default_pod(new, create=False)  # re-applied defaults (e.g. tolerations) are not changes
            V.validate_pod_update(old, new)
            return
        if res is R.SECRETS:
            V.convert_secret(new)
            V.default_secret(new)
            V.validate_secret_update(old, new)
            return
        self._metadata(res, new)
        if res is R.CONFIGMAPS:
            V.validate_configmap_update(old, new)
        elif res is R.IMAGE_PULL_JOBS:
            V.validate_image_pull_job_update(old, new)
        elif res is R.CRRS:
            V.validate_crr_update(old, new)
        elif res in (R.VALIDATING_ADMISSION_POLICIES, R.VALIDATING_ADMISSION_POLICY_BINDINGS):
            self.policies.validate(res, new)

    def on_status(self, res: Resource, old: Obj, new: Obj) -> None:
        """Check a write to a status subresource: `new` (old with the status sent) must decode."""
        V.check_decodable(res.kind, new)

    def validate_request(self, a: Attributes) -> None:
        """The validating admission plugins, after defaulting and validation, in the API server's plugin
        order: PodSecurity, then ValidatingAdmissionPolicy."""
        self.pod_security.admit(a)
        self.policies.admit(a)

    def on_resize(self, old: Obj, new: Obj) -> Obj:
        """Validate a write to pods/resize; returns the pod it produces (only container resources change)."""
        V.validate_pod_resize(old, new, memory_limit_decrease=self.memory_limit_decrease)
        return V.prepare_pod_resize(old, new)
