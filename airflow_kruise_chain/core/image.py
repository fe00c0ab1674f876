"""Docker/OCI image reference parsing (the grammar of distribution/reference)."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_REGISTRY = "docker.io"

_DOMAIN_COMPONENT = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST = re.compile(rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?")
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST_HEX_LENGTH = {"sha256": 64, "sha512": 128}
_MAX_NAME_LENGTH = 255


@dataclass(frozen=True)
class ImageReference:
    """A parsed image reference: ``[registry[:port]/]path[:tag][@digest]``."""

    registry: str | None
    path: str
    tag: str | None
    digest: str | None

    @property
    def repository(self) -> str:
        """Fully qualified repository, Docker-normalised (``nginx`` -> ``docker.io/library/nginx``)."""
        registry = self.registry or DEFAULT_REGISTRY
        path = self.path
        if registry == DEFAULT_REGISTRY and "/" not in path:
            path = f"library/{path}"
        return f"{registry}/{path}"

    @property
    def floating(self) -> bool:
        """True when the reference may point at different images over time (``:latest`` or no tag/digest)."""
        return self.digest is None and self.tag in (None, "latest")

    def __str__(self) -> str:
        text = f"{self.registry}/{self.path}" if self.registry else self.path
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_image_reference(reference: str) -> ImageReference:
    """Parse `reference`, raising ValueError with the reason when it is not a valid image reference."""
    if not reference or reference != reference.strip():
        raise ValueError(f"image reference {reference!r} is empty or has surrounding whitespace")
    rest, digest = reference, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        algorithm, _, hex_part = digest.partition(":")
        length = _DIGEST_HEX_LENGTH.get(algorithm)
        if length is None or not re.fullmatch(rf"[0-9a-f]{{{length}}}", hex_part):
            raise ValueError(
                f"image reference {reference!r} has an invalid digest {digest!r}: "
                "expected sha256:<64 lowercase hex>"
            )
    name, tag = rest, None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = rest.rsplit(":", 1)
        if not _TAG.fullmatch(tag):
            raise ValueError(
                f"image reference {reference!r} has an invalid tag {tag!r}: "
                "use at most 128 of [A-Za-z0-9_.-], not starting with '.' or '-'"
            )
    if not name:
        raise ValueError(f"image reference {reference!r} has no repository name")
    if len(name) > _MAX_NAME_LENGTH:
        raise ValueError(
            f"image reference {reference!r}: repository name longer than {_MAX_NAME_LENGTH} characters"
        )
    registry, path = None, name
    first, sep, remainder = name.partition("/")
    if sep and (any(c in first for c in ".:") or first == "localhost" or first.lower() != first):
        registry, path = first, remainder
        if not _HOST.fullmatch(registry):
            raise ValueError(f"image reference {reference!r} has an invalid registry host {registry!r}")
    for component in path.split("/"):
        if not _PATH_COMPONENT.fullmatch(component):
            raise ValueError(
                f"image reference {reference!r} has an invalid path component {component!r}: "
                "use lowercase letters and digits, separated by '.', '_', '__' or '-'"
            )
    return ImageReference(registry=registry, path=path, tag=tag, digest=digest)


def _parsed(reference: str) -> ImageReference | None:
    try:
        return parse_image_reference(reference)
    except ValueError:
        return None


def _tag(ref: ImageReference) -> str | None:
    """The tag a runtime resolves (``latest`` when neither tag nor digest is given)."""
    return ref.tag or (None if ref.digest else "latest")


def same_image(a: str, b: str) -> bool:
    """Whether `a` and `b` name the same image: equal once Docker-normalised, or two spellings of one image
    (``repo:tag`` and ``repo:tag@D``; ``repo@D`` and ``repo:tag@D``). A tag and a bare digest are not known to
    match (only the node's imageID tells)."""
    if a == b:
        return True
    ra, rb = _parsed(a), _parsed(b)
    if ra is None or rb is None or ra.repository != rb.repository:
        return False
    if ra.digest and rb.digest:
        return ra.digest == rb.digest
    return _tag(ra) is not None and _tag(ra) == _tag(rb)
