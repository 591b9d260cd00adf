"""Field selectors with kube-apiserver's grammar, semantics and error messages.

Why: list/watch calls from kopf, ``kubernetes.core.k8s_info`` (``field_selectors``) and
``kubectl get --field-selector`` must filter exactly as a real cluster does, and a malformed selector must
fail with the apiserver's 400 message rather than silently match all.

* :func:`parse_field_selector` — ``fields.ParseSelector``: ``=``, ``==``, ``!=`` on dotted paths,
  backslash escapes (``\\,`` ``\\=`` ``\\\\``); a missing field compares as ``""``.

Label selectors (``labelSelector``, ``metav1.LabelSelector``) live in
:mod:`ansible_operator_sandbox.labels`; invalid input of either raises the same
:class:`~ansible_operator_sandbox.labels.SelectorError` (→ 400 BadRequest).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ansible_operator_sandbox.labels import SelectorError

__all__ = ["SelectorError", "parse_field_selector"]

ObjectPredicate = Callable[[dict], bool]


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
