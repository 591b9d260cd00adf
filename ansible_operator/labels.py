"""Kubernetes labels: key and value validation and label selectors, with apimachinery's grammar and messages.

The runner's copy, for a watch's ``selector`` (watches.yaml). The sandbox API server (a distribution of
its own, which the runner never imports) keeps its own copy; each is held to the real API server, not to
the other.

* :func:`qualified_name_errors`, :func:`label_value_errors` — ``k8s.io/apimachinery/pkg/util/validation``
  ``IsQualifiedName`` / ``IsValidLabelValue``: the detail strings of a bad key or value, word for word.
* :func:`parse_label_selector` — ``k8s.io/apimachinery/pkg/labels.Parse``: ``=``, ``==``, ``!=``,
  ``in (a,b)``, ``notin (a,b)``, ``key`` (exists), ``!key`` (does not exist), ``key>3``/``key<3``
  (integer comparisons), comma = AND. Keys and values are validated like label keys and values.
* :func:`label_selector_from_dict` — ``metav1.LabelSelectorAsSelector`` (``matchLabels`` /
  ``matchExpressions``), as in Deployment selectors and watches.yaml ``selector``.
* :func:`matches_label_selector` — a stored ``metav1.LabelSelector`` against labels, where no selector
  (or an invalid one) selects nothing.

Each parser returns a predicate; invalid input raises :class:`SelectorError` (the sandbox answers it with
400 BadRequest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ansible_operator.errors import OperatorError

__all__ = [
    "SelectorError",
    "LabelPredicate",
    "qualified_name_errors",
    "label_value_errors",
    "validate_label_key",
    "validate_label_value",
    "parse_label_selector",
    "label_selector_from_dict",
    "matches_label_selector",
]

LabelPredicate = Callable[[Mapping[str, str] | None], bool]


class SelectorError(OperatorError, ValueError):
    """A selector that does not parse or validate; the message is the apiserver's."""

    code = 400
    reason = "BadRequest"


# --------------------------------------------------------------------------------------------------
# label key / value validation (k8s.io/apimachinery/pkg/util/validation)

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME = re.compile(f"^{_QNAME_FMT}$")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_DNS1123_SUBDOMAIN_FMT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_QNAME_MAX = 63
_SUBDOMAIN_MAX = 253

_QNAME_ERR = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
              "alphanumeric character")
_QNAME_EXAMPLES = (
    f"(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{_QNAME_FMT}')"
)
_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{_DNS1123_SUBDOMAIN_FMT}')"
)
_LABEL_VALUE_ERR = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{_LABEL_VALUE_FMT}')"
)


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def qualified_name_errors(value: str) -> list[str]:
    """``validation.IsQualifiedName`` (``[prefix/]name`` with a DNS-subdomain prefix): the detail strings
    for a bad label or annotation key, empty when it is valid."""
    parts = value.split("/")
    errs: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > _SUBDOMAIN_MAX:
                errs.append(f"prefix part must be no more than {_SUBDOMAIN_MAX} characters")
            if not _DNS1123_SUBDOMAIN.match(prefix):
                errs.append(f"prefix part {_SUBDOMAIN_ERR}")
    else:
        return [
            f"a qualified name {_QNAME_ERR} {_QNAME_EXAMPLES} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
        return errs
    if len(name) > _QNAME_MAX:
        errs.append(f"name part must be no more than {_QNAME_MAX} characters")
    if not _QNAME.match(name):
        errs.append(f"name part {_QNAME_ERR} {_QNAME_EXAMPLES}")
    return errs


def label_value_errors(value: str) -> list[str]:
    """``validation.IsValidLabelValue``: the detail strings for a bad label value, empty when valid."""
    errs: list[str] = []
    if len(value) > _QNAME_MAX:
        errs.append(f"must be no more than {_QNAME_MAX} characters")
    if not _LABEL_VALUE.match(value):
        errs.append(_LABEL_VALUE_ERR)
    return errs


def validate_label_key(key: str, field: str = "key") -> None:
    """Raise :class:`SelectorError` unless ``key`` is a valid label key."""
    problems = qualified_name_errors(key)
    if problems:
        raise SelectorError(f"{field}: Invalid value: {_q(key)}: {'; '.join(problems)}")


def validate_label_value(key: str, value: str, index: int = 0) -> None:
    """Raise :class:`SelectorError` unless ``value`` is a valid label value."""
    problems = label_value_errors(value)
    if problems:
        raise SelectorError(f"values[{index}][{key}]: Invalid value: {_q(value)}: {'; '.join(problems)}")


# --------------------------------------------------------------------------------------------------
# requirements


@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str  # in notin = == != exists !  gt lt
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        op = self.operator
        if op in ("in", "=", "=="):
            return present and labels[self.key] in self.values
        if op in ("notin", "!="):
            return not present or labels[self.key] not in self.values
        if op == "exists":
            return present
        if op == "!":
            return not present
        if op in ("gt", "lt"):
            if not present:
                return False
            try:
                have = int(labels[self.key])
            except (TypeError, ValueError):
                return False
            want = int(self.values[0])
            return have > want if op == "gt" else have < want
        return False


def _new_requirement(key: str, op: str, values: Iterable[str]) -> _Requirement:
    """``labels.NewRequirement``: validate the key, the value count for the operator, and values."""
    validate_label_key(key)
    vals = sorted(set(values))
    if op in ("in", "notin"):
        if not vals:
            raise SelectorError(
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
            )
    elif op in ("=", "==", "!="):
        if len(vals) != 1:
            raise SelectorError(
                f"values: Invalid value: {json.dumps(vals)}: exact-match compatibility requires one "
                "single value"
            )
    elif op in ("exists", "!"):
        if vals:
            raise SelectorError(
                f"values: Invalid value: {json.dumps(vals)}: values set must be empty for exists and "
                "does not exist"
            )
    elif op in ("gt", "lt"):
        if len(vals) != 1:
            raise SelectorError(
                f"values: Invalid value: {json.dumps(vals)}: for 'Gt', 'Lt' operators, exactly one "
                "value is required"
            )
        if not re.fullmatch(r"[+-]?\d+", vals[0]):
            raise SelectorError(
                f"values[0]: Invalid value: {_q(vals[0])}: for 'Gt', 'Lt' operators, the value must "
                "be an integer"
            )
    else:
        raise SelectorError(f"operator: Unsupported value: {_q(op)}")
    for i, v in enumerate(vals):
        validate_label_value(key, v, i)
    return _Requirement(key, op, tuple(vals))


def _selector(requirements: list[_Requirement]) -> LabelPredicate:
    reqs = tuple(requirements)

    def matches(labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in reqs)

    return matches


# --------------------------------------------------------------------------------------------------
# label selector string parser (a port of labels.Parser)

_SPECIAL = "=!(),><"
_OPERATORS_IN_ORDER = ("!=", "==", "=", "!", "(", ")", ",", ">", "<")
_TOKEN_NAMES = {
    "!=": "NEQ",
    "==": "DEQ",
    "=": "EQ",
    "!": "NOT",
    "(": "OPEN",
    ")": "CLOSE",
    ",": "COMMA",
    ">": "GT",
    "<": "LT",
}


def _lex(s: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch.isspace():
            i += 1
            continue
        if ch in _SPECIAL:
            for op in _OPERATORS_IN_ORDER:
                if s.startswith(op, i):
                    tokens.append((_TOKEN_NAMES[op], op))
                    i += len(op)
                    break
            continue
        j = i
        while j < n and not s[j].isspace() and s[j] not in _SPECIAL:
            j += 1
        word = s[i:j]
        tokens.append(("ID", word))
        i = j
    tokens.append(("END", ""))
    return tokens


class _LabelParser:
    def __init__(self, s: str) -> None:
        self.tokens = _lex(s)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def take(self) -> tuple[str, str]:
        tok = self.tokens[self.pos]
        if tok[0] != "END":
            self.pos += 1
        return tok

    def parse(self) -> list[_Requirement]:
        reqs: list[_Requirement] = []
        while True:
            kind, lit = self.peek()
            if kind in ("ID", "NOT"):
                try:
                    reqs.append(self.requirement())
                except SelectorError as exc:
                    raise SelectorError(f"unable to parse requirement: {exc}") from None
                kind, lit = self.take()
                if kind == "END":
                    return reqs
                if kind == "COMMA":
                    nxt, nlit = self.peek()
                    if nxt not in ("ID", "NOT"):
                        raise SelectorError(f"found '{nlit}', expected: identifier after ','")
                    continue
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            if kind == "END":
                return reqs
            raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def requirement(self) -> _Requirement:
        op: str | None = None
        kind, lit = self.take()
        if kind == "NOT":
            op = "!"
            kind, lit = self.take()
        if kind != "ID":
            raise SelectorError(f"found '{lit}', expected: identifier")
        key = lit
        validate_label_key(key)
        nxt, _ = self.peek()
        if op == "!" or nxt in ("END", "COMMA"):
            # "!key" ends the requirement whatever follows; parse() then complains about the rest.
            return _new_requirement(key, op or "exists", [])
        kind, lit = self.take()
        if kind == "ID" and lit in ("in", "notin") or kind in ("EQ", "DEQ", "NEQ"):
            op = lit
        elif kind == "GT":
            op = "gt"
        elif kind == "LT":
            op = "lt"
        else:
            raise SelectorError(f"found '{lit}', expected: in, notin, =, ==, !=, gt, lt")
        if op in ("in", "notin"):
            return _new_requirement(key, op, self.value_set())
        return _new_requirement(key, op, self.exact_value())

    def value_set(self) -> list[str]:
        kind, lit = self.take()
        if kind != "OPEN":
            raise SelectorError(f"found '{lit}' expected: '('")
        kind, lit = self.peek()
        if kind == "CLOSE":
            self.take()
            return [""]
        if kind not in ("ID", "COMMA"):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        # parseIdentifiersList: "(a,,b)", "(,a)" and "(a,)" carry an empty value, as in k8s.
        values: list[str] = []
        while True:
            kind, lit = self.take()
            if kind == "ID":
                values.append(lit)
                nxt, nlit = self.peek()
                if nxt == "COMMA":
                    continue
                if nxt == "CLOSE":
                    self.take()
                    return values
                raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            if kind == "COMMA":
                if not values:
                    values.append("")
                nxt, _ = self.peek()
                if nxt == "CLOSE":
                    values.append("")
                    self.take()
                    return values
                if nxt == "COMMA":
                    self.take()
                    values.append("")
                continue
            raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def exact_value(self) -> list[str]:
        kind, lit = self.peek()
        if kind in ("END", "COMMA"):
            return [""]
        kind, lit = self.take()
        if kind == "ID":
            return [lit]
        raise SelectorError(f"found '{lit}', expected: identifier")


def parse_label_selector(s: str | None) -> LabelPredicate:
    """Parse a ``labelSelector`` query string into ``predicate(labels) -> bool``.

    ``None``/empty selects everything. Requirements are ANDed. Raises :class:`SelectorError`.
    """
    if s is None or not s.strip():
        return _selector([])
    return _selector(_LabelParser(s).parse())


# --------------------------------------------------------------------------------------------------
# metav1.LabelSelector

_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelPredicate:
    """``metav1.LabelSelectorAsSelector``: ``{matchLabels: {...}, matchExpressions: [{key, operator,
    values}]}``. An empty dict (and ``None``) selects everything."""
    if sel is None:
        return _selector([])
    if not isinstance(sel, Mapping):
        raise SelectorError(f"invalid label selector: expected an object, got {type(sel).__name__}")
    unknown = set(sel) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise SelectorError(
            f"invalid label selector: unknown field(s) {', '.join(sorted(unknown))}; "
            "expected matchLabels and/or matchExpressions"
        )
    reqs: list[_Requirement] = []
    match_labels = sel.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("matchLabels: Invalid value: must be a map of string keys and values")
    for key, value in match_labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise SelectorError(
                f"matchLabels: Invalid value: {key}={value!r}: keys and values must be strings"
            )
        reqs.append(_new_requirement(key, "=", [value]))
    exprs = sel.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError("matchExpressions: Invalid value: must be a list")
    for i, expr in enumerate(exprs):
        if not isinstance(expr, dict):
            raise SelectorError(f"matchExpressions[{i}]: Invalid value: must be an object")
        operator = expr.get("operator")
        if operator not in _EXPR_OPS:
            raise SelectorError(f"{json.dumps(operator)} is not a valid label selector operator")
        key = expr.get("key")
        if not isinstance(key, str):
            raise SelectorError(f"matchExpressions[{i}].key: Required value")
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"matchExpressions[{i}].values: Invalid value: must be a list of strings")
        reqs.append(_new_requirement(key, _EXPR_OPS[operator], values))
    return _selector(reqs)


def matches_label_selector(selector: Any, labels: Mapping[str, Any]) -> bool:
    """A stored ``metav1.LabelSelector`` (a PodDisruptionBudget's, say) against labels: an empty selector
    selects everything; none, or one that does not convert (``LabelSelectorAsSelector`` fails), nothing."""
    if not isinstance(selector, dict):
        return False
    try:
        predicate = label_selector_from_dict(selector)
    except SelectorError:
        return False
    return predicate({k: v for k, v in labels.items() if isinstance(v, str)})
