"""Spellings of one image: which references name the same image, and the other spelling a swap patches in."""

from __future__ import annotations

import pytest

from airflow_kruise_chain.core.image import same_image

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
