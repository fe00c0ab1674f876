"""The image catalogue: references as a container runtime resolves them (tags, digests, name defaults)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from kruise_local.catalogue import Catalogue
from kruise_local.imageref import normalize, repository

CAT = Catalogue(
    [
        {"ref": "busybox:1.36", "size": "2Mi"},
        {"ref": "acme/etl:1.0", "digest": "sha256:" + "e" * 64},
        {"ref": "ghcr.io/acme/stage:*"},
    ]
)


def test_normalize_names_as_the_runtime_does() -> None:
    assert normalize("busybox") == "docker.io/library/busybox:latest"
    assert normalize("acme/etl:1.0") == "docker.io/acme/etl:1.0"
    assert normalize("busybox@sha256:abc") == "docker.io/library/busybox@sha256:abc"
    assert normalize("busybox:1.36@sha256:abc") == "docker.io/library/busybox:1.36@sha256:abc"
    assert repository("docker.io/library/busybox:1.36@sha256:abc") == "docker.io/library/busybox"
    assert repository("localhost:5000/x:1") == "localhost:5000/x"


@pytest.mark.parametrize("tag_ref", ["busybox:1.36", "acme/etl:1.0", "ghcr.io/acme/stage:7"])
def test_digest_references_resolve_to_the_same_image(tag_ref: str) -> None:
    image = CAT.lookup(tag_ref)
    assert image is not None
    by_tag_and_digest = CAT.lookup(f"{tag_ref}@{image.digest}")
    assert by_tag_and_digest is not None
    assert by_tag_and_digest.digest == image.digest and by_tag_and_digest.image_id == image.image_id
    assert by_tag_and_digest.ref == normalize(f"{tag_ref}@{image.digest}")
    assert CAT.lookup(f"{tag_ref}@sha256:{'0' * 64}") is None  # a digest the tag does not have


def test_repository_at_digest_resolves_exact_entries() -> None:
    image = CAT.lookup("acme/etl:1.0")
    assert image is not None
    found = CAT.lookup(f"acme/etl@{image.digest}")
    assert found is not None and found.image_id == image.image_id
    assert CAT.lookup(f"acme/other@{image.digest}") is None


def test_images_can_be_pushed_and_deleted() -> None:
    cat = Catalogue([{"ref": "busybox:1.36"}])
    assert cat.lookup("ghcr.io/acme/late:1.0") is None
    cat.add({"ref": "ghcr.io/acme/late:1.0", "size": "1Mi"})
    image = cat.lookup("ghcr.io/acme/late:1.0")
    assert image is not None and image.size == 2**20
    cat.remove("ghcr.io/acme/late:1.0")
    assert cat.lookup("ghcr.io/acme/late:1.0") is None
    assert cat.lookup("busybox:1.36") is not None
    with pytest.raises(ValueError, match="'ref'"):
        cat.add({"size": "1Mi"})


def test_entries_model_the_image_filesystem_and_oci_config() -> None:
    cat = Catalogue.load()
    distroless = cat.lookup("gcr.io/distroless/python3-debian12")
    assert distroless is not None and not distroless.host_base
    assert distroless.entrypoint == ("/usr/bin/python3",) and distroless.cmd == ()
    assert not any(p.startswith(("/bin", "/usr/bin/sh", "/usr/bin/bash")) for p in distroless.host_paths())
    static = cat.lookup("gcr.io/distroless/static-debian12:nonroot")
    assert static is not None and static.entrypoint == static.cmd == ()
    busybox = cat.lookup("busybox:1.36")
    assert busybox is not None and busybox.host_base and busybox.entrypoint == () and busybox.cmd == ("sh",)
    runner = cat.lookup("busybox:1.37.0-musl")
    assert runner is not None and not runner.host_base and ("/bin/sh", "busybox") in runner.links
    slim = cat.lookup("python:3.11-slim")
    assert slim is not None and {p for p, _ in slim.links} >= {
        "/usr/local/bin/python",
        "/usr/local/bin/python3",
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"ref": "x:1", "host_paths": ["/usr"]}, r"unknown key\(s\) \['host_paths'\]"),
        ({"ref": "x:1", "base": "alpine"}, "'base' must be one of"),
        ({"ref": "x:1", "provides": "/usr"}, "'provides' must be a list of strings"),
        ({"ref": "x:1", "provides": ["usr"]}, "'provides' paths must be absolute"),
        ({"ref": "x:1", "entrypoint": "sh"}, "'entrypoint' must be a list of strings"),
        ({"ref": "x:1", "links": {"bin/sh": "busybox"}}, "'links' must map absolute paths"),
        ({"ref": "x:1", "files": {"run": {"from": "/bin/true", "mode": "0555"}}}, "'files' must map"),
        ({"ref": "x:1", "files": {"/run": {"from": "/bin/true"}}}, "'files' must map"),
        ({"ref": "x:1", "files": {"/run": {"from": "bin/true", "mode": "0555"}}}, "'files' must map"),
        ({"ref": "x:1", "files": {"/run": {"from": "/bin/true", "mode": "9"}}}, "'files' must map"),
    ],
)
def test_bad_entries_are_refused_naming_the_key(entry: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Catalogue([entry])
    with pytest.raises(ValueError, match=r"\(x:1\)"):
        Catalogue([]).add(entry)


def test_permissive_catalogue_runs_unknown_references_as_generic_images() -> None:
    strict = Catalogue([{"ref": "busybox:1.36"}])
    assert strict.lookup("ghcr.io/acme/own:2") is None
    loose = Catalogue([{"ref": "busybox:1.36"}], permissive=True)
    image = loose.lookup("ghcr.io/acme/own:2")
    assert image is not None and image.host_base and image.cmd == ("sh",) and image.entrypoint == ()
    pinned = loose.lookup(f"ghcr.io/acme/own:2@sha256:{'a' * 64}")
    assert pinned is not None and pinned.digest == "sha256:" + "a" * 64
    assert loose.lookup("busybox:1.36") == strict.lookup("busybox:1.36")


def test_image_files_carry_the_mode_the_image_declares(tmp_path: Path) -> None:
    """`files`: a file of the image at its path with its own mode (a layer's tar header's, as the
    snapshotter unpacks it), whatever the mode of the host file it is made from; one copy per content and
    mode."""
    source = tmp_path / "tool.sh"
    source.write_text("#!/bin/sh\necho tool\n")
    source.chmod(0o600)
    entry = {"ref": "x:1", "base": "scratch", "files": {"/t/run": {"from": str(source), "mode": "0555"}}}
    entry["files"]["/t/data"] = {"from": str(source), "mode": 0o444}
    image = Catalogue([entry]).lookup("x:1")
    assert image is not None
    files = dict((path, host) for host, path in image.unpacked_files())
    assert set(files) == {"/t/run", "/t/data"}
    assert stat.S_IMODE(os.stat(files["/t/run"]).st_mode) == 0o555
    assert stat.S_IMODE(os.stat(files["/t/data"]).st_mode) == 0o444
    assert Path(files["/t/run"]).read_text() == source.read_text()
    assert stat.S_IMODE(source.stat().st_mode) == 0o600  # the host file is left as it is
    assert dict((p, h) for h, p in image.unpacked_files()) == files  # unpacked once
