"""The kubelet's atomic writer for projected volumes (`atomic_writer.go`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kruise_local.atomicwriter import write_atomically


def test_payload_is_swapped_in_through_the_data_link(tmp_path: Path) -> None:
    vol = tmp_path / "vol"
    assert write_atomically(vol, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    first = os.readlink(vol / "..data")
    assert first.startswith("..") and first != "..data"
    assert os.readlink(vol / "a") == "..data/a" and os.readlink(vol / "dir") == "..data/dir"
    assert (vol / "a").read_text() == "1" and (vol / "dir" / "b").read_text() == "2"
    assert ((vol / "dir" / "b").stat().st_mode & 0o777) == 0o600
    assert not write_atomically(vol, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})  # unchanged: no write
    assert os.readlink(vol / "..data") == first
    assert write_atomically(vol, {"a": (b"3", 0o644)})
    assert (vol / "a").read_text() == "3"
    assert not (vol / "dir").exists() and not (vol / first).exists()  # stale name and old folder removed
    assert sorted(p.name for p in vol.iterdir() if not p.name.startswith("..")) == ["a"]


@pytest.mark.parametrize("bad", ["../x", "/etc/x", "..data", "a/../../x", ""])
def test_paths_leaving_the_volume_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="invalid path"):
        write_atomically(tmp_path / "vol", {bad: (b"x", 0o644)})
