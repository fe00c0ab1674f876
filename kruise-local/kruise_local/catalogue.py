"""The image catalogue: what each image reference "contains" on the local cluster.

A YAML (or JSON) file lists images by reference (a glob such as `acme/extract:*` is allowed). Each entry
(keys in `ENTRY_KEYS`) models the image's filesystem and its OCI config:

- `base`: `host` (default) -- the image's root holds the host's userland read-only (/usr, /etc, /bin, /lib*:
  a shell and coreutils, like a Debian or busybox image); `scratch` -- an empty root holding only what
  `provides` and `links` list (a distroless or `FROM scratch` image: no /bin/sh).
- `provides`: host paths (globs allowed, expanded on the host) bound read-only at the same path.
- `links`: `{path: target}` symlinks the image has (a link inside a host folder replaces that folder with
  one holding only the image's links).
- `files`: `{path: {"from": host file, "mode": "0555"}}` regular files the image has at `path`, with the
  bytes of the host file and the mode given (an octal string or an int), whatever mode the host file has:
  an image's files have the modes its layers' tar headers record, which the runtime's snapshotter applies
  when it unpacks them (containerd `pkg/archive/tar.go` `createTarFile`: `os.Chmod(path, hdrInfo.Mode())`
  for a regular file), and runc's exec checks them (a file without an execute bit fails the start with
  "permission denied"). `provides` and `links` serve the host's files with the host's modes. Each file is
  copied once per content and mode into a folder of this process (`unpacked_files`), bound read-only.
- `dirs`: `{path: mode}` or `{path: {"mode": "0700", "owner": "UID:GID"}}` folders the image has (root's
  unless an owner is given), such as `/tmp` (1777) and `/root` (0700): a container's writable layer starts
  from them (`rootfs.py`). A `host` image has a Debian image's (`HOST_DIRS`) unless it names its own.
- `entrypoint` / `cmd`: the OCI config's Entrypoint and Cmd (both default to none). As a runtime does, a
  container's `command` replaces the Entrypoint and drops the Cmd; its `args` replace the Cmd.
- `user`: the OCI config's User, numeric (`"65532"` or `"65532:65532"`; user names are not modelled): whom
  the container runs as when its security context names no `runAsUser` (default: root).
- `env`, `size` (drives the modeled pull time), `digest` (default: derived from the reference).

Images not in the catalogue cannot be pulled (the pull fails with a message naming the catalogue), unless the
catalogue is permissive: then any reference runs as a generic image with the host's userland and `cmd [sh]`.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .imageref import normalize, repository, split_reference
from .rootfs import process_dir

DEFAULT_CATALOGUE = "images.yaml"
NOT_IN_CATALOGUE = "not in kruise-local's image catalogue: add it to images.yaml or pass --catalogue"
ENTRY_KEYS = frozenset(
    {"ref", "size", "digest", "base", "provides", "links", "files", "dirs", "entrypoint", "cmd", "env"}
    | {"user"}
)
BASES = ("host", "scratch")
HOST_DIRS: tuple[tuple[str, int, int, int], ...] = (
    ("/root", 0o700, 0, 0),
    ("/tmp", 0o1777, 0, 0),
    ("/home", 0o755, 0, 0),
    ("/run", 0o755, 0, 0),
    ("/var/tmp", 0o1777, 0, 0),
)
"""The folders of a `host` image besides the host's userland, as a Debian image (python:3.11-slim) has them:
root's home, the temporary folders (sticky, writable by all), /home and /run."""


@dataclass(frozen=True)
class Image:
    """One image as the catalogue describes it."""

    ref: str
    size: int
    digest: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    host_base: bool = True
    provides: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[str, str, int], ...] = ()  # (path in the image, host file, mode)
    user: str = ""  # the OCI config's User: "uid" or "uid:gid", "" for root
    dirs: tuple[tuple[str, int, int, int], ...] = ()  # (path in the image, mode, uid, gid)

    @property
    def image_id(self) -> str:
        return f"{repository(self.ref)}@{self.digest}"

    def host_paths(self) -> list[str]:
        """The host paths `provides` names, globs expanded (a pattern matching nothing adds nothing)."""
        out: list[str] = []
        for pattern in self.provides:
            out += sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        return out

    def unpacked_files(self) -> list[tuple[str, str]]:
        """The image's `files` as (host copy, path in the image): each host file's bytes with the image's
        mode, copied once per content and mode (as a snapshotter unpacks a layer once)."""
        return [(_unpacked(source, mode), path) for path, source, mode in self.files]


def _unpacked(source: str, mode: int) -> str:
    """A copy of host file `source` with `mode`, in this process's folder of unpacked image files (mode 0711:
    any container user reaches a file by its path, the file's own mode decides the rest)."""
    folder = str(process_dir("kruise-local-files-", 0o711))
    data = Path(source).read_bytes()
    name = f"{hashlib.sha256(data).hexdigest()}-{mode:04o}"
    target = os.path.join(folder, name)
    if not os.path.exists(target):
        fd, tmp = tempfile.mkstemp(dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    return target


def _file_mode(value: Any) -> int | None:
    """A file mode given as an int or an octal string ("0555"), or None if it is neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        mode = value
    elif isinstance(value, str) and value and all(c in "01234567" for c in value):
        mode = int(value, 8)
    else:
        return None
    return mode if 0 <= mode <= 0o7777 else None


def _dir_attrs(value: Any) -> tuple[int, int, int] | None:
    """(mode, uid, gid) of a `dirs` entry: a mode, or {"mode": mode, "owner": "UID:GID"}; None if invalid."""
    if isinstance(value, dict):
        if set(value) - {"mode", "owner"} or "mode" not in value:
            return None
        owner = str(value.get("owner", "0:0")).split(":")
        if len(owner) != 2 or not all(o.isdigit() for o in owner):
            return None
        mode = _file_mode(value["mode"])
        return None if mode is None else (mode, int(owner[0]), int(owner[1]))
    mode = _file_mode(value)
    return None if mode is None else (mode, 0, 0)


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


def _check_entry(e: Any, where: str) -> None:
    """Raise ValueError naming the entry and the key when `e` is not a valid catalogue entry."""
    if not isinstance(e, dict) or not isinstance(e.get("ref"), str):
        raise ValueError(f"{where}: needs a string 'ref'")
    where = f"{where} ({e['ref']})"
    unknown = sorted(set(e) - ENTRY_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; the keys are {sorted(ENTRY_KEYS)}")
    if e.get("base", "host") not in BASES:
        raise ValueError(f"{where}: 'base' must be one of {list(BASES)}, not {e.get('base')!r}")
    for key in ("provides", "entrypoint", "cmd"):
        value = e.get(key)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ValueError(f"{where}: '{key}' must be a list of strings")
    if any(not p.startswith("/") for p in e.get("provides") or []):
        raise ValueError(f"{where}: 'provides' paths must be absolute")
    links = e.get("links")
    if links is not None and (
        not isinstance(links, dict)
        or not all(isinstance(k, str) and k.startswith("/") and isinstance(v, str) for k, v in links.items())
    ):
        raise ValueError(f"{where}: 'links' must map absolute paths to link targets")
    files = e.get("files")
    if files is not None and (
        not isinstance(files, dict)
        or not all(
            isinstance(k, str)
            and k.startswith("/")
            and isinstance(v, dict)
            and set(v) == {"from", "mode"}
            and isinstance(v["from"], str)
            and v["from"].startswith("/")
            and _file_mode(v["mode"]) is not None
            for k, v in files.items()
        )
    ):
        raise ValueError(
            f"{where}: 'files' must map absolute paths to {{'from': an absolute host path, 'mode': an octal "
            "mode such as '0555'}"
        )
    dirs = e.get("dirs")
    if dirs is not None and (
        not isinstance(dirs, dict) or not all(isinstance(k, str) and k.startswith("/") for k in dirs)
    ):
        raise ValueError(f"{where}: 'dirs' must map absolute paths to folder modes")
    for path, value in (dirs or {}).items():
        if _dir_attrs(value) is None:
            raise ValueError(
                f"{where}: dirs[{path!r}] must be an octal mode such as '0755' or "
                "{'mode': '0700', 'owner': 'UID:GID'}"
            )
    if e.get("env") is not None and not isinstance(e["env"], dict):
        raise ValueError(f"{where}: 'env' must be a mapping")
    user = e.get("user")
    if user is not None and (not isinstance(user, str) or not re.fullmatch(r"(\d+(:\d+)?)?", user)):
        raise ValueError(f"{where}: 'user' must be a numeric uid or uid:gid such as '65532:65532', or ''")


def _dirs(entry: dict[str, Any]) -> tuple[tuple[str, int, int, int], ...]:
    if entry.get("dirs") is None:
        return HOST_DIRS if entry.get("base", "host") == "host" else ()
    return tuple((path, *(_dir_attrs(value) or (0o755, 0, 0))) for path, value in entry["dirs"].items())


class Catalogue:
    """Image references -> `Image`, exact entries first, then globs in file order."""

    def __init__(self, entries: list[dict[str, Any]], permissive: bool = False) -> None:
        self.permissive = permissive
        self._entries = []
        for i, e in enumerate(entries):
            _check_entry(e, f"image catalogue entry {i}")
            self._entries.append(e)

    def add(self, entry: dict[str, Any]) -> None:
        """Make an image exist from now on (a push to the registry); same keys as a catalogue file entry."""
        _check_entry(entry, "an image catalogue entry")
        self._entries.insert(0, entry)

    def remove(self, ref: str) -> None:
        """Forget the entries whose reference is `ref` (the image is deleted from the registry)."""
        self._entries = [e for e in self._entries if normalize(e["ref"]) != normalize(ref)]

    @classmethod
    def load(cls, path: str | Path | None = None, permissive: bool = False) -> Catalogue:
        """Load a catalogue file; None loads the one shipped with the package. `permissive`: any reference
        missing from it runs as a generic image (the host's userland, `cmd [sh]`)."""
        if path is None:
            text = resources.files(__package__).joinpath(DEFAULT_CATALOGUE).read_text()
        else:
            text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        return cls(list(data.get("images") or []), permissive=permissive)

    def lookup(self, ref: str) -> Image | None:
        """The catalogue's image for `ref`, or None when the image does not exist.

        A digest reference resolves as a registry does: `repo:tag@sha256:D` is the tag's image if its digest
        is D; `repo@sha256:D` is found among the exact (non-glob) entries of that repository.
        """
        found = self._find(ref)
        if found is None and self.permissive:
            full = normalize(ref)
            digest = split_reference(full)[2] or "sha256:" + hashlib.sha256(full.encode()).hexdigest()
            return Image(ref=full, size=5 * 2**20, digest=digest, cmd=("sh",), dirs=HOST_DIRS)
        return found

    def _find(self, ref: str) -> Image | None:
        full = normalize(ref)
        name, tag, digest = split_reference(full)
        if not digest:
            return self._lookup(full)
        if tag:  # repo:tag@digest: the tag's image, if the digest matches
            candidates: Iterable[Image | None] = [self._lookup(f"{name}:{tag}")]
        else:
            candidates = (
                self._lookup(normalize(e["ref"]))
                for e in self._entries
                if not any(c in e["ref"] for c in "*?[") and repository(e["ref"]) == name
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
                entrypoint=tuple(e.get("entrypoint") or ()),
                cmd=tuple(e.get("cmd") or ()),
                env={str(k): str(v) for k, v in (e.get("env") or {}).items()},
                host_base=e.get("base", "host") == "host",
                provides=tuple(e.get("provides") or ()),
                links=tuple((e.get("links") or {}).items()),
                files=tuple(
                    (path, f["from"], _file_mode(f["mode"]) or 0)
                    for path, f in (e.get("files") or {}).items()
                ),
                user=str(e.get("user") or ""),
                dirs=_dirs(e),
            )
        return None
