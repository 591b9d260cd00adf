"""Label and field selectors with kube-apiserver's grammar, semantics and error messages.

Why: list/watch calls from kopf, ``kubernetes.core.k8s_info`` (``label_selectors``,
``field_selectors``) and ``kubectl get -l`` must filter exactly as a real cluster does, and a
malformed selector must fail with the apiserver's 400 message rather than silently match all.

* :func:`parse_label_selector` — ``k8s.io/apimachinery/pkg/labels.Parse``: ``=``, ``==``, ``!=``,
  ``in (a,b)``, ``notin (a,b)``, ``key`` (exists), ``!key`` (does not exist), ``key>3``/``key<3``
  (integer comparisons), comma = AND. Keys and values are validated like label keys and values.
* :func:`parse_field_selector` — ``fields.ParseSelector``: ``=``, ``==``, ``!=`` on dotted paths,
  backslash escapes (``\\,`` ``\\=`` ``\\\\``); a missing field compares as ``""``.
* :func:`label_selector_from_dict` — ``metav1.LabelSelector`` (``matchLabels`` /
  ``matchExpressions``), as in Deployment selectors and watches.yaml ``selector``.

Each returns a predicate; invalid input raises :class:`SelectorError` (→ 400 BadRequest).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SelectorError",
    "parse_label_selector",
    "parse_field_selector",
    "label_selector_from_dict",
    "validate_label_key",
    "validate_label_value",
]

LabelPredicate = Callable[[dict[str, str]], bool]
ObjectPredicate = Callable[[dict], bool]


class SelectorError(ValueError):
    """A selector that does not parse or validate; the message is the apiserver's."""

    code = 400
    reason = "BadRequest"


# --------------------------------------------------------------------------------------------------
# label key / value validation (k8s.io/apimachinery/pkg/util/validation)

_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(f"^{_NAME_FMT}$")
_VALUE_FMT = f"({_NAME_FMT})?"
_VALUE_RE = re.compile(f"^{_VALUE_FMT}$")
_DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _key_problems(key: str) -> list[str]:
    """``IsQualifiedName``: ``[prefix/]name`` with a DNS-subdomain prefix."""
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
        prefix = None
    elif len(parts) == 2:
        prefix, name = parts
    else:
        return [
            (
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
                f"used for validation is '{_NAME_FMT}') with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')"
            )
        ]
    problems: list[str] = []
    if prefix is not None:
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                problems.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN_RE.match(prefix):
                problems.append(
                    "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                    "characters, '-' or '.', and must start and end with an alphanumeric character "
                    "(e.g. 'example.com', regex used for validation is "
                    f"'{_DNS1123_SUBDOMAIN_FMT}')"
                )
    if not name:
        problems.append("name part must be non-empty")
    else:
        if len(name) > 63:
            problems.append("name part must be no more than 63 characters")
        if not _NAME_RE.match(name):
            problems.append(
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', "
                f"regex used for validation is '{_NAME_FMT}')"
            )
    return problems


def _value_problems(value: str) -> list[str]:
    problems: list[str] = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if not _VALUE_RE.match(value):
        problems.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
            "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
            f"'my_value',  or '12345', regex used for validation is '{_VALUE_FMT}')"
        )
    return problems


def validate_label_key(key: str, field: str = "key") -> None:
    """Raise :class:`SelectorError` unless ``key`` is a valid label key."""
    problems = _key_problems(key)
    if problems:
        raise SelectorError(f"{field}: Invalid value: {_q(key)}: {'; '.join(problems)}")


def validate_label_value(key: str, value: str, index: int = 0) -> None:
    """Raise :class:`SelectorError` unless ``value`` is a valid label value."""
    problems = _value_problems(value)
    if problems:
        raise SelectorError(f"values[{index}][{key}]: Invalid value: {_q(value)}: {'; '.join(problems)}")


# --------------------------------------------------------------------------------------------------
# requirements


@dataclass(frozen=True)
class _Requirement:
    key: str
    operator: str  # in notin = == != exists !  gt lt
    values: tuple[str, ...]

    def matches(self, labels: dict[str, str]) -> bool:
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

    def matches(labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in reqs)

    matches.requirements = reqs  # type: ignore[attr-defined]  # handy for debugging / tests
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


def label_selector_from_dict(sel: dict | None) -> LabelPredicate:
    """``metav1.LabelSelectorAsSelector``: ``{matchLabels: {...}, matchExpressions: [{key, operator,
    values}]}``. An empty dict (and ``None``) selects everything."""
    if sel is None:
        return _selector([])
    if not isinstance(sel, dict):
        raise SelectorError(f"invalid label selector: expected an object, got {type(sel).__name__}")
    unknown = set(sel) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise SelectorError(
            f"invalid label selector: unknown field(s) {', '.join(sorted(unknown))}; "
            "expected matchLabels and/or matchExpressions"
        )
    reqs: list[_Requirement] = []
    match_labels = sel.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
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


# --------------------------------------------------------------------------------------------------
# field selectors (fields.ParseSelector)


def _split_unescaped(s: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            cur.append(s[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split at the first ``!=``, ``==`` or ``=`` (checked in that order at each position); like the
    apiserver, the left-hand side knows no escaping and is not trimmed."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    return None


def _unescape(value: str) -> str:
    r"""``fields.UnescapeValue``: only ``\\``, ``\,`` and ``\=`` are escapes; bare ``,``/``=`` are errors."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            if i + 1 >= len(value):
                raise SelectorError("invalid field selector: invalid escape sequence: \\")
            nxt = value[i + 1]
            if nxt not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{nxt}")
            out.append(nxt)
            i += 2
            continue
        if ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ch}")
        out.append(ch)
        i += 1
    return "".join(out)


def _field_string(obj: dict, path: str) -> str:
    """The object's value at dotted ``path`` as the apiserver's field set renders it ("" if unset)."""
    cur: Any = obj
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return ""
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if isinstance(cur, (dict, list)):
        return json.dumps(cur, sort_keys=True, separators=(",", ":"))
    return str(cur)


def parse_field_selector(s: str | None, allowed: set[str] | None = None) -> ObjectPredicate:
    """Parse a ``fieldSelector`` query string into ``predicate(obj) -> bool``.

    ``allowed`` is the set of field labels the resource supports (the server's per-kind table);
    ``None`` allows any dotted path. A field outside ``allowed`` raises
    ``SelectorError('field label not supported: <field>')``.
    """
    if s is None or not s.strip():
        return lambda obj: True
    terms: list[tuple[str, str, str]] = []
    for part in _split_unescaped(s, ","):
        if part == "":
            continue
        split = _split_term(part)
        if split is None:
            raise SelectorError(f"invalid selector: '{s}'; can't understand '{part}'")
        field, op, raw = split
        if allowed is not None and field not in allowed:
            raise SelectorError(f"field label not supported: {field}")
        terms.append((field, op, _unescape(raw)))

    def matches(obj: dict) -> bool:
        for field, op, value in terms:
            actual = _field_string(obj or {}, field)
            if (actual == value) != (op in ("=", "==")):
                return False
        return True

    return matches


def matches_label_selector(selector: Any, labels: dict[str, Any]) -> bool:
    """A ``metav1.LabelSelector`` object against labels: an empty selector selects everything, none
    nothing."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
