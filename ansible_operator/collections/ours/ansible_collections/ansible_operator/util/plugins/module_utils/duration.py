# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)
"""Go duration strings ("30s", "1m30s", "1.5h"): the one implementation, for the operator and the modules.

Operator SDK parses ``reconcilePeriod`` and ``requeue_after``'s ``time`` with Go's ``time.ParseDuration``.
:func:`go_duration_ns` is that function transcribed (same grammar, same integer nanosecond arithmetic, same
int64 overflow limit); ``tests/unit/test_durations.py`` checks it against values recorded from Go itself.
:func:`parse_duration` adds the operator's rules on top: a plain number (or numeric string) means seconds,
negative durations are refused, surrounding whitespace is ignored.

This file is the only copy. ``requeue_after`` imports it as collection module_utils (AnsiballZ ships it with
the module, which may run where the ``ansible_operator`` package is not importable), and the operator
imports the same file through ``ansible_operator.durations``. Keep it self-contained: standard library only.
"""

from __future__ import absolute_import, annotations, division, print_function

import math
import re

__metaclass__ = type

_UNITS = {
    "ns": 1,
    "us": 1000,
    u"\u00b5s": 1000,  # micro sign
    u"\u03bcs": 1000,  # greek mu
    "ms": 1000 * 1000,
    "s": 1000 * 1000 * 1000,
    "m": 60 * 1000 * 1000 * 1000,
    "h": 60 * 60 * 1000 * 1000 * 1000,
}
_LIMIT = 1 << 63  # Go's time.Duration is an int64 of nanoseconds
_NUMBER = re.compile(r"\+?(\d+(?:\.\d*)?|\.\d+)")
_RANGE = "out of range (more than 2562047h47m16.854775807s)"
_SYNTAX = "expected a sequence of numbers with units ns, us, ms, s, m, h (e.g. '300ms', '1.5h', '2h45m')"


def _digit(c: str) -> bool:
    return "0" <= c <= "9"


def go_duration_ns(text: str) -> int:
    """Nanoseconds (int, may be negative) for a Go duration, as Go's ``time.ParseDuration`` returns them.

    Raises ``ValueError`` where Go returns an error; its message is the reason when there is a specific one
    (unknown or missing unit, out of range), else empty.
    """
    s = text
    neg = False
    if s and s[0] in "+-":
        neg = s[0] == "-"
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError("")
    total = 0
    while s:
        if not (s[0] == "." or _digit(s[0])):
            raise ValueError("")
        i = 0
        whole = 0
        while i < len(s) and _digit(s[i]):
            whole = whole * 10 + ord(s[i]) - ord("0")
            if whole > _LIMIT:
                raise ValueError(_RANGE)
            i += 1
        pre = i > 0
        post = False
        frac, scale = 0, 1.0
        if i < len(s) and s[i] == ".":
            i += 1
            start, overflow = i, False
            while i < len(s) and _digit(s[i]):
                if not overflow:
                    if frac > (_LIMIT - 1) // 10 or frac * 10 + ord(s[i]) - ord("0") > _LIMIT:
                        overflow = True  # Go ignores digits beyond int64 precision
                    else:
                        frac = frac * 10 + ord(s[i]) - ord("0")
                        scale *= 10
                i += 1
            post = i > start
        if not pre and not post:
            raise ValueError("")
        s = s[i:]
        i = 0
        while i < len(s) and not (s[i] == "." or _digit(s[i])):
            i += 1
        if i == 0:
            raise ValueError("missing unit")
        unit = _UNITS.get(s[:i])
        if unit is None:
            raise ValueError("unknown unit {0!r}".format(s[:i]))
        s = s[i:]
        if whole > _LIMIT // unit:
            raise ValueError(_RANGE)
        value = whole * unit
        if frac > 0:
            value += int(float(frac) * (float(unit) / scale))
            if value > _LIMIT:
                raise ValueError(_RANGE)
        total += value
        if total > _LIMIT:
            raise ValueError(_RANGE)
    if neg:
        return -total
    if total > _LIMIT - 1:
        raise ValueError(_RANGE)
    return total


def parse_duration(text: object) -> float:
    """Seconds (float) for a Go duration (``"1h30m"``, ``"10s"``, ``"1.5h"``) or a plain number of seconds.

    Raises ``ValueError`` with a message that quotes the input and shows the accepted syntax.
    """
    if isinstance(text, bool):
        raise ValueError("invalid duration {0!r}: expected e.g. '30s', '10m', '1h30m' or a number of seconds"
                         .format(text))
    if isinstance(text, (int, float)):
        value = float(text)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError("invalid duration {0!r}: must be a finite number of seconds >= 0".format(text))
        return value
    if not isinstance(text, str):
        raise ValueError(
            "invalid duration {0!r}: expected a string such as '30s', '10m' or '1h30m'".format(text)
        )
    s = text.strip()
    if _NUMBER.fullmatch(s):
        return float(s.lstrip("+"))
    try:
        ns = go_duration_ns(s)
    except ValueError as exc:
        reason = "{0}; ".format(exc) if str(exc) else ""
        raise ValueError(
            "invalid duration {0!r}: {1}{2} or a plain number of seconds".format(text, reason, _SYNTAX)
        ) from None
    if ns < 0:
        raise ValueError("invalid duration {0!r}: negative durations are not allowed".format(text))
    return ns / 1e9
