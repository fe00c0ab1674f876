"""Spellings of one image: which references name the same image, and the other spelling a swap patches in."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core.image import alternate_reference, image_id_digest, same_image

D = "sha256:" + "ab" * 32
E = "sha256:" + "cd" * 32


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("busybox:1.36", "busybox:1.36", True),
        ("busybox:1.36", "docker.io/library/busybox:1.36", True),
        ("busybox", "busybox:latest", True),
        ("busybox:1.36", f"busybox:1.36@{D}", True),
        (f"busybox:1.36@{D}", f"busybox@{D}", True),
        (f"busybox:1.36@{D}", f"docker.io/library/busybox@{D}", True),
        (f"busybox@{D}", f"busybox@{E}", False),
        (f"busybox:1.36@{D}", f"busybox:1.36@{E}", False),
        ("busybox:1.36", f"busybox@{D}", False),  # only the node's imageID could tell
        ("busybox", f"busybox@{D}", False),
        ("busybox:1.36", "busybox:1.37", False),
        ("busybox:1.36", "ghcr.io/acme/busybox:1.36", False),
        ("busybox:1.36", "not a reference", False),
    ],
)
def test_same_image(a: str, b: str, same: bool) -> None:
    assert same_image(a, b) is same
    assert same_image(b, a) is same


@pytest.mark.parametrize(
    ("image", "image_id", "digest"),
    [
        ("busybox:1.36", f"docker.io/library/busybox@{D}", D),
        ("busybox:1.36", f"docker-pullable://busybox@{D}", D),
        ("ghcr.io/acme/etl:1", f"ghcr.io/acme/etl@{D}", D),
        ("ghcr.io/acme/etl:1", f"mirror.example/acme/etl@{D}", None),
        ("busybox:1.36", D, None),  # a bare image id names no repository
        ("busybox:1.36", "", None),
    ],
)
def test_image_id_digest(image: str, image_id: str, digest: str | None) -> None:
    assert image_id_digest(image, image_id) == digest


@pytest.mark.parametrize(
    ("image", "current", "image_id", "other"),
    [
        ("busybox:1.36", "busybox:1.36", f"docker.io/library/busybox@{D}", f"busybox:1.36@{D}"),
        ("busybox:1.36", f"busybox:1.36@{D}", f"docker.io/library/busybox@{D}", "busybox:1.36"),
        ("busybox:1.36", "busybox:1.36", "", None),
        ("busybox:1.36", "busybox:1.36", f"quay.io/busybox@{D}", None),
        (f"busybox:1.36@{D}", f"busybox:1.36@{D}", "", f"busybox@{D}"),
        (f"busybox:1.36@{D}", f"busybox@{D}", "", f"busybox:1.36@{D}"),
        (f"busybox@{D}", f"busybox@{D}", f"docker.io/library/busybox@{D}", None),
        ("busybox", "busybox", f"docker.io/library/busybox@{D}", "busybox:latest"),
        ("busybox:latest", "busybox:latest", "", "busybox"),
        ("busybox:1.36", "docker.io/library/busybox:1.36", "", "busybox:1.36"),
    ],
)
def test_alternate_reference(image: str, current: str, image_id: str, other: str | None) -> None:
    found = alternate_reference(image, current, image_id)
    assert found == other
    if found is not None:
        assert found != current and same_image(found, image)
