"""Image references, the one grammar of the local cluster (github.com/docker/distribution/reference v2.8.2, as
Kruise v1.9.0 and containerd use it).

`parse_image_reference` validates like `ParseNormalizedNamed` (the API server's and Kruise's webhooks'
checks); `split_reference`, `normalize`, `repository` and `split_image` name images as the runtime and the
NodeImage controller do, on the same delimiters and the same docker.io defaulting, without validating
(catalogue globs such as `acme/etl:*` go through them too). Kept apart from the provider's `core/image.py`:
the local cluster is an independent oracle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*\Z")
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(rf"^{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?\Z")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")
_DIGEST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}\Z")
_IDENTIFIER_RE = re.compile(r"^[a-f0-9]{64}\Z")
_DIGEST_ALGORITHMS = {"sha256": 64, "sha384": 96, "sha512": 128}


@dataclass(frozen=True)
class ImageReference:
    """A parsed, normalized image reference: `domain/path[:tag][@digest]`."""

    domain: str
    path: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """`domain/path`, e.g. `docker.io/library/busybox`."""
        return f"{self.domain}/{self.path}" if self.domain else self.path

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += f":{self.tag}"
        if self.digest:
            out += f"@{self.digest}"
        return out


def _validate_digest(digest: str) -> None:
    """As go-digest `Digest.Validate` with sha256/sha384/sha512 available."""
    i = digest.find(":")
    if i <= 0 or i + 1 == len(digest):
        raise ValueError("invalid checksum digest format")
    algorithm, encoded = digest[:i], digest[i + 1 :]
    if algorithm not in _DIGEST_ALGORITHMS:
        if not _DIGEST_RE.match(digest):
            raise ValueError("invalid checksum digest format")
        raise ValueError("unsupported digest algorithm")
    if len(encoded) != _DIGEST_ALGORITHMS[algorithm]:
        raise ValueError("invalid checksum digest length")
    if not re.fullmatch("[a-f0-9]+", encoded):
        raise ValueError("invalid checksum digest format")


def _match_reference(s: str) -> tuple[str, str, str, str] | None:
    """(domain, path, tag, digest) when `s` matches the reference grammar, else None."""
    rest, digest = s, ""
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST_RE.match(digest):
            return None
    tag = ""
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.match(tag):
            return None
    components = rest.split("/")
    if len(components) > 1 and _DOMAIN_RE.match(components[0]):
        if all(_PATH_COMPONENT_RE.match(c) for c in components[1:]):
            return components[0], "/".join(components[1:]), tag, digest
    if all(_PATH_COMPONENT_RE.match(c) for c in components):
        return "", rest, tag, digest
    return None


def _parse_reference(s: str) -> ImageReference:
    match = _match_reference(s)
    if match is None:
        if s == "":
            raise ValueError("repository name must have at least one component")
        if s.lower() != s and _match_reference(s.lower()) is not None:
            raise ValueError("repository name must be lowercase")
        raise ValueError("invalid reference format")
    domain, path, tag, digest = match
    if len(f"{domain}/{path}" if domain else path) > 255:
        raise ValueError("repository name must not be more than 255 characters")
    if digest:
        _validate_digest(digest)
    return ImageReference(domain, path, tag, digest)


def _split_docker_domain(name: str) -> tuple[str, str]:
    i = name.find("/")
    if i == -1 or (not any(ch in name[:i] for ch in ".:") and name[:i] != "localhost"):
        domain, remainder = "docker.io", name
    else:
        domain, remainder = name[:i], name[i + 1 :]
    if domain == "index.docker.io":
        domain = "docker.io"
    if domain == "docker.io" and "/" not in remainder:
        remainder = "library/" + remainder
    return domain, remainder


def parse_image_reference(ref: str) -> ImageReference:
    """Parse and normalize an image reference like `ParseNormalizedNamed` (`busybox` ->
    docker.io/library/busybox).

    A reference without tag or digest gets no tag here (see `ImageReference.tag`). Raises ValueError with the
    library's message (`invalid reference format`, `invalid reference format: repository name must be
    lowercase`).
    """
    if not isinstance(ref, str):
        raise ValueError("invalid reference format")
    if _IDENTIFIER_RE.match(ref):
        raise ValueError(f"invalid repository name ({ref}), cannot specify 64-byte hexadecimal strings")
    domain, remainder = _split_docker_domain(ref)
    colon = remainder.find(":")
    remote = remainder[:colon] if colon > -1 else remainder
    if remote.lower() != remote:
        raise ValueError("invalid reference format: repository name must be lowercase")
    return _parse_reference(f"{domain}/{remainder}")


def split_reference(ref: str) -> tuple[str, str, str]:
    """(name, tag, digest) of a reference as written, by the grammar's delimiters and without validating it
    (catalogue globs such as `acme/etl:*` split too): the digest follows the first `@`, the tag the last `:`
    after the last `/`."""
    name, _, digest = ref.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def normalize(ref: str) -> str:
    """The name the container runtime gives an image (`ParseNormalizedNamed` + `TagNameOnly`, unvalidated).

    `busybox` -> `docker.io/library/busybox:latest`; a digest reference keeps its tag if it has one, and gets
    none otherwise.
    """
    name, tag, digest = split_reference(ref)
    domain, remainder = _split_docker_domain(name)
    full = f"{domain}/{remainder}"
    if tag or not digest:
        full += f":{tag or 'latest'}"
    return f"{full}@{digest}" if digest else full


def repository(ref: str) -> str:
    """A reference's normalized name without tag and digest (`localhost:5000/x:1` -> `localhost:5000/x`)."""
    domain, remainder = _split_docker_domain(split_reference(ref)[0])
    return f"{domain}/{remainder}"


def split_image(image: str) -> tuple[str, str]:
    """`repo:tag` -> (repo, tag) as NodeImage keys them (tag `latest` when absent; a digest stays the tag)."""
    name, tag, digest = split_reference(image)
    if "@" in image:
        return name, digest
    return name, tag if ":" in image.rpartition("/")[2] else "latest"
