"""Label selectors, field selectors and metav1.LabelSelector: grammar, semantics, apiserver errors."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_operator_sandbox.labels import (
    SelectorError,
    label_selector_from_dict,
    parse_label_selector,
    validate_label_key,
    validate_label_value,
)
from ansible_operator_sandbox.selectors import parse_field_selector

LABELS = {
    "app": "web",
    "tier": "front",
    "env": "prod",
    "replicas": "3",
    "example.com/team": "core",
    "empty": "",
}

# (selector, matches LABELS?)
LABEL_CASES = [
    ("", True),
    ("   ", True),
    ("app=web", True),
    ("app==web", True),
    ("app=db", False),
    ("app!=db", True),
    ("app!=web", False),
    ("missing!=x", True),  # != also matches when the label is absent
    ("app in (web,db)", True),
    ("app in (db, cache)", False),
    ("app notin (db,cache)", True),
    ("app notin (web)", False),
    ("missing notin (x)", True),
    ("missing in (x)", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("app=web,tier=front", True),
    ("app=web,tier=back", False),
    ("  app = web ,  tier in ( front , back ) , !missing  ", True),
    ("example.com/team=core", True),
    ("empty=", True),
    ("empty in ()", True),
    ("empty in (,x)", True),
    ("app in (,x)", False),
    ("replicas>2", True),
    ("replicas>3", False),
    ("replicas<4", True),
    ("app>1", False),  # non-integer label value never matches Gt/Lt
    ("missing<5", False),
    ("app=web,app!=db,app in (web),app notin (x),app,!nope", True),
    ("in=x", False),  # "in" is an ordinary key when it comes first
]


@pytest.mark.parametrize(("selector", "expected"), LABEL_CASES)
def test_label_selector_semantics(selector: str, expected: bool) -> None:
    assert parse_label_selector(selector)(LABELS) is expected


def test_label_selector_none_matches_everything_and_none_labels() -> None:
    assert parse_label_selector(None)({}) is True
    assert parse_label_selector("!a")(None) is True  # type: ignore[arg-type]
    assert parse_label_selector("a")(None) is False  # type: ignore[arg-type]


LABEL_ERRORS = [
    ("app=web=x", "found '=', expected: ',' or 'end of string'"),
    ("app=web,", "found '', expected: identifier after ','"),
    ("app=web,,tier", "found ',', expected: identifier after ','"),
    (",app", "found ',', expected: !, identifier, or 'end of string'"),
    ("(app)", "found '(', expected: !, identifier, or 'end of string'"),
    ("app in web", "unable to parse requirement: found 'web' expected: '('"),
    ("app in (web", "unable to parse requirement: found '', expected: ',' or ')'"),
    ("app in (web db)", "unable to parse requirement: found 'db', expected: ',' or ')'"),
    ("app in", "unable to parse requirement: found '' expected: '('"),
    ("app foo", "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt"),
    ("app=(x)", "unable to parse requirement: found '(', expected: identifier"),
    ("!app=web", "found '=', expected: ',' or 'end of string'"),
    ("!", "unable to parse requirement: found '', expected: identifier"),
    ("app=web tier=front", "found 'tier', expected: ',' or 'end of string'"),
    ("bad key=x", "unable to parse requirement: found 'key', expected: in, notin, =, ==, !=, gt, lt"),
    (
        "-bad=x",
        'unable to parse requirement: key: Invalid value: "-bad": name part must consist of alphanumeric',
    ),
    ("a/b/c=x", 'unable to parse requirement: key: Invalid value: "a/b/c": a qualified name must consist of'),
    ("Example.com/x=y", 'key: Invalid value: "Example.com/x": prefix part a lowercase RFC 1123 subdomain'),
    ("/x=y", 'key: Invalid value: "/x": prefix part must be non-empty'),
    ("x/=y", 'key: Invalid value: "x/": name part must be non-empty'),
    ("a" * 64 + "=x", "name part must be no more than 63 characters"),
    (
        "app=-web",
        (
            'unable to parse requirement: values[0][app]: Invalid value: "-web": a valid label must be an '
            "empty string or consist of alphanumeric characters"
        ),
    ),
    (
        "app=" + "v" * 64,
        'values[0][app]: Invalid value: "' + "v" * 64 + '": must be no more than 63 characters',
    ),
    ("app in (ok,bad!)", "unable to parse requirement: found '!', expected: ',' or ')'"),
    ("replicas>x", "values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"),
    ("replicas>", "values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer"),
]


@pytest.mark.parametrize(("selector", "fragment"), LABEL_ERRORS)
def test_label_selector_errors(selector: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_label_selector(selector)
    assert fragment in str(info.value)
    assert info.value.code == 400 and info.value.reason == "BadRequest"


def test_label_key_and_value_validators() -> None:
    validate_label_key("app.kubernetes.io/name")
    validate_label_key("a")
    validate_label_value("k", "")
    validate_label_value("k", "v1.2_3-x")
    with pytest.raises(SelectorError, match=r'^key: Invalid value: "a b"'):
        validate_label_key("a b")
    with pytest.raises(SelectorError, match=r'^values\[2\]\[k\]: Invalid value: "x y"'):
        validate_label_value("k", "x y", 2)


# --------------------------------------------------------------------------------------------------
# metav1.LabelSelector


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, True),
        (None, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "web", "tier": "back"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "nope", "operator": "DoesNotExist", "values": []}]}, True),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["prod"]},
                    {"key": "gone", "operator": "DoesNotExist"},
                ],
            },
            True,
        ),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}],
            },
            False,
        ),
    ],
)
def test_label_selector_from_dict(selector: dict[str, Any] | None, expected: bool) -> None:
    assert label_selector_from_dict(selector)(LABELS) is expected


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["x"]}]},
            '"Equals" is not a valid label selector operator',
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn"}]},
            "for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "values set must be empty for exists and does not exist",
        ),
        ({"matchExpressions": [{"operator": "Exists"}]}, "matchExpressions[0].key: Required value"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}, "must be a list of strings"),
        ({"matchExpressions": {"key": "a"}}, "matchExpressions: Invalid value: must be a list"),
        ({"matchLabels": {"a": 1}}, "keys and values must be strings"),
        ({"matchLabels": ["a"]}, "must be a map"),
        ({"matchLabels": {"bad key": "x"}}, 'key: Invalid value: "bad key"'),
        ({"matchLabels": {"a": "bad value"}}, 'values[0][a]: Invalid value: "bad value"'),
        ({"matchLabel": {"a": "b"}}, "unknown field(s) matchLabel"),
        ("app=web", "expected an object"),
    ],
)
def test_label_selector_from_dict_errors(selector: Any, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        label_selector_from_dict(selector)
    assert fragment in str(info.value)


# --------------------------------------------------------------------------------------------------
# field selectors

EVENT = {
    "metadata": {"name": "ev1", "namespace": "default"},
    "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default"},
    "reason": "Started",
    "type": "Normal",
    "count": 2,
}
POD = {
    "metadata": {"name": "web-1", "namespace": "apps"},
    "spec": {"nodeName": "", "hostNetwork": False},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "obj", "expected"),
    [
        (None, EVENT, True),
        ("", EVENT, True),
        ("metadata.name=ev1", EVENT, True),
        ("metadata.name==ev1", EVENT, True),
        ("metadata.name!=ev1", EVENT, False),
        ("metadata.namespace=default,type=Normal", EVENT, True),
        ("metadata.namespace=default,type=Warning", EVENT, False),
        ("involvedObject.name=web-1,involvedObject.kind=Pod", EVENT, True),
        ("involvedObject.uid=", EVENT, True),  # unset field compares as ""
        ("involvedObject.uid!=", EVENT, False),
        ("count=2", EVENT, True),
        ("status.phase=Running", POD, True),
        ("status.phase!=Running", POD, False),
        ("spec.nodeName=", POD, True),
        ("spec.hostNetwork=false", POD, True),
        ("reason=a\\,b", {"reason": "a,b"}, True),
        ("reason=a\\=b", {"reason": "a=b"}, True),
        ("reason=a\\\\b", {"reason": "a\\b"}, True),
        ("metadata.name=ev1,", EVENT, True),  # empty terms are skipped
    ],
)
def test_field_selector_semantics(selector: str | None, obj: dict, expected: bool) -> None:
    assert parse_field_selector(selector)(obj) is expected


@pytest.mark.parametrize(
    ("selector", "allowed", "message"),
    [
        ("metadata.name", None, "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("a=b,c", None, "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("a=b=c", None, "invalid field selector: unescaped character in value: ="),
        ("a=b\\x", None, "invalid field selector: invalid escape sequence: \\x"),
        ("a=b\\", None, "invalid field selector: invalid escape sequence: \\"),
        (
            "spec.nodeName=n1",
            {"metadata.name", "metadata.namespace"},
            "field label not supported: spec.nodeName",
        ),
        ("metadata.name =x", {"metadata.name"}, "field label not supported: metadata.name "),
    ],
)
def test_field_selector_errors(selector: str, allowed: set[str] | None, message: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_field_selector(selector, allowed)
    assert str(info.value) == message


def test_field_selector_with_allowed_set() -> None:
    allowed = {"metadata.name", "metadata.namespace", "status.phase", "spec.nodeName"}
    match = parse_field_selector("status.phase!=Failed,metadata.namespace=apps", allowed)
    assert match(POD) is True
    assert match({**POD, "metadata": {"name": "x", "namespace": "other"}}) is False
