"""The local cluster's one image reference grammar: the validating parser and the runtime's naming agree."""

from __future__ import annotations

import pytest
from kruise_local.catalogue import Catalogue
from kruise_local.imageref import (
    normalize,
    parse_image_reference,
    repository,
    split_image,
    split_reference,
)

DIGEST = "sha256:" + "a" * 64
VALID = [
    "busybox",
    "busybox:1.36",
    f"busybox@{DIGEST}",
    f"busybox:1.36@{DIGEST}",
    "acme/etl:1.0",
    "docker.io/busybox",
    "index.docker.io/library/busybox:1",
    "localhost/x",
    "localhost:5000/team/x:2",
    "registry.example.com/a/b/c:v1-rc.2",
    "quay.io/org/img",
]


@pytest.mark.parametrize("ref", VALID)
def test_normalize_names_a_valid_reference_as_the_validating_parser_does(ref: str) -> None:
    parsed = parse_image_reference(ref)
    tagged = parsed if parsed.tag or parsed.digest else type(parsed)(parsed.domain, parsed.path, "latest")
    assert normalize(ref) == str(tagged)
    assert repository(ref) == parsed.name


def test_docker_hub_spellings_name_one_image() -> None:
    names = {normalize(r) for r in ("busybox", "docker.io/busybox", "index.docker.io/library/busybox:latest")}
    assert names == {"docker.io/library/busybox:latest"}


def test_catalogue_finds_an_entry_under_another_docker_hub_spelling() -> None:
    catalogue = Catalogue([{"ref": "busybox:1.36"}, {"ref": "acme/etl:*"}])
    image = catalogue.lookup("docker.io/busybox:1.36")
    assert image is not None and image.ref == "docker.io/library/busybox:1.36"
    assert catalogue.lookup("index.docker.io/acme/etl:7") is not None
    assert catalogue.lookup("docker.io/busybox:1.37") is None


def test_split_reference_splits_globs_without_validating() -> None:
    assert split_reference("acme/etl:*") == ("acme/etl", "*", "")
    assert split_reference("localhost:5000/x") == ("localhost:5000/x", "", "")
    assert split_reference(f"x:1@{DIGEST}") == ("x", "1", DIGEST)


@pytest.mark.parametrize(
    ("image", "key"),
    [
        ("busybox", ("busybox", "latest")),
        ("busybox:1.36", ("busybox", "1.36")),
        ("localhost:5000/x", ("localhost:5000/x", "latest")),
        ("localhost:5000/x:2", ("localhost:5000/x", "2")),
        (f"busybox:1.36@{DIGEST}", ("busybox", DIGEST)),
        (f"busybox@{DIGEST}", ("busybox", DIGEST)),
    ],
)
def test_split_image_keys_as_node_image_does(image: str, key: tuple[str, str]) -> None:
    assert split_image(image) == key
