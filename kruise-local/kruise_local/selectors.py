"""Label and field selectors as the Kubernetes API server parses and evaluates them.

`LabelSelector.parse` reads the `labelSelector` query parameter, `LabelSelector.from_object` a
`metav1.LabelSelector` object, `FieldSelector.parse` the `fieldSelector` query parameter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kruise_local.errors import ApiError

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "validate_label_key",
    "validate_label_value",
]

# --------------------------------------------------------------------------------------------------
# Label key / value validation (k8s.io/apimachinery/pkg/util/validation)
# --------------------------------------------------------------------------------------------------

_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(f"^{_NAME_FMT}\\Z")
_VALUE_FMT = f"({_NAME_FMT})?"
_VALUE_RE = re.compile(f"^{_VALUE_FMT}\\Z")
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_LABEL}(\\.{_DNS1123_LABEL})*\\Z")
_NAME_MAX = 63
_PREFIX_MAX = 253


def validate_label_key(key: Any) -> str | None:
    """Why `key` is not a valid label key (`[prefix/]name`), or None when it is valid."""
    if not isinstance(key, str):
        return f"label key must be a string, got {type(key).__name__}"
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = None, parts[0]
    elif len(parts) == 2:
        prefix, name = parts
    else:
        return (
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start"
            " and end with an alphanumeric character with an optional DNS subdomain prefix and '/'"
            f" (e.g. 'example.com/MyName'), got {key!r}"
        )
    if prefix is not None:
        if not prefix:
            return "prefix part must be non-empty"
        if len(prefix) > _PREFIX_MAX:
            return f"prefix part must be no more than {_PREFIX_MAX} characters"
        if not _DNS1123_SUBDOMAIN_RE.match(prefix):
            return (
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric"
                " characters, '-' or '.', and must start and end with an alphanumeric character"
                f" (e.g. 'example.com'), got {prefix!r}"
            )
    if not name:
        return "name part must be non-empty"
    if len(name) > _NAME_MAX:
        return f"name part must be no more than {_NAME_MAX} characters"
    if not _NAME_RE.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end"
            f" with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for"
            f" validation is '{_NAME_FMT}'), got {name!r}"
        )
    return None


def validate_label_value(value: Any) -> str | None:
    """Why `value` is not a valid label value (may be empty), or None when it is valid."""
    if not isinstance(value, str):
        return f"label value must be a string, got {type(value).__name__}"
    if len(value) > _NAME_MAX:
        return f"must be no more than {_NAME_MAX} characters"
    if not _VALUE_RE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or"
            " '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value',"
            f" or '12345', regex used for validation is '{_VALUE_FMT}'), got {value!r}"
        )
    return None


# --------------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------------

IN, NOT_IN, EQUALS, NOT_EQUALS, EXISTS, DOES_NOT_EXIST, GT, LT = (
    "in",
    "notin",
    "=",
    "!=",
    "exists",
    "!",
    "gt",
    "lt",
)


@dataclass(frozen=True)
class Requirement:
    """One label requirement: `key <operator> values`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy this requirement."""
        has = self.key in labels
        if self.operator in (IN, EQUALS):
            return has and labels[self.key] in self.values
        if self.operator in (NOT_IN, NOT_EQUALS):
            return not has or labels[self.key] not in self.values
        if self.operator == EXISTS:
            return has
        if self.operator == DOES_NOT_EXIST:
            return not has
        if not has:
            return False
        try:
            actual, bound = int(labels[self.key]), int(self.values[0])
        except (TypeError, ValueError):
            return False
        return actual > bound if self.operator == GT else actual < bound

    def __str__(self) -> str:
        if self.operator == EXISTS:
            return self.key
        if self.operator == DOES_NOT_EXIST:
            return f"!{self.key}"
        if self.operator in (IN, NOT_IN):
            return f"{self.key} {self.operator} ({','.join(self.values)})"
        op = {GT: ">", LT: "<"}.get(self.operator, self.operator)
        return f"{self.key}{op}{self.values[0]}"


def _requirement(key: str, operator: str, values: Iterable[str]) -> Requirement:
    """Build a validated requirement; raises ValueError naming the problem."""
    vals = tuple(values)
    if (err := validate_label_key(key)) is not None:
        raise ValueError(f"key: Invalid value: {key!r}: {err}")
    if operator in (IN, NOT_IN):
        if not vals:
            raise ValueError(
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
            )
    elif operator in (EQUALS, NOT_EQUALS):
        if len(vals) != 1:
            raise ValueError(
                f"values: Invalid value: {list(vals)!r}: exact-match compatibility requires one value"
            )
    elif operator in (EXISTS, DOES_NOT_EXIST):
        if vals:
            raise ValueError(
                f"values: Invalid value: {list(vals)!r}: "
                "values set must be empty for exists and does not exist"
            )
    elif operator in (GT, LT):
        if len(vals) != 1 or not re.fullmatch(r"[-+]?[0-9]+", vals[0]):
            raise ValueError(
                f"values: Invalid value: {list(vals)!r}: for 'Gt', 'Lt' operators, exactly one integer value"
                " is required"
            )
    else:
        raise ValueError(f"operator: Unsupported value: {operator!r}")
    for i, value in enumerate(vals):
        if (err := validate_label_value(value)) is not None:
            raise ValueError(f"values[{i}][{key}]: Invalid value: {value!r}: {err}")
    if operator in (IN, NOT_IN):
        vals = tuple(sorted(set(vals)))
    return Requirement(key, operator, vals)


# Lexer for the `labelSelector` query string (k8s.io/apimachinery/pkg/labels/selector.go).
_SPECIAL = "=!(),<>"
_WHITESPACE = " \t\r\n"
_SYMBOLS = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_END = ""


def _lex(text: str) -> list[str]:
    """Split a selector string into tokens; identifiers and symbols are both plain strings.

    Keywords `in`/`notin` are returned as-is; the parser tells them apart from identifiers only where
    an operator is expected, as the real lexer does.
    """
    tokens: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in _WHITESPACE:
            i += 1
            continue
        if ch in _SPECIAL:
            for sym in _SYMBOLS:
                if text.startswith(sym, i):
                    tokens.append(sym)
                    i += len(sym)
                    break
            continue
        start = i
        while i < len(text) and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        tokens.append(text[start:i])
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _lex(text)
        self.pos = 0

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else _END

    def next(self) -> str:
        tok = self.peek()
        self.pos += 1
        return tok

    @staticmethod
    def is_identifier(tok: str) -> bool:
        return tok != _END and tok not in _SYMBOLS and tok not in ("in", "notin")

    def fail(self, found: str, expected: str) -> ApiError:
        return ApiError(400, f"unable to parse requirement: found '{found}', expected: {expected}")

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        if self.peek() == _END:
            return requirements
        while True:
            tok = self.peek()
            if not (self.is_identifier(tok) or tok == "!"):
                raise self.fail(tok, "!, identifier, or 'end of string'")
            requirements.append(self.parse_requirement())
            tok = self.next()
            if tok == _END:
                return requirements
            if tok != ",":
                raise self.fail(tok, "',' or 'end of string'")
            if not (self.is_identifier(self.peek()) or self.peek() == "!"):
                raise self.fail(self.peek(), "identifier after ','")

    def parse_requirement(self) -> Requirement:
        negated = self.peek() == "!"
        if negated:
            self.next()
        key = self.next()
        if not self.is_identifier(key):
            raise self.fail(key, "identifier")
        if negated or self.peek() in (",", _END):
            operator, values = (DOES_NOT_EXIST if negated else EXISTS), []
        else:
            op = self.next()
            if op in ("in", "notin"):
                operator, values = op, self.parse_set()
            elif op in ("=", "==", "!="):
                operator = NOT_EQUALS if op == "!=" else EQUALS
                values = [self.parse_single_value()]
            elif op in (">", "<"):
                operator = GT if op == ">" else LT
                values = [self.parse_single_value()]
            else:
                raise self.fail(op, "=, !=, ==, in, notin, >, <")
        try:
            return _requirement(key, operator, values)
        except ValueError as exc:
            raise ApiError(400, f"unable to parse requirement: {exc}") from None

    def parse_single_value(self) -> str:
        tok = self.peek()
        if tok in (",", _END):
            return ""
        if tok in ("in", "notin") or self.is_identifier(tok):
            return self.next()
        raise self.fail(tok, "identifier")

    def parse_set(self) -> list[str]:
        tok = self.next()
        if tok != "(":
            raise self.fail(tok, "'('")
        values: list[str] = []
        if self.peek() == ")":
            self.next()
            return [""]  # as upstream: "a in ()" is the set holding the empty value
        expect_value = True
        while True:
            tok = self.next()
            if tok == ")":
                if expect_value:
                    values.append("")  # "(a,)" carries an empty value
                return values
            if tok == ",":
                if expect_value:
                    values.append("")  # "(a,,b)" carries an empty value
                expect_value = True
                continue
            if expect_value and (tok in ("in", "notin") or self.is_identifier(tok)):
                values.append(tok)
                expect_value = False
                continue
            raise self.fail(tok, "',' or ')'" if not expect_value else "identifier, ',' or ')'")


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of label requirements; `nothing=True` is the selector that matches no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = field(default=False)

    @classmethod
    def everything(cls) -> LabelSelector:
        """The selector matching every object."""
        return cls()

    @classmethod
    def match_nothing(cls) -> LabelSelector:
        """The selector matching no object."""
        return cls(nothing=True)

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse a `labelSelector` query string (`a=b,c!=d,e in (f,g),!h`); None/empty matches all.

        Malformed input raises ApiError(400, "unable to parse requirement: ...").
        """
        if text is None:
            return cls()
        if not isinstance(text, str):
            raise ApiError(400, f"unable to parse requirement: label selector must be a string, got {text!r}")
        return cls(tuple(_Parser(text).parse()))

    @classmethod
    def from_object(cls, sel: Mapping[str, Any] | None, field_path: str = "selector") -> LabelSelector:
        """Convert a `metav1.LabelSelector` object, as `metav1.LabelSelectorAsSelector` does.

        `None` (no selector) matches NOTHING, while an empty `{}` matches EVERYTHING. `matchLabels`
        entries become equality requirements, `matchExpressions` use In/NotIn (non-empty `values`) and
        Exists/DoesNotExist (no `values`). Invalid selectors raise ApiError(422, reason="Invalid")
        whose `causes` name the offending field under `field_path`.
        """
        if sel is None:
            return cls.match_nothing()
        causes: list[dict[str, str]] = []

        def bad(fld: str, message: str, reason: str = "FieldValueInvalid") -> None:
            causes.append({"reason": reason, "message": message, "field": fld})

        requirements: list[Requirement] = []
        if not isinstance(sel, Mapping):
            bad(field_path, f"Invalid value: {sel!r}: must be an object", "FieldValueTypeInvalid")
            sel = {}
        match_labels = sel.get("matchLabels") or {}
        if not isinstance(match_labels, Mapping):
            bad(f"{field_path}.matchLabels", "Invalid value: must be an object", "FieldValueTypeInvalid")
            match_labels = {}
        for key, value in match_labels.items():
            if (err := validate_label_key(key)) is not None:
                bad(f"{field_path}.matchLabels", f"Invalid value: {key!r}: {err}")
            elif (err := validate_label_value(value)) is not None:
                bad(f"{field_path}.matchLabels", f"Invalid value: {value!r}: {err}")
            else:
                requirements.append(Requirement(key, EQUALS, (value,)))
        expressions = sel.get("matchExpressions") or []
        if not isinstance(expressions, list):
            bad(f"{field_path}.matchExpressions", "Invalid value: must be a list", "FieldValueTypeInvalid")
            expressions = []
        ops = {"In": IN, "NotIn": NOT_IN, "Exists": EXISTS, "DoesNotExist": DOES_NOT_EXIST}
        for i, expr in enumerate(expressions):
            path = f"{field_path}.matchExpressions[{i}]"
            if not isinstance(expr, Mapping):
                bad(path, f"Invalid value: {expr!r}: must be an object", "FieldValueTypeInvalid")
                continue
            key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                bad(f"{path}.values", "Invalid value: must be a list of strings", "FieldValueTypeInvalid")
                continue
            if not isinstance(op, str) or op not in ops:
                bad(
                    f"{path}.operator",
                    f"Invalid value: {op!r}: not a valid selector operator",
                    "FieldValueNotSupported",
                )
                continue
            if (err := validate_label_key(key)) is not None:
                bad(f"{path}.key", f"Invalid value: {key!r}: {err}")
                continue
            if op in ("In", "NotIn") and not values:
                bad(
                    f"{path}.values",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                    "FieldValueRequired",
                )
                continue
            if op in ("Exists", "DoesNotExist") and values:
                bad(
                    f"{path}.values",
                    "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    "FieldValueForbidden",
                )
                continue
            try:
                requirements.append(_requirement(key, ops[op], values))
            except ValueError as exc:
                bad(f"{path}.values", str(exc))
        if causes:
            detail = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
            raise ApiError(422, f"invalid label selector: {detail}", reason="Invalid", causes=causes)
        return cls(tuple(requirements))

    @property
    def empty(self) -> bool:
        """True when the selector matches everything."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these `metadata.labels` is selected."""
        if self.nothing:
            return False
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


# --------------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    """One field requirement: `field == value` or `field != value`."""

    field: str
    value: str
    negated: bool = False

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` satisfies this requirement (missing fields read as "")."""
        equal = _field_value(obj, _SELECTABLE_PATHS.get(self.field, self.field)) == self.value
        return not equal if self.negated else equal


_SELECTABLE_PATHS = {"source": "source.component", "reportingComponent": "reportingController"}
"""selectable field names that are not the object's path (event strategy's `ToSelectableFields`)"""


def _field_value(obj: Any, path: str) -> str:
    node = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on `sep` not preceded by a backslash; escapes are kept for `_unescape`."""
    parts, current, i = [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return parts


def _unescape(text: str, term: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in "\\,=":
                raise ApiError(400, f"invalid field selector: {term!r}: invalid escape sequence")
            out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split `lhs op rhs` at the first unescaped operator (`!=`, `==` or `=`)."""
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
        i += 1
    return None


@dataclass(frozen=True)
class FieldSelector:
    """A conjunction of field requirements over dotted object paths."""

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str | None, allowed: Iterable[str]) -> FieldSelector:
        """Parse a `fieldSelector` query string (`metadata.name=x,status.phase!=Running`).

        Fields outside `allowed` raise ApiError(400, "field label not supported: ..."); malformed
        terms raise ApiError(400). Values may contain `\\,`, `\\=` and `\\\\` escapes.
        """
        if text is None:
            return cls()
        if not isinstance(text, str):
            raise ApiError(400, f"invalid field selector: must be a string, got {text!r}")
        allowed_set = set(allowed)
        requirements = []
        for raw in _split_unescaped(text, ","):
            term = raw.strip()
            if not term:
                continue
            split = _split_term(term)
            if split is None:
                raise ApiError(400, f"invalid selector: '{text}'; can't understand '{term}'")
            lhs, op, rhs = split
            name = _unescape(lhs.strip(), term)
            if not name:
                raise ApiError(400, f"invalid selector: '{text}'; can't understand '{term}'")
            if name not in allowed_set:
                supported = ", ".join(f'"{f}"' for f in sorted(allowed_set))
                raise ApiError(
                    400,
                    f'field label not supported: {name} ("{name}" is not a known field selector: '
                    f"only {supported})",
                )
            requirements.append(FieldRequirement(name, _unescape(rhs.strip(), term), negated=op == "!="))
        return cls(tuple(requirements))

    @property
    def empty(self) -> bool:
        """True when the selector matches everything."""
        return not self.requirements

    def exact_value(self, fld: str) -> str | None:
        """The value `fld` must equal (e.g. `metadata.name`), or None when not constrained so."""
        for r in self.requirements:
            if r.field == fld and not r.negated:
                return r.value
        return None

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` satisfies every requirement."""
        return all(r.matches(obj) for r in self.requirements)

    def __str__(self) -> str:
        def esc(s: str) -> str:
            return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")

        return ",".join(
            f"{esc(r.field)}{'!=' if r.negated else '='}{esc(r.value)}" for r in self.requirements
        )
