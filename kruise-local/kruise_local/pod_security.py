"""Pod Security Admission: the built-in `PodSecurity` admission plugin, which enforces the Pod Security
Standards from namespace labels (k8s.io/pod-security-admission: `admission/admission.go`, `api/helpers.go`,
`admission/response.go`; the checks are in `pod_security_checks.py`).

A namespace's labels `pod-security.kubernetes.io/<mode>` (mode enforce, audit or warn; level privileged,
baseline or restricted) and `pod-security.kubernetes.io/<mode>-version` (`latest` or `v1.x`) give its policy
(`api.PolicyToEvaluate`); an unset label takes the configuration's default (privileged, latest). A pod that
violates the enforce level is refused with 403 Forbidden, `pods "<name>" is forbidden: violates PodSecurity
"<level>:<version>": <reason> (<detail>), ...`; one that violates the warn level is admitted with a `Warning`
header `would violate PodSecurity ...`; the audit level only annotates the audit event (this cluster keeps no
audit annotations). Exempt namespaces, usernames and runtime classes (the configuration's `exemptions`) skip
the checks (`exemptNamespace`, `exemptUser`, `exemptRuntimeClass`). A pod update is evaluated only when it is
significant (`isSignificantPodUpdate`: a container added or removed, an image or a seccomp annotation
changed); the `exec`, `attach`, `binding`, `eviction`, `log`, `portforward`, `proxy` and `status`
subresources never are. A namespace with an invalid label is refused on create (and on an update that
changes the errors) with 422; a namespace update that tightens the enforce level is admitted with warnings
naming the existing pods that would violate it (`ValidateNamespace`, `EvaluatePodsInNamespace`).

It runs in the validating admission phase, after the built-in defaulting and validation and before the
ValidatingAdmissionPolicies, as the plugin order of `pkg/kubeapiserver/options/plugins.go` places it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import resources as R
from .admission_policy import Attributes
from .errors import ApiError, invalid
from .pod_security_checks import MAX_VERSION, evaluate, forbidden_detail, forbidden_reason
from .store import Obj, Store
from .validation.fields import invalid_value

PREFIX = "pod-security.kubernetes.io/"
MODES = ("enforce", "audit", "warn")
LEVELS = ("privileged", "baseline", "restricted")
LATEST = 10**9
"""the minor of `latest`: newer than any version (`api.Version.Older`)"""

_VERSION = re.compile(r"^v1\.(0|[1-9][0-9]*)$")
_IGNORED_SUBRESOURCES = frozenset(
    {"exec", "attach", "binding", "eviction", "log", "portforward", "proxy", "status"}
)


@dataclass(frozen=True)
class LevelVersion:
    """`api.LevelVersion`."""

    level: str = "privileged"
    minor: int = LATEST

    def __str__(self) -> str:
        return f"{self.level}:{'latest' if self.minor == LATEST else f'v1.{self.minor}'}"


@dataclass(frozen=True)
class PodSecurityConfiguration:
    """The plugin's `PodSecurityConfiguration` (pod-security.admission.config.k8s.io/v1): the defaults for
    unlabelled namespaces and the exemptions."""

    enforce: str = "privileged"
    enforce_version: str = "latest"
    audit: str = "privileged"
    audit_version: str = "latest"
    warn: str = "privileged"
    warn_version: str = "latest"
    exempt_usernames: tuple[str, ...] = ()
    exempt_runtime_classes: tuple[str, ...] = ()
    exempt_namespaces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """`validation.ValidatePodSecurityConfiguration`: the defaults must parse."""
        for mode in MODES:
            if getattr(self, mode) not in LEVELS:
                raise ValueError(
                    f"pod security default {mode}={getattr(self, mode)!r}: must be one of {LEVELS}"
                )
            version = getattr(self, f"{mode}_version")
            if version != "latest" and not _VERSION.match(version):
                raise ValueError(
                    f'pod security default {mode}_version={version!r}: must be "latest" or "v1.x"'
                )

    def defaults(self) -> dict[str, LevelVersion]:
        return {
            mode: LevelVersion(getattr(self, mode), _parse_version(getattr(self, f"{mode}_version"))[0])
            for mode in MODES
        }


def _parse_version(value: str) -> tuple[int, str | None]:
    """`api.ParseVersion`: `latest` or `v1.x`; anything else is latest with an error."""
    if value == "latest":
        return LATEST, None
    match = _VERSION.match(value)
    if not match:
        return LATEST, 'must be "latest" or "v1.x"'
    return int(match.group(1)), None


def policy_to_evaluate(
    labels: dict[str, str], defaults: dict[str, LevelVersion]
) -> tuple[dict[str, LevelVersion], list[dict[str, str]]]:
    """`api.PolicyToEvaluate`: each mode's level and version from the labels over the defaults, and the
    label errors. A bad enforce level enforces restricted; a bad audit or warn level is privileged (fails
    open); a bad version is latest."""
    policy, errors = dict(defaults), []
    for mode in MODES:
        level, minor = policy[mode].level, policy[mode].minor
        if (value := labels.get(PREFIX + mode)) is not None:
            if value in LEVELS:
                level = value
            else:
                level = "restricted" if mode == "enforce" else "privileged"
                errors.append(
                    invalid_value(
                        f"metadata.labels[{PREFIX}{mode}]", value, f"must be one of {', '.join(LEVELS)}"
                    )
                )
        if (value := labels.get(f"{PREFIX}{mode}-version")) is not None:
            minor, error = _parse_version(value)
            if error:
                errors.append(invalid_value(f"metadata.labels[{PREFIX}{mode}-version]", value, error))
        policy[mode] = LevelVersion(level, minor)
    return policy, errors


def _significant_update(new: Obj, old: Obj) -> bool:
    """`isSignificantPodUpdate`: a changed seccomp pod annotation, container count, image or container
    seccomp annotation, or an ephemeral container added or changed."""
    annotations = (new.get("metadata") or {}).get("annotations") or {}
    old_annotations = (old.get("metadata") or {}).get("annotations") or {}
    key = "seccomp.security.alpha.kubernetes.io/pod"
    if annotations.get(key) != old_annotations.get(key):
        return True
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}

    def changed(c: Obj, o: Obj) -> bool:
        ckey = "container.seccomp.security.alpha.kubernetes.io/" + str(c.get("name"))
        return c.get("image") != o.get("image") or annotations.get(ckey) != old_annotations.get(ckey)

    for kind in ("containers", "initContainers"):
        cs, olds = spec.get(kind) or [], old_spec.get(kind) or []
        if len(cs) != len(olds) or any(changed(c, o) for c, o in zip(cs, olds, strict=True)):
            return True
    old_ephemeral = {c.get("name"): c for c in old_spec.get("ephemeralContainers") or []}
    for c in spec.get("ephemeralContainers") or []:
        o = old_ephemeral.get(c.get("name"))
        if o is None or changed(c, o):
            return True
    return False


@dataclass
class PodSecurityAdmission:
    """The `PodSecurity` admission plugin over the store's namespaces and pods."""

    store: Store
    config: PodSecurityConfiguration = field(default_factory=PodSecurityConfiguration)
    emulated_minor: int = LATEST
    """the API server's minor version: `latest` evaluates no newer than it (`NewEvaluator`'s emulation)"""

    def _clamp(self, lv: LevelVersion) -> LevelVersion:
        newest = min(MAX_VERSION, self.emulated_minor)
        return lv if lv.minor <= newest else LevelVersion(lv.level, newest)

    def _evaluate(self, lv: LevelVersion, meta: Obj, spec: Obj) -> list[tuple[str, str]]:
        return evaluate(lv.level, self._clamp(lv).minor, meta, spec)

    def admit(self, a: Attributes) -> None:
        """Admit or refuse one request (`Admission.Validate`); warnings go to `a.warnings`."""
        if a.resource is R.NAMESPACES and a.operation in ("CREATE", "UPDATE") and not a.subresource:
            self._validate_namespace(a)
        elif a.resource is R.PODS and a.operation in ("CREATE", "UPDATE"):
            self._validate_pod(a)

    def _validate_namespace(self, a: Attributes) -> None:
        """`ValidateNamespace`."""
        obj = a.obj or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        defaults = self.config.defaults()
        new_policy, errors = policy_to_evaluate(labels, defaults)
        if a.operation == "CREATE":
            if errors:
                raise invalid("Namespace", a.name, errors)
            return
        old_labels = ((a.old or {}).get("metadata") or {}).get("labels") or {}
        old_policy, old_errors = policy_to_evaluate(old_labels, defaults)
        if errors and (not old_errors or errors != old_errors):
            raise invalid("Namespace", a.name, errors)
        new, old = new_policy["enforce"], old_policy["enforce"]
        if new == old or new.level == "privileged":
            return
        if new.minor == old.minor and LEVELS.index(new.level) <= LEVELS.index(old.level):
            return
        if a.name in self.config.exempt_namespaces:
            return
        if a.warnings is not None:
            a.warnings.extend(self._evaluate_pods_in_namespace(a.name, new))

    def _evaluate_pods_in_namespace(self, namespace: str, enforce: LevelVersion) -> list[str]:
        """`EvaluatePodsInNamespace`: one warning per distinct set of reasons, prefixed with the lexically
        first pod's name and how many others share it."""
        counts: dict[str, tuple[str, int]] = {}
        order: list[str] = []
        for pod in self.store.items(R.PODS, namespace):
            if ((pod.get("spec") or {}).get("runtimeClassName") or "") in self.config.exempt_runtime_classes:
                continue
            results = self._evaluate(enforce, pod.get("metadata") or {}, pod.get("spec") or {})
            if not results:
                continue
            warning = forbidden_reason(results)
            name = str(pod["metadata"]["name"])
            if warning not in counts:
                order.append(warning)
                counts[warning] = (name, 1)
            else:
                first, n = counts[warning]
                counts[warning] = (min(first, name), n + 1)
        if not order:
            return []
        decorated = []
        for warning in order:
            name, n = counts[warning]
            if n == 1:
                decorated.append(f"{name}: {warning}")
            elif n == 2:
                decorated.append(f"{name} (and 1 other pod): {warning}")
            else:
                decorated.append(f"{name} (and {n - 1} other pods): {warning}")
        return [
            f'existing pods in namespace "{namespace}" violate the new PodSecurity enforce level "{enforce}"',
            *sorted(decorated),
        ]

    def _validate_pod(self, a: Attributes) -> None:
        """`ValidatePod` and `EvaluatePod` with enforce."""
        if a.subresource in _IGNORED_SUBRESOURCES:
            return
        if a.namespace in self.config.exempt_namespaces:
            return
        if str(a.user.get("username", "")) in self.config.exempt_usernames:
            return
        namespace = self.store.peek(R.NAMESPACES, "", a.namespace)
        if namespace is None:
            raise ApiError(500, f"failed to lookup namespace {a.namespace}", reason="InternalError")
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        policy, _ = policy_to_evaluate(labels, self.config.defaults())
        if all(policy[mode].level == "privileged" for mode in MODES):
            return
        pod = a.obj or {}
        if a.operation == "UPDATE" and not _significant_update(pod, a.old or {}):
            return
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if (spec.get("runtimeClassName") or "") in self.config.exempt_runtime_classes and spec.get(
            "runtimeClassName"
        ):
            return
        enforce = policy["enforce"]
        results = self._evaluate(enforce, meta, spec)
        if results:
            named = f'pods "{a.name}"' if a.name else "pods"  # apimachinery `NewForbidden`
            raise ApiError(
                403,
                f'{named} is forbidden: violates PodSecurity "{enforce}": {forbidden_detail(results)}',
                reason="Forbidden",
                kind="pods",
                name=a.name,
            )
        warn = policy["warn"]
        results = self._evaluate(warn, meta, spec)
        if results and a.warnings is not None:
            a.warnings.append(f'would violate PodSecurity "{warn}": {forbidden_detail(results)}')
