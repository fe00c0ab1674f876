"""The image catalogue: what each image reference "contains" on the local cluster.

A YAML (or JSON) file lists images by reference (a glob such as `acme/extract:*` is allowed); each entry
gives the image's size, digest, entrypoint and cmd, env, and the host paths the image provides (read-only
bound into the container, on top of the base root of /usr, /etc and /bin). Images not in the catalogue
cannot be pulled.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CATALOGUE = "images.yaml"


def normalize(ref: str) -> str:
    """`busybox` -> `docker.io/library/busybox:latest`, as the container runtime names images."""
    name, digest = [*ref.split("@", 1), ""][:2]
    first = name.split("/", 1)[0]
    if "/" not in name or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"
    last = name.rsplit("/", 1)[1]
    if ":" not in last and not digest:
        name += ":latest"
    return f"{name}@{digest}" if digest else name


def repository(ref: str) -> str:
    """A normalized reference without tag and digest (`localhost:5000/x:1` -> `localhost:5000/x`)."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


@dataclass(frozen=True)
class Image:
    """One image as the catalogue describes it."""

    ref: str
    size: int
    digest: str
    entrypoint: tuple[str, ...] = ("/bin/sh",)
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    host_paths: tuple[str, ...] = ()

    @property
    def image_id(self) -> str:
        return f"{repository(self.ref)}@{self.digest}"


def _size(value: Any) -> int:
    if isinstance(value, int):
        return value
    text = str(value).strip()
    for suffix, mult in (
        ("Gi", 2**30),
        ("Mi", 2**20),
        ("Ki", 2**10),
        ("G", 10**9),
        ("M", 10**6),
        ("K", 10**3),
    ):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * mult)
    return int(text)


class Catalogue:
    """Image references -> `Image`, exact entries first, then globs in file order."""

    def __init__(self, entries: list[dict[str, Any]]) -> None:
        self._entries = []
        for i, e in enumerate(entries):
            if not isinstance(e, dict) or not isinstance(e.get("ref"), str):
                raise ValueError(f"image catalogue entry {i}: needs a string 'ref'")
            self._entries.append(e)

    def add(self, entry: dict[str, Any]) -> None:
        """Make an image exist from now on (a push to the registry); same keys as a catalogue file entry."""
        if not isinstance(entry.get("ref"), str):
            raise ValueError("an image catalogue entry needs a string 'ref'")
        self._entries.insert(0, entry)

    def remove(self, ref: str) -> None:
        """Forget the entries whose reference is `ref` (the image is deleted from the registry)."""
        self._entries = [e for e in self._entries if normalize(e["ref"]) != normalize(ref)]

    @classmethod
    def load(cls, path: str | Path | None = None) -> Catalogue:
        """Load a catalogue file; None loads the one shipped with the package."""
        if path is None:
            text = resources.files(__package__).joinpath(DEFAULT_CATALOGUE).read_text()
        else:
            text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        return cls(list(data.get("images") or []))

    def lookup(self, ref: str) -> Image | None:
        """The catalogue's image for `ref`, or None when the image does not exist.

        A digest reference resolves as a registry does: `repo:tag@sha256:D` is the tag's image if its digest
        is D; `repo@sha256:D` is found among the exact (non-glob) entries of that repository.
        """
        full = normalize(ref)
        if "@" not in full:
            return self._lookup(full)
        name, digest = full.split("@", 1)
        if name != repository(name):  # repo:tag@digest: the tag's image, if the digest matches
            candidates: Iterable[Image | None] = [self._lookup(name)]
        else:
            candidates = (
                self._lookup(normalize(e["ref"]))
                for e in self._entries
                if not any(c in e["ref"] for c in "*?[") and repository(normalize(e["ref"])) == name
            )
        image = next((i for i in candidates if i is not None and i.digest == digest), None)
        return replace(image, ref=full) if image is not None else None

    def _lookup(self, full: str) -> Image | None:
        exact = [e for e in self._entries if normalize(e["ref"]) == full]
        globs = [e for e in self._entries if fnmatch.fnmatchcase(full, normalize(e["ref"]))]
        for e in exact + globs:
            digest = e.get("digest") or "sha256:" + hashlib.sha256(full.encode()).hexdigest()
            return Image(
                ref=full,
                size=_size(e.get("size", "5Mi")),
                digest=digest,
                entrypoint=tuple(e.get("entrypoint") or ("/bin/sh",)),
                cmd=tuple(e.get("cmd") or ()),
                env={str(k): str(v) for k, v in (e.get("env") or {}).items()},
                host_paths=tuple(e.get("host_paths") or ()),
            )
        return None
