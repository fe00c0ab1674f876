"""Unit tests of the local kubelet's pure rules."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import pytest
from kruise_local.backoff import Backoff, check_max_container_restart_period
from kruise_local.container import spec_hash
from kruise_local.features import Features


def test_container_hash_covers_only_name_and_image() -> None:
    base = {"name": "c", "image": "busybox:1.36", "command": ["sleep", "1"]}
    same = [
        {**base, "command": ["true"]},
        {**base, "env": [{"name": "A", "value": "1"}]},
        {**base, "resources": {"limits": {"memory": "1Gi"}}},
        {**base, "args": ["x"], "workingDir": "/tmp"},
    ]
    assert {spec_hash(c) for c in same} == {spec_hash(base)}
    assert spec_hash({**base, "image": "busybox:1.37"}) != spec_hash(base)
    assert spec_hash({**base, "name": "d"}) != spec_hash(base)


T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_backoff_doubles_caps_and_expires() -> None:
    b = Backoff()
    assert b.in_backoff_since("k", at(0), at(1)) == 0  # unknown key: not in back-off
    b.next("k", at(0), at(0))
    assert b.get("k") == 10
    assert b.in_backoff_since("k", at(5), at(6)) == 9  # counted from the event (FinishedAt), not the update
    assert b.in_backoff_since("k", at(5), at(15)) == 0
    delays = []
    for i in range(1, 8):
        b.next("k", at(i), at(i))
        delays.append(b.get("k"))
    assert delays == [20, 40, 80, 160, 300, 300, 300]
    # an event more than 600 s after the last update: not in back-off, and Next starts over
    assert b.in_backoff_since("k", at(7 + 601), at(7 + 601)) == 0
    b.next("k", at(7 + 601), at(7 + 601))
    assert b.get("k") == 10


def test_backoff_gc_and_a_lower_maximum() -> None:
    high, initial = Features(35).crash_loop_backoff(2)
    b = Backoff(max=high, initial=initial)
    b.next("k", at(0), at(0))
    assert b.get("k") == 2  # the initial back-off is lowered to the maximum
    b.next("k", at(1), at(1))
    assert b.get("k") == 2
    b.gc(at(1 + 601))
    assert b.get("k") == 0


def test_max_container_restart_period_range() -> None:
    assert check_max_container_restart_period(1) == 1.0
    assert check_max_container_restart_period(300) == 300.0
    for bad in (0, 0.99, 300.5, True, "10"):
        with pytest.raises(ValueError, match="maxContainerRestartPeriod"):
            check_max_container_restart_period(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "gates", "period", "expected"),
    [
        # kubelet.go newCrashLoopBackOff: (maximum, initial)
        ("1.32", "", None, (300.0, 10.0)),
        ("1.34", "", None, (300.0, 10.0)),
        ("1.35", "", None, (300.0, 10.0)),  # KubeletCrashLoopBackOffMax on, unset: defaulted to 300 s
        ("1.35", "", 30, (30.0, 10.0)),
        ("1.35", "", 4, (4.0, 4.0)),  # a maximum below the initial value lowers it
        ("1.32", "KubeletCrashLoopBackOffMax=true", 30, (30.0, 10.0)),  # alpha, enabled
        ("1.33", "ReduceDefaultCrashLoopBackOffDecay=true", None, (60.0, 1.0)),
        ("1.34", "ReduceDefaultCrashLoopBackOffDecay=true", None, (60.0, 1.0)),
        # 1.35: the beta gate defaults an unset maximum to 300 s, which takes precedence over the reduced 60 s
        ("1.35", "ReduceDefaultCrashLoopBackOffDecay=true", None, (300.0, 1.0)),
        (
            "1.35",
            "ReduceDefaultCrashLoopBackOffDecay=true,KubeletCrashLoopBackOffMax=false",
            None,
            (60.0, 1.0),
        ),
        ("1.35", "ReduceDefaultCrashLoopBackOffDecay=true", 30, (30.0, 1.0)),
    ],
)
def test_the_crash_loop_backoff_per_version_and_gate(version, gates, period, expected) -> None:
    assert Features.parse(version, gates).crash_loop_backoff(period) == expected


@pytest.mark.parametrize("version", ["1.32", "1.33", "1.34"])
def test_a_restart_period_without_its_gate_is_refused(version) -> None:
    # ValidateKubeletConfiguration: "FeatureGate KubeletCrashLoopBackOffMax not enabled, ... must not be set"
    with pytest.raises(ValueError, match=r"KubeletCrashLoopBackOffMax not enabled .* must not be set"):
        Features.parse(version).crash_loop_backoff(30)
    with pytest.raises(ValueError, match=r"KubeletCrashLoopBackOffMax not enabled"):
        Features.parse("1.35", "KubeletCrashLoopBackOffMax=false").crash_loop_backoff(30)


def test_gate_defaults_follow_kube_features_per_version() -> None:
    def defaults(gate: str) -> list[bool]:
        return [Features(m).enabled(gate) for m in (32, 33, 34, 35)]

    assert defaults("KubeletCrashLoopBackOffMax") == [False, False, False, True]  # alpha 1.32, beta 1.35
    assert defaults("ReduceDefaultCrashLoopBackOffDecay") == [False] * 4  # alpha from 1.33
    assert defaults("InPlacePodVerticalScaling") == [False, True, True, True]  # beta 1.33, GA 1.35
    assert defaults("AuthorizePodWebsocketUpgradeCreatePermission") == [False, False, False, True]
    assert defaults("KubeletEnsureSecretPulledImages") == [False, False, False, True]  # alpha 1.33, beta 1.35


def test_kubelet_ensure_secret_pulled_images_is_a_gate_from_1_33() -> None:
    """kube_features.go: KubeletEnsureSecretPulledImages (KEP-2535) alpha (off) 1.33, beta (on) 1.35; 1.32
    does not know it (component-base refuses an unrecognized gate)."""
    with pytest.raises(ValueError, match="unrecognized feature gate 'KubeletEnsureSecretPulledImages'"):
        Features.parse("1.32", "KubeletEnsureSecretPulledImages=true")
    assert Features.parse("1.33", "KubeletEnsureSecretPulledImages=true").ensure_secret_pulled_images
    assert not Features.parse("1.34").ensure_secret_pulled_images
    assert Features.parse("1.35").ensure_secret_pulled_images
    assert not Features.parse("1.35", "KubeletEnsureSecretPulledImages=false").ensure_secret_pulled_images


@pytest.mark.parametrize(
    ("minor", "created", "started"),
    [
        (32, "Created container: c", "Started container c"),
        (34, "Created container: c", "Started container c"),
        (35, "Container created", "Container started"),  # kubernetes/kubernetes#134043, v1.35.0-alpha.1
    ],
)
def test_container_created_and_started_messages_per_minor(minor, created, started) -> None:
    assert Features(minor).container_created_message("c") == created
    assert Features(minor).container_started_message("c") == started
    assert Features.parse("1.32", {"InPlacePodVerticalScaling": True}).in_place_resize
    assert not Features.parse("1.34", "InPlacePodVerticalScaling=false").in_place_resize


@pytest.mark.parametrize(
    ("version", "gates", "message"),
    [
        ("1.32", "ReduceDefaultCrashLoopBackOffDecay=true", "unrecognized feature gate 'ReduceDefault"),
        ("1.35", "NoSuchGate=true", "unrecognized feature gate 'NoSuchGate'"),
        ("1.35", "InPlacePodVerticalScaling=false", "locked to true in Kubernetes 1.35 .GA."),
        ("1.35", "KubeletCrashLoopBackOffMax", "missing bool value for KubeletCrashLoopBackOffMax"),
        ("1.35", "KubeletCrashLoopBackOffMax=yes", "invalid value of KubeletCrashLoopBackOffMax=yes"),
    ],
)
def test_bad_feature_gates_are_refused_naming_the_option(version, gates, message) -> None:
    with pytest.raises(ValueError, match=f"feature_gates: .*{message}"):
        Features.parse(version, gates)


@pytest.mark.parametrize(
    ("serialize", "max_parallel", "runs"),
    [
        (None, None, (True, None)),  # SetDefaults_KubeletConfiguration: serializeImagePulls true
        (None, 1, (True, 1)),  # "< 2": still serial
        (None, 3, (False, 3)),  # maxParallelImagePulls >= 2 defaults serializeImagePulls to false
        (False, None, (False, None)),
        (True, 1, (True, 1)),  # ValidateKubeletConfiguration allows 1 with serial pulls
    ],
)
def test_image_pull_settings_default_as_the_kubelet_configuration(serialize, max_parallel, runs) -> None:
    from kruise_local.image_puller import image_pull_settings

    assert image_pull_settings(serialize, max_parallel) == runs


@pytest.mark.parametrize(
    ("serialize", "max_parallel", "message"),
    [
        (None, 0, "invalid configuration: maxParallelImagePulls 0 must be a positive number"),
        (False, -1, "invalid configuration: maxParallelImagePulls -1 must be a positive number"),
        (True, 2, "maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls"),
        ("yes", None, "serializeImagePulls must be true or false"),
        (None, True, "maxParallelImagePulls must be a whole number"),
        (None, 2.5, "maxParallelImagePulls must be a whole number"),
    ],
)
def test_image_pull_settings_are_validated_as_the_kubelet_configuration(
    serialize, max_parallel, message
) -> None:
    from kruise_local.image_puller import image_pull_settings

    with pytest.raises(ValueError, match=re.escape(message)):
        image_pull_settings(serialize, max_parallel)


@pytest.mark.parametrize(
    ("serialize", "max_parallel", "at_once"), [(True, None, 1), (False, 2, 2), (False, None, 3)]
)
def test_image_puller_lets_as_many_pulls_run_at_once_as_its_kind(serialize, max_parallel, at_once) -> None:
    """`serialImagePuller`: one at a time, first come first served; `parallelImagePuller`: up to its tokens,
    or all at once without `maxParallelImagePulls`."""
    from kruise_local.image_puller import ImagePuller

    async def run() -> tuple[int, list[int]]:
        puller = ImagePuller(serialize, max_parallel)
        release = asyncio.Event()
        running, most, order = 0, 0, []

        async def pull(i: int) -> None:
            nonlocal running, most
            async with puller.turn():
                order.append(i)
                running += 1
                most = max(most, running)
                await release.wait()
                running -= 1

        tasks = [asyncio.create_task(pull(i)) for i in range(3)]
        for _ in range(5):
            await asyncio.sleep(0)
        started = most
        release.set()
        await asyncio.gather(*tasks)
        return started, order

    started, order = asyncio.run(run())
    assert started == at_once
    assert order == [0, 1, 2]


@pytest.mark.parametrize("version", ["1.32", "1.33", "1.34", "1.35"])
def test_image_pull_backoff_message_carries_the_previous_error_from_1_32(version) -> None:
    """kubernetes/kubernetes#127918 (v1.32): `"%s: %s"` of the back-off message and `prevPullErrMsg`."""
    f = Features.parse(version)
    assert f.image_pull_backoff_message("x:1", None) == 'Back-off pulling image "x:1"'
    assert f.image_pull_backoff_message("x:1", "ErrImagePull: boom") == (
        'Back-off pulling image "x:1": ErrImagePull: boom'
    )
