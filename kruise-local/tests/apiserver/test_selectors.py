"""Unit tests for label and field selectors of the local API server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kruise_local.errors import ApiError
from kruise_local.selectors import (
    FieldSelector,
    LabelSelector,
    validate_label_key,
    validate_label_value,
)

LABELS = {"app": "web", "tier": "frontend", "env": "", "example.com/team": "a", "rank": "7"}


# ------------------------------------------------------------------------------------------------
# Key / value validation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["a", "A-b_c.d", "example.com/name", "a.b-c.d/x", "x" * 63, "a" * 253 + "/b", "1", "k8s.io/a"],
)
def test_valid_label_keys(key: str) -> None:
    assert validate_label_key(key) is None


@pytest.mark.parametrize(
    "key",
    [
        "",
        "-a",
        "a-",
        "a b",
        "x" * 64,
        "/a",
        "a/",
        "a/b/c",
        "Example.com/a",
        "a_b.com/x",
        "a" * 254 + "/b",
        "é",
        5,
    ],
)
def test_invalid_label_keys(key: Any) -> None:
    assert isinstance(validate_label_key(key), str)


@pytest.mark.parametrize("value", ["", "a", "A.b-c_d", "v" * 63, "123"])
def test_valid_label_values(value: str) -> None:
    assert validate_label_value(value) is None


@pytest.mark.parametrize("value", ["-a", "a-", "a b", "v" * 64, "a/b", None, 1])
def test_invalid_label_values(value: Any) -> None:
    assert isinstance(validate_label_value(value), str)


# ------------------------------------------------------------------------------------------------
# labelSelector query strings
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, True),
        ("", True),
        ("   ", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app=api", False),
        ("app!=api", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("missing=x", False),
        ("env=", True),
        ("env!=", False),
        ("app in (web,api)", True),
        ("app in(api)", False),
        ("app notin (api, db)", True),
        ("app notin (web)", False),
        ("missing notin (web)", True),
        ("missing in (web)", False),
        ("env in (,x)", True),
        ("env in ()", True),
        ("app notin ()", True),
        ("env notin (,)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("! app", False),
        ("example.com/team=a", True),
        ("app=web,tier=frontend", True),
        (" app = web , tier in ( frontend , backend ) , !gone ", True),
        ("app=web,tier=backend", False),
        ("rank>5", True),
        ("rank<5", False),
        ("app>5", False),
    ],
)
def test_label_selector_parse_and_match(text: str | None, expected: bool) -> None:
    assert LabelSelector.parse(text).matches(LABELS) is expected


def test_label_selector_matches_none_labels() -> None:
    assert LabelSelector.parse("").matches(None)
    assert LabelSelector.parse("!a").matches(None)
    assert not LabelSelector.parse("a").matches(None)
    assert LabelSelector.parse(None).empty
    assert not LabelSelector.parse("a").empty


@pytest.mark.parametrize(
    "text",
    [
        "a=b=c",
        "a b",
        "=b",
        ",",
        "a=b,",
        ",a=b",
        "a=b,,c=d",
        "a in",
        "a in b",
        "a in (b",
        "a in (b c)",
        "!a=b",
        "!",
        "!!a",
        "a!b",
        "in=b",
        "a=(b)",
        "a=b c",
        "a/b/c=d",
        "-a=b",
        "a=-b",
        "a=" + "v" * 64,
        "k" * 64,
        "a>b",
        "a<",
        "a=b)",
        "(a)",
    ],
)
def test_label_selector_malformed_is_400(text: str) -> None:
    with pytest.raises(ApiError) as exc_info:
        LabelSelector.parse(text)
    assert exc_info.value.code == 400
    assert exc_info.value.message.startswith("unable to parse requirement: ")


def test_label_selector_str_round_trips() -> None:
    sel = LabelSelector.parse("a=b, c != d, e in (g,f), h notin (i), j, !k, n>3")
    again = LabelSelector.parse(str(sel))
    assert again == sel
    assert str(sel) == "a=b,c!=d,e in (f,g),h notin (i),j,!k,n>3"


# ------------------------------------------------------------------------------------------------
# metav1.LabelSelector objects
# ------------------------------------------------------------------------------------------------


def test_from_object_none_matches_nothing_and_empty_matches_everything() -> None:
    assert not LabelSelector.from_object(None).matches(LABELS)
    assert not LabelSelector.from_object(None).matches({})
    assert not LabelSelector.from_object(None).empty
    assert LabelSelector.from_object({}).matches(LABELS)
    assert LabelSelector.from_object({}).matches(None)
    assert LabelSelector.from_object({"matchLabels": {}, "matchExpressions": []}).empty


@pytest.mark.parametrize(
    ("sel", "expected"),
    [
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "web", "tier": "x"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist", "values": []}]}, False),
        (
            {
                "matchLabels": {"tier": "frontend"},
                "matchExpressions": [{"key": "gone", "operator": "DoesNotExist"}],
            },
            True,
        ),
    ],
)
def test_from_object_matches(sel: dict[str, Any], expected: bool) -> None:
    assert LabelSelector.from_object(sel).matches(LABELS) is expected


@pytest.mark.parametrize(
    ("sel", "field"),
    [
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "matchExpressions[0].values"),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn"}]}, "matchExpressions[0].values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "matchExpressions[0].values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
            "matchExpressions[0].values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            "matchExpressions[0].operator",
        ),
        ({"matchExpressions": [{"key": "a", "operator": ["In"]}]}, "matchExpressions[0].operator"),
        ({"matchExpressions": [{"key": "-bad", "operator": "Exists"}]}, "matchExpressions[0].key"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b c"]}]},
            "matchExpressions[0].values",
        ),
        ({"matchExpressions": ["nope"]}, "matchExpressions[0]"),
        ({"matchExpressions": {"key": "a"}}, "matchExpressions"),
        ({"matchLabels": {"bad key": "v"}}, "matchLabels"),
        ({"matchLabels": {"k": "bad value"}}, "matchLabels"),
        ({"matchLabels": ["k"]}, "matchLabels"),
    ],
)
def test_from_object_invalid_is_422_with_causes(sel: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as exc_info:
        LabelSelector.from_object(sel, "spec.selector")
    err = exc_info.value
    assert err.code == 422
    assert err.reason == "Invalid"
    assert err.causes[0]["field"] == f"spec.selector.{field}"
    assert f"spec.selector.{field}" in err.message


# ------------------------------------------------------------------------------------------------
# fieldSelector query strings
# ------------------------------------------------------------------------------------------------

POD_FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "spec.unschedulable"}
POD = {
    "metadata": {"name": "p1", "namespace": "ns"},
    "spec": {"nodeName": "n1", "unschedulable": True},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, True),
        ("", True),
        ("metadata.name=p1", True),
        ("metadata.name==p1", True),
        ("metadata.name!=p1", False),
        ("metadata.name=p2", False),
        ("metadata.name=p1,metadata.namespace=ns", True),
        (" status.phase = Running , spec.nodeName != n2 ", True),
        ("status.phase!=Running", False),
        ("spec.nodeName=", False),
        ("spec.unschedulable=true", True),
        ("metadata.namespace!=", True),
    ],
)
def test_field_selector_parse_and_match(text: str | None, expected: bool) -> None:
    assert FieldSelector.parse(text, POD_FIELDS).matches(POD) is expected


def test_field_selector_missing_fields_read_as_empty_string() -> None:
    pod = {"metadata": {"name": "p1"}, "spec": None}
    assert FieldSelector.parse("spec.nodeName=", POD_FIELDS).matches(pod)
    assert FieldSelector.parse("status.phase=", POD_FIELDS).matches(pod)
    assert not FieldSelector.parse("status.phase!=", POD_FIELDS).matches(pod)


def test_field_selector_escapes_and_exact_value() -> None:
    sel = FieldSelector.parse(r"metadata.name=a\,b\=c\\d,status.phase!=x", POD_FIELDS)
    assert sel.exact_value("metadata.name") == "a,b=c\\d"
    assert sel.exact_value("status.phase") is None
    assert sel.matches({"metadata": {"name": "a,b=c\\d"}})
    assert FieldSelector.parse(str(sel), POD_FIELDS) == sel
    assert FieldSelector.parse("", POD_FIELDS).empty


def test_field_selector_unknown_field_is_400_naming_allowed_fields() -> None:
    with pytest.raises(ApiError) as exc_info:
        FieldSelector.parse("spec.foo=bar", {"metadata.name", "metadata.namespace"})
    err = exc_info.value
    assert err.code == 400
    assert "field label not supported: spec.foo" in err.message
    assert '"metadata.name"' in err.message
    assert '"metadata.namespace"' in err.message


@pytest.mark.parametrize("text", ["metadata.name", "=x", "metadata.name=a\\b", "metadata.name=a\\", "!=a"])
def test_field_selector_malformed_is_400(text: str) -> None:
    with pytest.raises(ApiError) as exc_info:
        FieldSelector.parse(text, POD_FIELDS)
    assert exc_info.value.code == 400


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------


def assert_code(exc: ApiError, code: int) -> None:
    assert exc.code == code, exc.message


_selector_text = st.text(alphabet="ab=!(),<> \t-_./inot0\\", max_size=24) | st.text(max_size=24)


@settings(max_examples=500)
@given(_selector_text)
def test_hostile_label_selectors_only_raise_400(text: str) -> None:
    try:
        sel = LabelSelector.parse(text)
    except ApiError as exc:
        error = exc
    else:
        error = None
    if error is not None:
        assert error.code == 400
        assert error.message.startswith("unable to parse requirement: ")
        return
    assert LabelSelector.parse(str(sel)) == sel
    sel.matches({"a": "b"})


@settings(max_examples=300)
@given(_selector_text)
def test_hostile_field_selectors_only_raise_400(text: str) -> None:
    try:
        sel = FieldSelector.parse(text, {"a", "a.b", "b"})
    except ApiError as exc:
        assert_code(exc, 400)
        return
    assert FieldSelector.parse(str(sel), {"a", "a.b", "b"}) == sel
    sel.matches({"a": {"b": 1}})


_hostile_objects = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300)
@given(st.none() | _hostile_objects)
def test_hostile_label_selector_objects_only_raise_422(sel: Any) -> None:
    try:
        LabelSelector.from_object(sel)
    except ApiError as exc:
        assert_code(exc, 422)


_names = st.sampled_from(["a", "b", "example.com/c"])
_vals = st.sampled_from(["", "x", "y"])
_requirement_text = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", _names, _vals),
    st.builds(lambda k, v: f"{k}!={v}", _names, _vals),
    st.builds(lambda k, vs: f"{k} in ({','.join(vs)})", _names, st.lists(_vals, min_size=1, max_size=3)),
    st.builds(lambda k, vs: f"{k} notin ({','.join(vs)})", _names, st.lists(_vals, min_size=1, max_size=3)),
    _names,
    st.builds(lambda k: f"!{k}", _names),
)


@given(st.lists(_requirement_text, max_size=4), st.dictionaries(_names, _vals, max_size=3))
def test_selector_is_conjunction_of_its_requirements(parts: list[str], labels: dict[str, str]) -> None:
    whole = LabelSelector.parse(",".join(parts)).matches(labels)
    assert whole == all(LabelSelector.parse(p).matches(labels) for p in parts)
