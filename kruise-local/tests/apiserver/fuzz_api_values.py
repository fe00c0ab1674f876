"""Hypothesis strategies of the API fuzz tests (test_fuzz_api.py): hostile values, names, label and field
selectors, query parameters, and documents mutated at random paths."""

from __future__ import annotations

import copy
import json
import urllib.parse
from typing import Any

from fuzz_api_kit import NODE, NS, STALE_RV
from hypothesis import strategies as st

# -- strategies: values --------------------------------------------------------------------------------

HOSTILE_STRINGS = [
    "",
    " ",
    ".",
    "..",
    "../",
    "../../etc/passwd",
    "%2F",
    "a%2Fb",
    "%00",
    "%",
    "/",
    "a/b",
    "\x00",
    "\n",
    "\t",
    "\u202e",
    "\ud800",
    "\ufeff",
    "ünïcödé",
    "名前",
    "😀",
    "-a",
    "a-",
    "A",
    "a..b",
    "a" * 63,
    "a" * 64,
    "a" * 253,
    "a" * 254,
    "a" * 5000,
    "x" * (256 * 1024 + 1),
    "y" * (1024 * 1024 + 7),
    "1Gi",
    "-1",
    "1e999",
    "NaN",
    "0x10",
    "true",
    "null",
    "$patch",
    "~1",
    "*",
    "{}",
    "[]",
    "'; DROP TABLE pods; --",
    "${HOME}",
    "$(id)",
    "metadata.annotations['x']",
]
KEYS = st.one_of(
    st.sampled_from(
        [
            "metadata",
            "spec",
            "status",
            "kind",
            "apiVersion",
            "name",
            "namespace",
            "generateName",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "containers",
            "initContainers",
            "image",
            "command",
            "env",
            "value",
            "valueFrom",
            "fieldRef",
            "fieldPath",
            "resources",
            "limits",
            "requests",
            "cpu",
            "memory",
            "volumes",
            "volumeMounts",
            "mountPath",
            "tolerations",
            "activeDeadlineSeconds",
            "data",
            "binaryData",
            "selector",
            "names",
            "matchLabels",
            "matchExpressions",
            "podName",
            "strategy",
            "images",
            "tags",
            "tag",
            "preconditions",
            "gracePeriodSeconds",
            "deleteOptions",
            "$patch",
            "$retainKeys",
            "$setElementOrder/containers",
            "$deleteFromPrimitiveList/finalizers",
            "",
        ]
    ),
    st.text(max_size=8),
)
STRINGS = st.one_of(st.text(max_size=16), st.sampled_from(HOSTILE_STRINGS))
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
JSON = st.recursive(
    SCALARS,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(KEYS, kids, max_size=4)),
    max_leaves=12,
)
WRONG = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            False,
            0,
            -1,
            2**31,
            2**63,
            -(2**63) - 1,
            10**30,
            0.5,
            -0.0,
            1e308,
            "",
            "x",
            [],
            {},
            [None],
        ]
    ).map(copy.deepcopy),  # fresh containers: the fuzzer edits what it draws
    st.sampled_from(HOSTILE_STRINGS),
    JSON,
)


def paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths_of(v, (*prefix, i))
    return out


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    _at(doc, path[:-1])[path[-1]] = value
    return doc


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_changes: int = 3) -> Any:
    """`base` with one to `max_changes` values replaced by wrong types, deleted, added to or wrapped."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_changes))):
        path = draw(st.sampled_from(paths_of(doc)))
        how = draw(st.sampled_from(("replace", "replace", "delete", "add", "wrap")))
        target = _at(doc, path)
        if how == "delete" and path:
            del _at(doc, path[:-1])[path[-1]]
        elif how == "add" and isinstance(target, dict):
            target[draw(KEYS)] = draw(WRONG)
        elif how == "add" and isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(WRONG))
        elif how == "wrap":
            doc = _put(doc, path, draw(st.sampled_from(([target], {"x": target}, json.dumps(target)))))
        else:
            doc = _put(doc, path, draw(WRONG))
    return doc


# -- strategies: names, selectors, query parameters ------------------------------------------------------

NAME_STRINGS = [s for s in HOSTILE_STRINGS if len(s) < 6000]
REF_LOOKALIKES = [
    "ref-cm/",
    "ref-cm%2F",
    "ref-cm/status",
    "ref-cm%2Fstatus",
    "ref-pod/log",
    "ref-pod/eviction",
    "ref-pod/resize",
    "ref-pod%2F..%2Fref-cm",
    "ref-pod/../ref-cm",
    "REF-CM",
    "ref-cm ",
    " ref-cm",
    "ref-cm\x00",
    "ref-c%6D",
    "ref-cm?x=1",
    "ref-cm#frag",
]
NAMES = st.one_of(st.sampled_from(NAME_STRINGS + REF_LOOKALIKES), st.text(max_size=20))


def quote(name: str, safe: str = "") -> str:
    return urllib.parse.quote(name, safe=safe, errors="surrogatepass")


def segment(name: str, raw: bool) -> str:
    """A path segment for `name`: percent-quoted as a client does, or raw (when sendable and harmless)."""
    sendable = name.isascii() and all(0x20 < ord(ch) < 0x7F for ch in name)
    if raw and sendable and "?" not in name and "#" not in name:
        return name
    return quote(name)


SELECTOR_PIECES = [
    "a=b",
    "a!=b",
    "a==b",
    "a in (b,c)",
    "a notin (b)",
    "!a",
    "a",
    "a>1",
    "a<-3",
    "a>x",
    "app=ref",
    "app",
    "a in ()",
    "a in (",
    "a in (b,,c)",
    "a in b",
    "=",
    "!",
    "!=",
    ",",
    "(",
    ")",
    "a=(b)",
    "a==",
    "a=b=c",
    "x/y=z",
    "x//y=z",
    "-a=b",
    "a" * 300 + "=b",
    "a=" + "b" * 64,
    "é=ü",
    "\x00",
    "a=\n",
    "in",
    "notin",
    "in in (in)",
    "metadata.name=x",
    "metadata.name=ref-cm",
    "metadata.name!=x",
    "metadata.name==ref-pod",
    "metadata.namespace=" + NS,
    "spec.nodeName=" + NODE,
    "status.phase=Running",
    "spec.restartPolicy=Always",
    "involvedObject.name=ref-cm",
    "reason=Reference",
    "data.k=v",
    "metadata.labels=x",
    "metadata.name",
    "metadata.name=a\\,b",
    "metadata.name=a\\",
    "metadata.name=\\x",
    "metadata.name=x,,",
    " metadata.name = ref-cm ",
    "\\=",
]
SELECTORS = st.one_of(
    st.sampled_from(SELECTOR_PIECES),
    st.lists(st.sampled_from(SELECTOR_PIECES), min_size=1, max_size=4).map(",".join),
    st.text(alphabet=st.sampled_from("ab=!(),<> \\/.-_é\x00in"), max_size=24),
    st.text(max_size=12),
)
INTISH = st.one_of(
    st.sampled_from(
        [
            "",
            "0",
            "1",
            "-1",
            "3",
            "abc",
            "1.5",
            "1e3",
            "0x10",
            " 1",
            "+5",
            "1_000",
            "١٢",
            "99999999999999999999",
            "-99999999999999999999",
            "9" * 400,
            "9" * 5000,
            "true",
            "null",
        ]
    ),
    st.integers().map(str),
    st.text(max_size=6),
)
BOOLISH = st.sampled_from(["", "true", "false", "1", "0", "True", "TRUE", "yes", "x", "null"])
TIMES = st.one_of(
    st.sampled_from(
        [
            "",
            "2024-01-01T00:00:00Z",
            "2024-01-01T00:00:00.123456789Z",
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59Z",
            "9999-12-31T23:59:59-14:00",
            "2024-01-01",
            "2024-01-01T00:00:00",
            "2024-13-45T99:99:99Z",
            "2024-01-01T00:00:00+25:00",
            "yesterday",
            "-1",
            "0",
            "\x00",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
    st.text(max_size=12),
)
QUERY_STRINGS = st.one_of(
    st.text(max_size=16), st.sampled_from([h for h in HOSTILE_STRINGS if len(h) < 300_000])
)
"""Hostile strings that fit a request line (the real server, like this one, refuses lines over 1 MiB as bad
HTTP, before any handler sees them)."""
COMMON_QUERY = {
    "pretty": BOOLISH,
    "resourceVersion": st.one_of(INTISH, st.sampled_from([STALE_RV, "0"])),
    "resourceVersionMatch": st.sampled_from(["", "Exact", "NotOlderThan", "bogus"]),
    "timeoutSeconds": INTISH,
    "dryRun": st.sampled_from(["All", "all", "None", "", "x", "All,All"]),
    "fieldManager": QUERY_STRINGS,
    "fieldValidation": st.sampled_from(["Strict", "Warn", "Ignore", "", "bogus"]),
    "gracePeriodSeconds": INTISH,
    "propagationPolicy": st.sampled_from(["Foreground", "Background", "Orphan", "", "x"]),
}
LIST_QUERY = {
    "labelSelector": SELECTORS,
    "fieldSelector": SELECTORS,
    "limit": INTISH,
    "continue": st.one_of(
        st.sampled_from(["", "MQ==", "LTE=", "YWJj", "!!!", "MTAwMDAwMDAwMDA="]), QUERY_STRINGS
    ),
    "watch": BOOLISH,
    "allowWatchBookmarks": BOOLISH,
    "sendInitialEvents": BOOLISH,
}
LOG_QUERY = {
    "container": st.one_of(st.sampled_from(["c", "C", "", "nope", "c ", "c,c"]), NAMES),
    "tailLines": INTISH,
    "sinceTime": TIMES,
    "sinceSeconds": INTISH,
    "limitBytes": INTISH,
    "follow": BOOLISH,
    "previous": BOOLISH,
    "timestamps": BOOLISH,
    "insecureSkipTLSVerifyBackend": BOOLISH,
}


@st.composite
def query(draw: st.DrawFn, *families: dict[str, st.SearchStrategy[str]]) -> list[tuple[str, str]]:
    params = {k: v for family in families for k, v in family.items()}
    keys = draw(st.lists(st.sampled_from(sorted(params)), max_size=4, unique=True))
    out = [(k, draw(params[k])) for k in keys]
    if draw(st.booleans()):
        out.append((draw(KEYS), draw(QUERY_STRINGS)))  # an unknown parameter
    return out
