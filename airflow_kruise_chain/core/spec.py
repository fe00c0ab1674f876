"""Chain and stage definitions, and their validation."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from typing import Any

from . import mounts, sources
from .constants import SLOTS
from .errors import ChainConfigError
from .image import parse_image_reference
from .resources import SIZING_MODES, parse_quantity, plan_sizing
from .wire import DEFAULT_RUNNER_IMAGE, MAX_OUTPUTS_BYTES, PREFIX, run_spec

MAX_NAME_LENGTH = 40
"""Longest chain or stage name: leaves room for the derived pod, ConfigMap and CRR names."""

MAX_STAGE_PAYLOAD = 64 * 1024
"""Longest quoted command plus env of a stage (annotations share 256 KiB; one env var caps at 128 KiB)."""

PULL_POLICIES = ("Always", "IfNotPresent", "Never")
RESERVED_ENV = ("CHAIN_SCRATCH", "CHAIN_OUTPUT", "CHAIN_GENERATION")
RESERVED_ENV_PREFIXES = ("KC_", "kc_")
"""The runner's own names: KC_* in the container's env, kc_* its shell variables (some are set after the
stage's env is exported, so the stage would not get the value given)."""

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_POD_TEMPLATE_FORBIDDEN = {
    ("metadata", "name"): "the pod name is derived from the DAG, run and chain",
    ("metadata", "namespace"): "set ChainSpec.namespace instead",
    ("spec", "restartPolicy"): "slots must run under restartPolicy Always",
}
_POD_TEMPLATE_SEALS = ("shareProcessNamespace", "hostPID")
"""Pod fields that take each slot's runner off pid 1 of its own pid namespace: a stage could then outlive its
end and reach the other slot's processes, memory and files (`/proc/<pid>/root`)."""
_SLOT_CONTAINER_FORBIDDEN = ("command", "args", "env", "image", "readinessProbe", "startupProbe")


def index_stage_name(name: str, index: int) -> str:
    """The name map index `index` of mapped stage `name` runs under in the pod (``name-3``)."""
    return f"{name}-{index}"


def is_label_value(value: str) -> bool:
    """True when `value` is a valid Kubernetes label value."""
    return len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def effective_pull_policy(image: str, policy: str | None) -> str:
    """`policy`, or Kubernetes' default for `image` (Always for ``:latest``/untagged, else IfNotPresent)."""
    return policy or ("Always" if parse_image_reference(image).floating else "IfNotPresent")


@dataclass(frozen=True)
class StageSpec:
    """One stage: an image and the command the slot's runner executes in it.

    `cmds` must be non-empty (the runner replaces the image entrypoint, so it cannot be inherited);
    `arguments` are appended. `resources` is ``{"requests": {...}, "limits": {...}}``.
    `max_outputs_bytes` bounds the JSON the stage may write to ``$CHAIN_OUTPUT``.
    """

    name: str
    image: str
    cmds: Sequence[str] = ()
    arguments: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    image_pull_policy: str | None = None
    max_outputs_bytes: int = MAX_OUTPUTS_BYTES
    env_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """env NAME -> {"kind": "secret" | "configMap", "name", "key"}: read by the runner from the slots' mounts
    (`sources.py`); no value travels in the run spec"""
    env_from: Sequence[Mapping[str, str]] = ()
    """[{"kind", "name"}]: every key of a Secret or ConfigMap (a valid env name) as env, under `env_sources`
    and `env`"""
    volume_mounts: Sequence[Mapping[str, Any]] = ()
    """mounts of the chain's `volumes` this stage uses (both slots mount every stage's: `mounts.py`)"""
    map_length: int = 0
    """a mapped stage: up to `map_length` map indexes, each a stage of the pod named `index_stage_name`
    (its own record, generations and result); 0: not mapped"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "cmds", tuple(self.cmds))
        object.__setattr__(self, "arguments", tuple(self.arguments))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "env_sources", {k: dict(v) for k, v in dict(self.env_sources).items()})
        object.__setattr__(self, "env_from", tuple(dict(v) for v in self.env_from))
        object.__setattr__(self, "volume_mounts", tuple(self.volume_mounts))
        object.__setattr__(self, "resources", {k: dict(v) for k, v in self.resources.items()})

    def stage_names(self) -> list[str]:
        """The names this stage runs under in the pod: its own, or each map index's (`index_stage_name`)."""
        if not self.map_length:
            return [self.name]
        return [index_stage_name(self.name, i) for i in range(self.map_length)]

    def run_spec(
        self,
        generation: int = 0,
        token: str = "",
        restart: bool = False,
        nonce: str | None = None,
        prepare: str = "",
    ) -> str:
        """The runner's run spec for this stage (see `wire.run_spec`): its exact argv and env."""
        return run_spec(
            restart=restart,
            nonce=nonce,
            prepare=prepare,
            generation=generation,
            token=token,
            stage=self.name,
            argv=[*self.cmds, *self.arguments],
            env=self.env,
            outputs_max=self.max_outputs_bytes,
            files={
                n: f"{sources.mount_path(r['kind'], r['name'])}/{r['key']}"
                for n, r in self.env_sources.items()
            },
            dirs=[sources.mount_path(r["kind"], r["name"]) for r in self.env_from],
        )

    def validate(self, where: str = "stage") -> None:
        """Raise ChainConfigError naming the first invalid field."""
        check_name(f"{where}.name", self.name)
        if not isinstance(self.image, str):
            raise ChainConfigError(
                f"{where}.image", f"must be an image reference (a string), not {self.image!r}"
            )
        try:
            parse_image_reference(self.image)
        except ValueError as err:
            raise ChainConfigError(
                f"{where}.image", f"{err}; example: registry.example.com/team/app:1.2"
            ) from None
        if not self.cmds:
            raise ChainConfigError(
                f"{where}.cmds", "is empty: give the command to run, e.g. cmds=['python', 'main.py']"
            )
        for key, words in (("cmds", self.cmds), ("arguments", self.arguments)):
            for i, word in enumerate(words):
                if not isinstance(word, str) or "\x00" in word:
                    raise ChainConfigError(f"{where}.{key}[{i}]", "must be a string without NUL characters")
                _check_utf8(f"{where}.{key}[{i}]", word)
        if self.cmds[0] == "":
            raise ChainConfigError(
                f"{where}.cmds[0]", "is an empty program name: give the command to run, e.g. cmds=['python']"
            )
        for name, value in self.env.items():
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise ChainConfigError(
                    f"{where}.env[{name!r}]", "is not a shell variable name: use letters, digits and '_'"
                )
            if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV:
                raise ChainConfigError(
                    f"{where}.env[{name!r}]",
                    f"is reserved for the stage runner (KC_*, kc_*, {', '.join(RESERVED_ENV)})",
                )
            if not isinstance(value, str) or "\x00" in value:
                raise ChainConfigError(
                    f"{where}.env[{name!r}]", "value must be a string without NUL characters"
                )
            _check_utf8(f"{where}.env[{name!r}]", value)
        for name in self.env_sources:
            if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
                raise ChainConfigError(
                    f"{where}.env[{name!r}]", "is not a shell variable name: use letters, digits and '_'"
                )
            if name.startswith(RESERVED_ENV_PREFIXES) or name in RESERVED_ENV:
                raise ChainConfigError(f"{where}.env[{name!r}]", "is reserved for the stage runner")
        sources.check(where, self.env_sources, self.env_from, self.env)
        if len(self.run_spec().encode()) > MAX_STAGE_PAYLOAD:
            raise ChainConfigError(
                f"{where}.cmds",
                f"command, arguments and env exceed {MAX_STAGE_PAYLOAD} bytes once quoted: "
                "pass large data through the scratch volume or a ConfigMap",
            )
        _check_resources(f"{where}.resources", self.resources)
        if self.image_pull_policy is not None and self.image_pull_policy not in PULL_POLICIES:
            raise ChainConfigError(f"{where}.image_pull_policy", f"must be one of {', '.join(PULL_POLICIES)}")
        if isinstance(self.map_length, bool) or not isinstance(self.map_length, int) or self.map_length < 0:
            raise ChainConfigError(
                f"{where}.max_map_length", f"must be a positive int, not {self.map_length!r}"
            )
        if self.map_length:
            check_name(f"{where}.max_map_length", index_stage_name(self.name, self.map_length - 1))
        if (
            not isinstance(self.max_outputs_bytes, int)
            or not 0 <= self.max_outputs_bytes <= MAX_OUTPUTS_BYTES
        ):
            raise ChainConfigError(
                f"{where}.max_outputs_bytes", f"must be an int between 0 and {MAX_OUTPUTS_BYTES}"
            )


@dataclass(frozen=True)
class ChainSpec:
    """A chain: the stages sharing one persistent pod, and that pod's settings.

    `pod_template` is deep-merged over the generated pod (dicts recursively, lists of named items by name,
    ``None`` removes a key). `keep_pod` leaves the pod in place after the run for inspection.
    """

    name: str
    namespace: str
    stages: Sequence[StageSpec]
    scratch_size_limit: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    affinity: Mapping[str, Any] | None = None
    service_account_name: str | None = None
    image_pull_secrets: Sequence[str] = ()
    security_context: Mapping[str, Any] | None = None
    pod_template: Mapping[str, Any] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    keep_pod: bool = False
    sizing: str = "auto"
    """how slots are sized: "in-place" (each swap resizes the slot for its stage, the idle one parked),
    "static" (both slots for the largest stage), "auto" (in-place where the cluster serves pods/resize)"""
    parked_resources: Mapping[str, Mapping[str, str]] | None = None
    """what an idle slot keeps under in-place sizing (default: `core.resources` PARKED_REQUESTS/LIMITS)"""
    runner_image: str | None = None
    """image of the init container that installs the stage runner: a static busybox image
    (`core/runnerinstall.py`; None: ``[kruise_chain] runner_image``, default `wire.DEFAULT_RUNNER_IMAGE`)"""
    pod_security: str = "baseline"
    """the Pod Security Standard the chain pod meets: "baseline" (as built), or "restricted" (every
    container non-root, no privilege escalation, all capabilities dropped, RuntimeDefault seccomp), for a
    namespace labelled ``pod-security.kubernetes.io/enforce: restricted``"""
    automount_service_account_token: bool = False
    """mount the service account's API token into the chain pod (its stages could then use it)"""
    volumes: Sequence[Mapping[str, Any]] = ()
    """pod volumes the stages may mount (`StageSpec.volume_mounts`; both slots mount every stage's mounts)"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "tolerations", tuple(self.tolerations))
        object.__setattr__(self, "image_pull_secrets", tuple(self.image_pull_secrets))
        object.__setattr__(self, "volumes", tuple(self.volumes))

    def to_dict(self) -> dict[str, Any]:
        """The chain as a JSON-safe dict (sequences as lists), as a chain's setup task carries it."""
        return _json_safe(asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChainSpec:
        """The chain a dict describes (`to_dict`'s, or one written by hand for `ChainSetupOperator`);
        ChainConfigError names a wrong or missing field. Only builds the spec: `validate()` it before use."""
        if not isinstance(data, Mapping):
            raise ChainConfigError("chain", "must be a dict with name, namespace and stages")
        _check_fields("", data, _CHAIN_FIELDS, "chain")
        raw_stages = data.get("stages")
        if not isinstance(raw_stages, (list, tuple)):
            raise ChainConfigError("stages", "must be a list of stage dicts")
        stages = []
        for i, raw in enumerate(raw_stages):
            if not isinstance(raw, Mapping):
                raise ChainConfigError(f"stages[{i}]", "must be a dict with name, image and cmds")
            _check_fields(f"stages[{i}].", raw, _STAGE_FIELDS, "stage")
            for key in ("name", "image"):
                if key not in raw:
                    raise ChainConfigError(f"stages[{i}].{key}", "is required")
            stages.append(StageSpec(**raw))
        for key in ("name", "namespace"):
            if key not in data:
                raise ChainConfigError(key, "is required")
        return cls(**{**data, "stages": stages})

    def stage(self, name: str) -> StageSpec:
        """The stage called `name`; KeyError if there is none."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(name)

    @property
    def first_images(self) -> tuple[str, str]:
        """Images the two slots start with: those of the first two stages (the first twice if it is alone)."""
        return self.stages[0].image, self.stages[min(1, len(self.stages) - 1)].image

    def validate(self) -> None:
        """Raise ChainConfigError naming the first invalid field; nothing is created before this passes."""
        check_name("name", self.name)
        if not self.namespace:
            raise ChainConfigError("namespace", "is required: the Kubernetes namespace the chain pod runs in")
        if len(self.namespace) > 63 or not _DNS_LABEL.fullmatch(self.namespace):
            raise ChainConfigError(
                "namespace", f"{self.namespace!r} is not a valid namespace name (DNS-1123 label)"
            )
        if not self.stages:
            raise ChainConfigError("stages", "a chain needs at least one stage")
        seen: set[str] = set()
        for i, stage in enumerate(self.stages):
            if not isinstance(stage, StageSpec):
                raise ChainConfigError(f"stages[{i}]", "must be a StageSpec")
            stage.validate(f"stages[{i}]")
            for name in stage.stage_names():
                if name in seen:
                    raise ChainConfigError(
                        f"stages[{i}].name",
                        f"duplicate stage name {name!r}: names must be unique (a mapped stage's index i runs "
                        "as stage NAME-i)",
                    )
                seen.add(name)
        mounts.check(self.volumes, self.stages)
        if self.scratch_size_limit is not None:
            _check_quantity("scratch_size_limit", self.scratch_size_limit)
        if self.runner_image is not None:
            try:
                parse_image_reference(self.runner_image)
            except (TypeError, ValueError) as err:
                raise ChainConfigError(
                    "runner_image", f"{err}; use a static busybox image: {DEFAULT_RUNNER_IMAGE} or a copy"
                ) from None
        _check_string_map("node_selector", self.node_selector)
        for i, toleration in enumerate(self.tolerations):
            if not isinstance(toleration, Mapping):
                raise ChainConfigError(
                    f"tolerations[{i}]", "must be a dict such as {'key': 'k', 'operator': 'Exists'}"
                )
        if self.affinity is not None and not isinstance(self.affinity, Mapping):
            raise ChainConfigError("affinity", "must be a dict in the Kubernetes Affinity shape")
        if self.security_context is not None and not isinstance(self.security_context, Mapping):
            raise ChainConfigError(
                "security_context", "must be a dict in the Kubernetes PodSecurityContext shape"
            )
        if self.service_account_name is not None:
            _check_subdomain("service_account_name", self.service_account_name)
        for i, secret in enumerate(self.image_pull_secrets):
            _check_subdomain(f"image_pull_secrets[{i}]", secret)
        _check_metadata("labels", self.labels, values_are_labels=True)
        _check_metadata("annotations", self.annotations, values_are_labels=False)
        if self.pod_template is not None:
            _check_pod_template(self.pod_template)
        self._check_pod_security()
        self._check_sizing()

    def _check_pod_security(self) -> None:
        if self.pod_security not in POD_SECURITY_LEVELS:
            raise ChainConfigError(
                "pod_security",
                f"must be 'baseline' or 'restricted' (the Pod Security Standard the chain pod meets), not "
                f"{self.pod_security!r}",
            )
        if not isinstance(self.automount_service_account_token, bool):
            raise ChainConfigError("automount_service_account_token", "must be True or False")
        if self.pod_security == "restricted" and self.security_context:
            if self.security_context.get("runAsUser") == 0:
                raise ChainConfigError(
                    "security_context.runAsUser",
                    "must not be 0 with pod_security='restricted': the restricted level runs as non-root",
                )
            if self.security_context.get("runAsNonRoot") is False:
                raise ChainConfigError(
                    "security_context.runAsNonRoot",
                    "must not be False with pod_security='restricted': the restricted level runs as non-root",
                )

    def _check_sizing(self) -> None:
        if self.sizing not in SIZING_MODES:
            raise ChainConfigError(
                "sizing", f"must be one of {', '.join(map(repr, SIZING_MODES))}, not {self.sizing!r}"
            )
        if self.parked_resources is not None:
            if not isinstance(self.parked_resources, Mapping):
                raise ChainConfigError(
                    "parked_resources", "must be a dict like {'requests': {'memory': '16Mi'}}"
                )
            _check_resources("parked_resources", self.parked_resources)
        if self.sizing != "static":
            plan_sizing(
                self.stages, self.parked_resources
            )  # a chain whose resizes would change its QoS fails here


POD_SECURITY_LEVELS = ("baseline", "restricted")
_STAGE_FIELDS = frozenset(f.name for f in fields(StageSpec))
_CHAIN_FIELDS = frozenset(f.name for f in fields(ChainSpec))


def _check_fields(where: str, data: Mapping[str, Any], known: frozenset[str], what: str) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ChainConfigError(
            f"{where}{unknown[0]}", f"unknown {what} field; choose from {', '.join(sorted(known))}"
        )


def _json_safe(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def check_name(where: str, name: str) -> None:
    """ChainConfigError naming `where` unless `name` is a valid chain or stage name."""
    if not isinstance(name, str) or not name:
        raise ChainConfigError(where, "is required")
    if len(name) > MAX_NAME_LENGTH or not _DNS_LABEL.fullmatch(name):
        raise ChainConfigError(
            where,
            f"{name!r} is invalid: use at most {MAX_NAME_LENGTH} lowercase letters, digits and '-', "
            "starting and ending with a letter or digit (e.g. 'transform-2')",
        )


def _check_utf8(where: str, text: str) -> None:
    """Refuse a string that cannot be sent as UTF-8 (a lone surrogate, e.g. from a lossy bytes decode)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ChainConfigError(
            where,
            f"holds {text[err.start : err.end]!r} at position {err.start}, a lone surrogate (not valid "
            "UTF-8): decode the bytes it came from properly (e.g. errors='replace')",
        ) from None


def _check_subdomain(where: str, value: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _DNS_SUBDOMAIN.fullmatch(value):
        raise ChainConfigError(where, f"{value!r} is not a valid object name (lowercase DNS-1123 subdomain)")


def _check_quantity(where: str, value: str) -> Decimal:
    try:
        quantity = parse_quantity(value)
    except ValueError as err:
        raise ChainConfigError(where, str(err)) from None
    if quantity < 0:
        raise ChainConfigError(where, f"{value!r} is negative")
    return quantity


def _check_resources(where: str, resources: Mapping[str, Mapping[str, str]]) -> None:
    unknown = set(resources) - {"requests", "limits"}
    if unknown:
        raise ChainConfigError(where, f"unknown keys {sorted(unknown)}: use 'requests' and 'limits'")
    parsed = {
        kind: {
            res: _check_quantity(f"{where}.{kind}[{res!r}]", q) for res, q in resources.get(kind, {}).items()
        }
        for kind in ("requests", "limits")
    }
    for res, request in parsed["requests"].items():
        limit = parsed["limits"].get(res)
        if limit is not None and request > limit:
            raise ChainConfigError(
                f"{where}.requests[{res!r}]", f"exceeds the limit {resources['limits'][res]!r}"
            )


def _check_string_map(where: str, mapping: Mapping[str, str]) -> None:
    if not isinstance(mapping, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise ChainConfigError(where, "must be a dict of strings to strings")


def _check_metadata(where: str, mapping: Mapping[str, str], *, values_are_labels: bool) -> None:
    _check_string_map(where, mapping)
    for key, value in mapping.items():
        prefix, _, name = key.rpartition("/")
        if (
            (prefix and not _DNS_SUBDOMAIN.fullmatch(prefix))
            or len(name) > 63
            or not _QUALIFIED_NAME.fullmatch(name)
        ):
            raise ChainConfigError(
                f"{where}[{key!r}]", "is not a valid key: [prefix/]name, name at most 63 characters"
            )
        if key.startswith(PREFIX):
            raise ChainConfigError(
                f"{where}[{key!r}]", f"keys under {PREFIX!r} are reserved for the provider"
            )
        _check_utf8(f"{where}[{key!r}]", value)
        if values_are_labels and not is_label_value(value):
            raise ChainConfigError(
                f"{where}[{key!r}]", f"{value!r} is not a valid label value (at most 63 of [A-Za-z0-9_.-])"
            )


def _check_pod_template(template: Mapping[str, Any]) -> None:
    if not isinstance(template, Mapping):
        raise ChainConfigError("pod_template", "must be a dict in the Kubernetes Pod shape")
    for (section, key), why in _POD_TEMPLATE_FORBIDDEN.items():
        if key in (template.get(section) or {}):
            raise ChainConfigError(f"pod_template.{section}.{key}", f"cannot be overridden: {why}")
    for key in _POD_TEMPLATE_SEALS:
        if (template.get("spec") or {}).get(key):
            raise ChainConfigError(
                f"pod_template.spec.{key}",
                "cannot be set: each slot's stage runner must be pid 1 of its own container, which ends "
                "everything a stage started (docs/security.md); leave it unset",
            )
    for container in (template.get("spec") or {}).get("containers") or ():
        if container.get("name") in SLOTS:
            for key in _SLOT_CONTAINER_FORBIDDEN:
                if key in container:
                    raise ChainConfigError(
                        f"pod_template.spec.containers[{container['name']}].{key}",
                        "is owned by the stage runner: set it on the stages instead",
                    )
