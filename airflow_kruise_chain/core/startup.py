"""Why a new chain pod does not start, said as soon as the cluster says it: `wait_started` follows the pod and
its events until both slots are parked, and fails at once, naming the missing object and the fix, when:

- the kubelet cannot mount a Secret or ConfigMap the slots mount (`FailedMount`: `MountVolume.SetUp failed
  for volume "v" : secret "s" not found`, `references non-existent secret key: k`; the volume manager reports
  it at its first try, a fraction of a second after the pod reaches its node, and again on its back-off);
- the kubelet cannot build a container's config (`CreateContainerConfigError`: an env reference to a missing
  Secret, ConfigMap or key, a runAsNonRoot container whose image runs as root), pull its image
  (`ErrImagePull`, `ImagePullBackOff`, ...), or the runner's init container cannot install the runner;
- the scheduler finds no node (`FailedScheduling`, the pod's `PodScheduled=False` condition), unless a
  cluster autoscaler announces a scale-up for it (its `TriggeredScaleUp` event) within `scale_up_wait`
  seconds: then it waits for the new node until the startup timeout. A `NotTriggerScaleUp` event (the
  autoscaler cannot help) fails at once, as does a claim that does not exist.

`StartupWatch` decides from what it is shown (no I/O); `wait_started` reads the pod (a watch) and its events
(a list every `EVENTS_POLL` seconds; without `list` on events the missing object is named only at the
timeout, as the timeout's message says).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .constants import SLOTS
from .errors import PodLostError, PodStartError, StageTimeoutError
from .podview import FAILED_TO_START_REASONS, ChainPod

EVENTS_POLL = 1.0
"""seconds between two reads of the starting pod's events"""
SCALE_UP_WAIT = 30.0
"""default seconds an unschedulable chain pod waits for a cluster autoscaler's TriggeredScaleUp"""
PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "ImageInspectError"}
)
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})

_MOUNT = re.compile(r'^MountVolume\.SetUp failed for volume "(?P<volume>[^"]*)" : (?P<error>.*)$', re.S)
_NOT_FOUND = re.compile(r'^(?P<kind>secret|configmap)s? "(?P<name>[^"]*)" not found$')
_NO_KEY = re.compile(r"^(?:configmap )?references non-existent (?:secret|config) key: (?P<key>.*)$")
_ENV_NO_KEY = re.compile(
    r"^couldn't find key (?P<key>\S+) in (?P<kind>Secret|ConfigMap) [^/]+/(?P<name>\S+)$"
)
_CLAIM = re.compile(r'persistentvolumeclaim "(?P<name>[^"]*)" not found')


@dataclass(frozen=True)
class Problem:
    """Why the pod does not start: the cluster's `reason` and `said` (its message), what that means for
    the chain (`what`, naming the object) and the fix."""

    reason: str
    said: str
    what: str
    fix: str


def _kind(word: str) -> str:
    return "ConfigMap" if word.lower() == "configmap" else "Secret"


def _create(kind: str, name: str, namespace: str) -> str:
    command = "secret generic" if kind == "Secret" else "configmap"
    return f"kubectl create {command} {name} -n {namespace} --from-literal=KEY=VALUE"


@dataclass
class StartupWatch:
    """What the starting chain pod's snapshots and events mean (no I/O). `users` maps a (kind, name) of a
    Secret or ConfigMap to the stages that read it, for the messages."""

    namespace: str
    users: Mapping[tuple[str, str], Sequence[str]] = field(default_factory=dict)
    scale_up_wait: float = SCALE_UP_WAIT
    unschedulable_since: float | None = None
    scale_up: str = ""
    last_said: dict[str, str] = field(default_factory=dict)
    """the latest message per reason (what the timeout's message repeats)"""

    def _stages(self, kind: str, name: str) -> str:
        stages = self.users.get(("secret" if kind == "Secret" else "configMap", name))
        return f" (read by stage {', '.join(repr(s) for s in stages)})" if stages else ""

    def _missing(self, reason: str, said: str, kind: str, name: str) -> Problem:
        return Problem(
            reason,
            said,
            f"{kind} {name!r} does not exist in namespace {self.namespace!r}{self._stages(kind, name)}",
            f"create it ({_create(kind, name, self.namespace)}) or correct the name the chain gives",
        )

    def _no_key(self, reason: str, said: str, kind: str, name: str, key: str) -> Problem:
        return Problem(
            reason,
            said,
            f"{kind} {name!r} in namespace {self.namespace!r} has no key {key!r}{self._stages(kind, name)}",
            f"add the key (kubectl edit {kind.lower()} {name} -n {self.namespace}) or correct the key the "
            "chain reads",
        )

    def mount(self, pod: ChainPod, said: str) -> Problem | None:
        """A FailedMount that will not pass by itself: a missing Secret, ConfigMap or key."""
        matched = _MOUNT.match(said)
        if matched is None:
            return None
        error = matched["error"]
        if found := _NOT_FOUND.match(error):
            return self._missing("FailedMount", said, _kind(found["kind"]), found["name"])
        if found := _NO_KEY.match(error):
            volumes = (pod.raw.get("spec") or {}).get("volumes") or []
            volume = next((v for v in volumes if v.get("name") == matched["volume"]), {})
            source = volume.get("secret") or volume.get("configMap") or {}
            name = source.get("secretName") or source.get("name") or matched["volume"]
            kind = "Secret" if "secret" in volume else "ConfigMap"
            return self._no_key("FailedMount", said, kind, name, found["key"])
        return None

    def container(self, name: str, reason: str, said: str) -> Problem | None:
        """A container (slot or init) that waits for a reason that will not pass by itself."""
        if reason in CONFIG_FAILURES:
            if found := _NOT_FOUND.match(said):
                return self._missing(reason, said, _kind(found["kind"]), found["name"])
            if found := _ENV_NO_KEY.match(said):
                return self._no_key(reason, said, found["kind"], found["name"], found["key"])
            if "runAsNonRoot" in said:
                fix = (
                    "run it as a non-root user: an image with a numeric non-root USER, or "
                    "security_context={'runAsUser': 1000} (docs/pod-security.md)"
                )
                return Problem(reason, said, f"container {name} would run as root", fix)
            return Problem(
                reason, said, f"the kubelet cannot create container {name}", "kubectl describe pod says more"
            )
        if reason in PULL_FAILURES:
            return Problem(
                reason,
                said,
                f"container {name} cannot pull its image",
                "check the stages' image references and the chain's image_pull_secrets",
            )
        if reason in FAILED_TO_START_REASONS:
            return Problem(reason, said, f"container {name} cannot start", "kubectl describe pod says more")
        return None

    def unschedulable(self, said: str, now: float) -> Problem | None:
        """The scheduler found no node: a claim that does not exist is a problem at once; anything else
        once `scale_up_wait` passed with no scale-up announced (`overdue`)."""
        if self.unschedulable_since is None:
            self.unschedulable_since = now
        self.last_said["FailedScheduling"] = said
        if claim := _CLAIM.search(said):
            fix = f"create the claim (kubectl get pvc -n {self.namespace}) or correct the chain's volumes"
            what = f"PersistentVolumeClaim {claim['name']!r} does not exist in namespace {self.namespace!r}"
            return Problem("FailedScheduling", said, what, fix)
        return None

    def overdue(self, now: float) -> Problem | None:
        """The pod has been unschedulable for `scale_up_wait` seconds and no autoscaler announced a node."""
        since = self.unschedulable_since
        if since is None or self.scale_up or now - since < self.scale_up_wait:
            return None
        said = self.last_said.get("FailedScheduling", "")
        return Problem("FailedScheduling", said, "no node can run the chain pod", self._placement_fix(said))

    def _placement_fix(self, said: str) -> str:
        if "Insufficient" in said:
            return (
                "lower the largest stage's requests (or parked_resources), free capacity on the nodes, or "
                "add nodes; with a cluster autoscaler, raise [kruise_chain] scale_up_wait if its scale-up "
                f"comes later than {self.scale_up_wait:.0f}s"
            )
        if "affinity/selector" in said:
            return (
                "check the chain's node_selector against the nodes' labels (kubectl get nodes --show-labels)"
            )
        if "taint" in said:
            return "give the chain tolerations for the nodes' taints (kubectl describe nodes)"
        return "kubectl describe pod says which nodes were tried and why"

    def event(self, pod: ChainPod, event: Mapping[str, Any], now: float) -> Problem | None:
        reason, said = str(event.get("reason") or ""), str(event.get("message") or "")
        if reason == "FailedMount":
            self.last_said[reason] = said
            return self.mount(pod, said)
        if reason == "TriggeredScaleUp":
            self.scale_up = said
        elif reason == "NotTriggerScaleUp" and self.unschedulable_since is not None:
            scheduler = self.last_said.get("FailedScheduling", "")
            return Problem(
                reason,
                f"{scheduler}; cluster autoscaler: {said}",
                "no node can run the chain pod and the cluster autoscaler adds none",
                self._placement_fix(scheduler),
            )
        return None

    def pod(self, pod: ChainPod, now: float) -> Problem | None:
        conditions = (pod.raw.get("status") or {}).get("conditions") or []
        scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            return self.unschedulable(str(scheduled.get("message") or ""), now)
        self.unschedulable_since = None  # scheduled (a scale-up's node took it)
        statuses = (pod.raw.get("status") or {}).get("initContainerStatuses") or []
        for status in statuses:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in CONFIG_FAILURES:
                found = self.container(status["name"], waiting["reason"], waiting.get("message") or "")
                if found is not None:
                    return found
        for slot in (pod.slot(s) for s in SLOTS):
            found = self.container(slot.name, slot.waiting_reason, slot.waiting_message)
            if slot.waiting and found is not None:
                return Problem(found.reason, found.said, f"{found.what} ({slot.image})", found.fix)
        return None

    def timeout_hint(self) -> str:
        """What the cluster said last, for a startup timeout's message."""
        said = [f"{reason}: {text}" for reason, text in self.last_said.items()]
        return f"; the cluster said: {'; '.join(said)}" if said else ""


class StartupApi(Protocol):
    """The reads `wait_started` needs (`KruiseHook` has them)."""

    def read_pod(self, name: str, namespace: str) -> ChainPod | None: ...

    def watch_pod(
        self, name: str, namespace: str, timeout_seconds: int, resource_version: str | None = None
    ) -> Iterator[ChainPod | None]: ...

    def pod_events(self, namespace: str, uid: str) -> list[dict[str, Any]] | None:
        """The events about the pod of `uid`; None when the identity may not list events."""


class _Start:
    """One chain pod's start as `wait_started` follows it: the last snapshot, what was logged."""

    def __init__(
        self,
        api: StartupApi,
        name: str,
        namespace: str,
        watch: StartupWatch,
        log: Callable[..., None],
        install_failure: Callable[[ChainPod], str | None],
    ) -> None:
        self.api, self.name, self.namespace, self.watch = api, name, namespace, watch
        self.log, self.install_failure = log, install_failure
        self.pod: ChainPod | None = None
        self.last = ""
        self.can_list_events = True

    def fail(self, problem: Problem) -> PodStartError:
        return PodStartError(
            f"chain pod {self.namespace}/{self.name} cannot start: {problem.what}: {problem.reason}: "
            f"{problem.said}; fix: {problem.fix}",
            problem.reason,
        )

    def seen(self, pod: Any) -> bool:
        """A version of the pod: whether it runs with both slots Ready; raises if it cannot start."""
        where = f"chain pod {self.namespace}/{self.name}"
        if pod is None:
            raise PodLostError(f"{where} was deleted while starting")
        assert isinstance(pod, ChainPod)
        self.pod = pod
        if pod.phase in ("Failed", "Succeeded"):
            raise PodLostError(f"{where} ended ({pod.phase}) while starting: {pod.status_message}")
        slots = (pod.slot(n) for n in SLOTS)
        waiting = "; ".join(f"{s.name} ({s.image}) {s.waiting_text()}" for s in slots if s.waiting)
        if waiting and waiting != self.last:
            self.log("chain pod starting: %s", waiting)
            self.last = waiting
        if failure := self.install_failure(pod):
            raise PodStartError(f"{where} cannot start: {failure}", "runner")
        if problem := self.watch.pod(pod, time.monotonic()):
            raise self.fail(problem)
        return pod.phase == "Running" and all(pod.slot(s).serving for s in SLOTS)

    def read_events(self) -> None:
        """The pod's events since the start (raises if one says it cannot start), then whether an
        unschedulable pod waited long enough for a scale-up (read after the events: one may announce it)."""
        now = time.monotonic()
        if self.pod is not None and self.can_list_events:
            events = self.api.pod_events(self.namespace, self.pod.uid)
            if events is None:  # no `list` on events: the timeout's message says where to look
                unseen = "what is missing is named at the timeout"
                self.log("cannot list events in %s (docs/rbac.md): %s", self.namespace, unseen)
                self.can_list_events = False
            for event in events or ():
                if problem := self.watch.event(self.pod, event, now):
                    raise self.fail(problem)
        if problem := self.watch.overdue(now):
            raise self.fail(problem)

    def timeout(self, timeout: float) -> StageTimeoutError:
        hint = self.watch.timeout_hint()
        if not hint and not self.can_list_events:
            selector = f"--field-selector involvedObject.name={self.name}"
            hint = f"; kubectl get events -n {self.namespace} {selector} says why"
        return StageTimeoutError(
            f"startup timeout ({timeout:.0f}s): chain pod {self.namespace}/{self.name} did not get both "
            f"slots running; last state: {self.last or 'Pending'}{hint}"
        )


def wait_started(
    api: StartupApi,
    name: str,
    namespace: str,
    timeout: float,
    watch: StartupWatch,
    *,
    log: Callable[..., None],
    install_failure: Callable[[ChainPod], str | None] = lambda pod: None,
) -> ChainPod:
    """The chain pod once it runs with both slots' runners serving them (started, or Ready); PodStartError
    as soon as it cannot start (the problem named, with its fix), PodLostError if it is deleted or ends,
    StageTimeoutError after `timeout` seconds. `install_failure`: why the runner's init container cannot
    install the runner, if it cannot.
    The pod is watched in windows of `EVENTS_POLL` seconds, its events read after each."""
    from .watch import pod_watch, watch_versions

    deadline = time.monotonic() + timeout
    start = _Start(api, name, namespace, watch, log, install_failure)
    stream, read = pod_watch(api, name, namespace)
    while (now := time.monotonic()) < deadline:
        version = start.pod.resource_version if start.pod is not None else None
        window_end = min(deadline, now + EVENTS_POLL)
        for pod in watch_versions(stream, window_end, version=version, relist=read, window=EVENTS_POLL):
            if start.seen(pod):
                assert start.pod is not None
                return start.pod
        start.read_events()
    raise start.timeout(timeout)
