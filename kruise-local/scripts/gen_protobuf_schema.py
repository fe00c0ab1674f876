"""Regenerate `kruise_local/protobuf_core.json` from `k8s.io/api` `core/v1/generated.proto` and `types.go`.

The table holds, for each message a Pod's protobuf encoding reaches, its field numbers with their JSON names
and types, as `kruise_local/protobuf.py` reads them. Usage:

    python kruise-local/scripts/gen_protobuf_schema.py core/v1/generated.proto core/v1/types.go > \\
        kruise-local/kruise_local/protobuf_core.json

(kubernetes/api at 10b39a39bcee995dfe7cd5e8e7b922be5e46f1e2 made the current table.)
"""

from __future__ import annotations

import json
import re
import sys

_FIELD = re.compile(r"^\s*(optional|repeated)\s+(\S+)\s+(\w+)\s*=\s*(\d+)\s*;")
_MAP = re.compile(r"^\s*map<\s*string\s*,\s*(\S+?)\s*>\s+(\w+)\s*=\s*(\d+)\s*;")
_SCALARS = {
    "string": "string",
    "bool": "bool",
    "int32": "int",
    "int64": "int",
    "bytes": "bytes",
    "double": "double",
}
_SPECIAL = {
    ".k8s.io.apimachinery.pkg.apis.meta.v1.Time": "time",
    ".k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "time",
    ".k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    ".k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intstr",
}


# Go structs embedded with `json:",inline"`: their fields are the parent's in JSON
_INLINE = {
    ("Probe", "handler"),
    ("Volume", "volumeSource"),
    ("EphemeralContainer", "ephemeralContainerCommon"),
    ("VolumeMountStatus", "volumeStatus"),
}


def _type(proto: str) -> str:
    if proto in _SCALARS:
        return _SCALARS[proto]
    if proto in _SPECIAL:
        return _SPECIAL[proto]
    return "msg:" + proto.rsplit(".", 1)[-1]


def parse(text: str) -> dict[str, dict[str, list[str]]]:
    messages: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    name = ""
    for line in text.splitlines():
        if m := re.match(r"^message (\w+) \{", line):
            name = m.group(1)
            current = messages.setdefault(name, {})
        elif line.startswith("}"):
            current = None
        elif current is not None and (m := _FIELD.match(line)):
            kind = _type(m.group(2))
            if (name, m.group(3)) in _INLINE or m.group(3) == "localObjectReference":
                kind = "inline:" + kind[4:]
            current[m.group(4)] = [m.group(3), f"list:{kind}" if m.group(1) == "repeated" else kind]
        elif current is not None and (m := _MAP.match(line)):
            current[m.group(3)] = [m.group(2), f"map:{_type(m.group(1))}"]
    return messages


_GO_FIELD = re.compile(r'^\t\w+ (\*?)[\w.\[\]]+ `json:"(\w+)(,[\w,]*)?" protobuf:')


def omitted_zeros(types_go: str) -> set[tuple[str, str]]:
    """(struct, json name) of the non-pointer `omitempty` fields of `types.go`: protobuf always carries them,
    zero values included, and Go's JSON leaves a zero out, so the decoder drops a zero scalar there; a pointer
    field's zero (`allowPrivilegeEscalation: false`, `terminationGracePeriodSeconds: 0`) is kept."""
    out: set[tuple[str, str]] = set()
    struct = ""
    for line in types_go.splitlines():
        if m := re.match(r"^type (\w+) struct \{", line):
            struct = m.group(1)
        elif (m := _GO_FIELD.match(line)) and not m.group(1) and "omitempty" in (m.group(3) or ""):
            out.add((struct, m.group(2)))
    return out


def mark_zeros(table: dict[str, dict[str, list[str]]], zeros: set[tuple[str, str]]) -> None:
    for name, fields in table.items():
        for field in fields.values():
            if (name, field[0]) in zeros and field[1] in ("string", "int", "bool"):
                field[1] = "z:" + field[1]


def reachable(messages: dict[str, dict[str, list[str]]], roots: list[str]) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in out or name not in messages:
            continue
        out[name] = messages[name]
        for _, kind in messages[name].values():
            if "msg:" in kind or "inline:" in kind:
                todo.append(kind.rsplit(":", 1)[1])
    return dict(sorted(out.items()))


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        table = reachable(parse(f.read()), ["Pod"])
    with open(sys.argv[2], encoding="utf-8") as f:
        mark_zeros(table, omitted_zeros(f.read()))
    json.dump(table, sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
