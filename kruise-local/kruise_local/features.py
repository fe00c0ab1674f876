"""One Kubernetes version and the behaviours it turns on (`Features`): the local cluster's only place that
knows what differs between Kubernetes minors. `/version`, the OpenAPI documents (their `info.version` and the
release whose schemas they serve), discovery, the API server's and the admission's version-gated rules and the
kubelets read it (`LocalCluster.features`).

Feature gates follow `pkg/features/kube_features.go` `defaultVersionedKubernetesFeatureGates` (each gate's
stages per minor: alpha off by default, beta and GA on, GA locked to its default) and component-base
`featuregate` `Set`/`SetFromMap` (`--feature-gates=A=true,B=false`: an unknown gate, a bad value or a locked
gate set against its default is refused). The gates modelled:

- `InPlacePodVerticalScaling` (KEP-1287): alpha 1.27, beta on by default 1.33, GA locked 1.35.
- `AuthorizePodWebsocketUpgradeCreatePermission`: beta on by default from 1.35: a WebSocket
  exec/attach/portforward needs `create` on the subresource.
- `KubeletCrashLoopBackOffMax`: alpha 1.32, beta on by default 1.35: the node setting
  `crashLoopBackOff.maxContainerRestartPeriod` (added in 1.32 under KEP-4603 "Tune CrashLoopBackoff"; the gate
  moved to KEP-5593 "Configure the max CrashLoopBackOff delay" when that KEP was split off for its 1.35 beta,
  kubernetes/enhancements#5594).
- `ReduceDefaultCrashLoopBackOffDecay` (KEP-4603): alpha from 1.33 (off by default): the crash-loop
  back-off starts at 1 s and stops at 60 s (kubernetes/kubernetes#130711).
- `KubeletEnsureSecretPulledImages` (KEP-2535 "Ensure Secret Pulled Images"): alpha 1.33 (off), beta on by
  default 1.35: the kubelet checks that a pod may use an image already on the node before it skips the pull;
  `image_manager.go` `EnsureImageExists` then says so in its Pulled event (`image_present_message`). The local
  cluster has no registry credentials: every image is pulled anonymously or preloaded, which the default
  `imagePullCredentialsVerificationPolicy` (NeverVerifyPreloadedImages) lets every pod use, so the check
  always passes.

Other version rules:

- The kubelet's container Created/Started events (`kuberuntime_container.go` `startContainer`): `Created
  container: <name>` / `Started container <name>` through 1.34, `Container created` / `Container started`
  from 1.35 (kubernetes/kubernetes#134043, "Remove container name from messages for container created and
  started events", in v1.35.0-alpha.1: the container is the event's `involvedObject.fieldPath`, which
  `kubectl describe` prints before the message from 1.35, #133627).
- The waiting message of a container whose image pull backs off (`image_manager.go` `pullImage`): `Back-off
  pulling image "<image>"`, followed from 1.32 by `: ` and the last failed pull's error as the image manager
  stored it (`prevPullErrMsg`, e.g. `ErrImagePull: <the runtime's error>`): kubernetes/kubernetes#127918 "Use
  image pull error in `message` during back-off", merged for v1.32 (the v1.32 release announcement lists it
  among SIG Node's improvements). Every modelled minor has it; the BackOff event keeps the short form.
- `crash_loop_requeue`: when a sync refuses a container's start for its crash-loop back-off. Through 1.34
  the refusal is a sync error like any other (kubernetes/kubernetes#123602): the pod worker syncs the pod
  again `backOffPeriod` (10 s) later with a jitter of up to half of it (`completeWork`), so a container
  restarts at the first sync after its back-off ran out, up to 15 s after it (a 2 s back-off still waits 10 s
  or more). From 1.35 the error carries when the back-off runs out (`BackoffError`, `MinBackoffExpiration`,
  kubernetes/kubernetes#133066, "Propagate backoff duration for crashloop backoff", v1.35.0) and the worker
  syncs then, jittered the same way and at most the resync interval away. Either way any earlier sync (a pod
  update, a PLEG event, a probe result) tries the start again.
- `memory_limit_decrease`: a resize with the memory resize policy NotRequired may lower a container's memory
  limit from 1.34 (kubernetes/kubernetes#133012, milestone v1.34: `validatePodResizeContainerOrdering`'s
  "memory limits cannot be decreased unless resizePolicy is RestartContainer" removed, the kubelet's
  best-effort usage check in `kuberuntime_manager.go` `doPodResizeAction` added); 1.33 refuses it
  (kubernetes/kubernetes#130183, milestone v1.33).
- Served APIs: the group-versions the local cluster implements (core v1, admissionregistration.k8s.io/v1,
  authentication.k8s.io/v1, authorization.k8s.io/v1, OpenKruise's and metrics-server's) are served by every
  modelled minor (`pkg/controlplane/apiserver/options` `DefaultAPIResourceConfigSource`: the v1beta1 versions
  of those groups stay disabled by default); what differs is `pods/resize` (registered only with
  InPlacePodVerticalScaling on) and each kind's schema, served from the minor's own OpenAPI definitions
  (`schema_release`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .backoff import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    REDUCED_BACKOFF_INITIAL,
    REDUCED_BACKOFF_MAX,
    WORKER_BACKOFF_JITTER,
    WORKER_BACKOFF_PERIOD,
    check_max_container_restart_period,
)

OLDEST_MINOR = 32
"""the oldest Kubernetes minor the local cluster models (1.32: in-place resize off by default)"""
NEWEST_MINOR = 35
"""the newest Kubernetes minor the local cluster models"""
_VERSION = re.compile(r"v?1\.(\d+)(?:\.(\d+))?")

IN_PLACE_RESIZE = "InPlacePodVerticalScaling"
WEBSOCKET_CREATE = "AuthorizePodWebsocketUpgradeCreatePermission"
CRASH_LOOP_MAX = "KubeletCrashLoopBackOffMax"
REDUCED_DECAY = "ReduceDefaultCrashLoopBackOffDecay"
ENSURE_SECRET_PULLED_IMAGES = "KubeletEnsureSecretPulledImages"


@dataclass(frozen=True)
class GateStage:
    """One `featuregate.VersionedSpecs` entry: from Kubernetes 1.`minor` on."""

    minor: int
    default: bool
    stage: str
    locked: bool = False


GATES: dict[str, tuple[GateStage, ...]] = {
    IN_PLACE_RESIZE: (
        GateStage(27, False, "Alpha"),
        GateStage(33, True, "Beta"),
        GateStage(35, True, "GA", locked=True),
    ),
    WEBSOCKET_CREATE: (GateStage(35, True, "Beta"),),
    CRASH_LOOP_MAX: (GateStage(32, False, "Alpha"), GateStage(35, True, "Beta")),
    REDUCED_DECAY: (GateStage(33, False, "Alpha"),),
    ENSURE_SECRET_PULLED_IMAGES: (GateStage(33, False, "Alpha"), GateStage(35, True, "Beta")),
}
"""the feature gates the local cluster models, as `kube_features.go` lists them"""


def parse_feature_gates(text: str) -> dict[str, bool]:
    """`A=true,B=false` as component-base `featuregate` `Set` reads it (`strconv.ParseBool` values)."""
    out: dict[str, bool] = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"feature_gates: missing bool value for {name} (write {name}=true or =false)")
        value = value.strip()
        if value in ("1", "t", "T", "true", "TRUE", "True"):
            out[name] = True
        elif value in ("0", "f", "F", "false", "FALSE", "False"):
            out[name] = False
        else:
            raise ValueError(f"feature_gates: invalid value of {name}={value}, use true or false")
    return out


@dataclass(frozen=True)
class Features:
    """Kubernetes 1.`minor`.`patch`, its feature gates as set (`gates`: the explicit settings) and what they
    turn on."""

    minor: int
    patch: int = 0
    gates: tuple[tuple[str, bool], ...] = ()

    @classmethod
    def parse(cls, version: str, feature_gates: str | Mapping[str, bool] | None = None) -> Features:
        """`1.35`, `1.35.2` or `v1.35.2` and the gates set (`A=true,B=false` or a mapping); ValueError naming
        the option and the fix otherwise."""
        found = _VERSION.fullmatch(version.strip())
        minor = int(found.group(1)) if found else -1
        if not OLDEST_MINOR <= minor <= NEWEST_MINOR:
            raise ValueError(
                f"kubernetes_version: {version!r} is not a Kubernetes version the local cluster models; use "
                f"one of {', '.join(f'1.{m}' for m in range(OLDEST_MINOR, NEWEST_MINOR + 1))} (e.g. 1.35.0)"
            )
        patch = int(found.group(2) or 0) if found else 0
        if isinstance(feature_gates, str):
            gates = parse_feature_gates(feature_gates)
        else:
            gates = dict(feature_gates or {})
        for name, value in gates.items():
            stage = _stage(name, minor)
            if stage is None:
                known = sorted(g for g in GATES if _stage(g, minor) is not None)
                raise ValueError(
                    f"feature_gates: unrecognized feature gate {name!r} for Kubernetes 1.{minor}; the local "
                    f"cluster models {', '.join(known)}"
                )
            if not isinstance(value, bool):
                raise ValueError(f"feature_gates: {name} must be true or false, not {value!r}")
            if stage.locked and value != stage.default:
                raise ValueError(
                    f"feature_gates: cannot set feature gate {name} to {str(value).lower()}, feature is "
                    f"locked to {str(stage.default).lower()} in Kubernetes 1.{minor} ({stage.stage})"
                )
        return cls(minor, patch, tuple(sorted(gates.items())))

    @property
    def version(self) -> str:
        """``1.35.0``"""
        return f"1.{self.minor}.{self.patch}"

    @property
    def git_version(self) -> str:
        """What `/version` says (``gitVersion``) and the OpenAPI documents' ``info.version``."""
        return f"v{self.version}+kruise-local"

    @property
    def schema_release(self) -> str:
        """The Kubernetes release whose OpenAPI definitions the documents serve (``v1.35.0``)."""
        return f"v1.{self.minor}.0"

    def enabled(self, gate: str) -> bool:
        """`FeatureGate.Enabled`: the gate as set, else its default at this minor (a gate not yet added:
        off)."""
        explicit = dict(self.gates)
        if gate in explicit:
            return explicit[gate]
        stage = _stage(gate, self.minor)
        return stage.default if stage else False

    @property
    def in_place_resize(self) -> bool:
        return self.enabled(IN_PLACE_RESIZE)

    @property
    def memory_limit_decrease(self) -> bool:
        return self.minor >= 34

    @property
    def websocket_upgrade_create(self) -> bool:
        return self.enabled(WEBSOCKET_CREATE)

    @property
    def ensure_secret_pulled_images(self) -> bool:
        return self.enabled(ENSURE_SECRET_PULLED_IMAGES)

    def image_present_message(self, image: str) -> str:
        """The Pulled event of a container whose image is on the node and not pulled again (`image_manager.go`
        `EnsureImageExists`: with KubeletEnsureSecretPulledImages off, `"Container image %q already present on
        machine"`; on, once `imagePullManager.MustAttemptImagePull` says no pull is needed, `"... already
        present on machine and can be accessed by the pod"`). `%q`: Go's quoting, which an image reference
        (no quotes, backslashes or control characters) leaves as the text between double quotes."""
        if self.ensure_secret_pulled_images:
            return f'Container image "{image}" already present on machine and can be accessed by the pod'
        return f'Container image "{image}" already present on machine'

    def image_pull_backoff_message(self, image: str, previous_error: str | None) -> str:
        """The waiting message of a container whose image pull backs off (`image_manager.go` `pullImage`):
        `"Back-off pulling image %q"`, and from 1.32 (kubernetes/kubernetes#127918) `"%s: %s"` of that and
        the back-off key's `prevPullErrMsg` when one is stored (`previous_error`: the last failed pull's
        `"%s: %s"` of its error and message, e.g. `ErrImagePull: ...`)."""
        message = f'Back-off pulling image "{image}"'
        if self.minor >= 32 and previous_error:
            message = f"{message}: {previous_error}"
        return message

    def container_created_message(self, name: str) -> str:
        """The Created event (`kuberuntime_container.go` `startContainer`): `"Created container: %v"` through
        1.34, `"Container created"` from 1.35 (kubernetes/kubernetes#134043)."""
        return "Container created" if self.minor >= 35 else f"Created container: {name}"

    def container_started_message(self, name: str) -> str:
        """The Started event (`kuberuntime_container.go` `startContainer`): `"Started container %v"` through
        1.34, `"Container started"` from 1.35 (kubernetes/kubernetes#134043)."""
        return "Container started" if self.minor >= 35 else f"Started container {name}"

    @property
    def hidden_subresources(self) -> frozenset[str]:
        """Subresources not served: `pods/resize` without InPlacePodVerticalScaling (the apiserver registers
        no resize storage, `pkg/registry/core/pod/storage`)."""
        return frozenset() if self.in_place_resize else frozenset({"pods/resize"})

    def crash_loop_requeue(self, left: float, resync: float, jitter: float) -> float:
        """Seconds after a sync that refused a start for its back-off (`left` seconds of it to go) until the
        pod worker syncs again (`pod_workers.go` `completeWork`; see the module docstring); `jitter` in [0, 1)
        is `wait.Jitter`'s random draw, `resync` the sync frequency."""
        delay = WORKER_BACKOFF_PERIOD
        if self.minor >= 35:
            delay = min(max(left, 0.0), resync)
        return delay * (1 + WORKER_BACKOFF_JITTER * jitter)

    def crash_loop_backoff(self, max_container_restart_period: float | None) -> tuple[float, float]:
        """The kubelet's crash-loop back-off (maximum, initial) in seconds for a node whose configuration sets
        `crashLoopBackOff.maxContainerRestartPeriod` to `max_container_restart_period` (None: unset).

        `ValidateKubeletConfiguration` first: with KubeletCrashLoopBackOffMax off the setting must not be set,
        with it on it must lie in 1-300 s (`v1beta1` `SetDefaults_KubeletConfiguration` defaults an unset one
        to 300 s). Then `kubelet.go` `newCrashLoopBackOff`: 10 s doubling to 300 s, 1 s to 60 s with
        ReduceDefaultCrashLoopBackOffDecay, and with KubeletCrashLoopBackOffMax the node's setting is the
        maximum (precedence over the reduced one), the initial value lowered to it if it is below."""
        period = max_container_restart_period
        if self.enabled(CRASH_LOOP_MAX):
            period = BACKOFF_MAX if period is None else check_max_container_restart_period(period)
        elif period is not None:
            raise ValueError(
                f"crashLoopBackOff.maxContainerRestartPeriod: FeatureGate {CRASH_LOOP_MAX} not enabled in "
                f"Kubernetes 1.{self.minor}, the setting must not be set (enable the gate: "
                f"feature_gates={CRASH_LOOP_MAX}=true, or leave max_container_restart_period unset)"
            )
        high, initial = BACKOFF_MAX, BACKOFF_INITIAL
        if self.enabled(REDUCED_DECAY):
            high, initial = REDUCED_BACKOFF_MAX, REDUCED_BACKOFF_INITIAL
        if period is not None:
            high, initial = period, min(initial, period)
        return high, initial


def _stage(gate: str, minor: int) -> GateStage | None:
    """The gate's spec at `minor` (`VersionedSpecs` at the emulated version), None before it was added."""
    current = None
    for stage in GATES.get(gate, ()):
        if stage.minor <= minor:
            current = stage
    return current
