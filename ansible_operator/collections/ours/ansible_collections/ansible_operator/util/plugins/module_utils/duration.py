# -*- coding: utf-8 -*-
# Apache-2.0 (see the project's LICENSE)
"""Go ``time.ParseDuration`` strings ("30s", "1m30s", "1.5h") for ``requeue_after``.

Modules run in their own interpreter and may not be able to import the ``ansible_operator`` package,
so this is a self-contained copy of the rules in ``ansible_operator/durations.py``: a sequence of
numbers with units ns/us/µs/ms/s/m/h, or a plain number meaning seconds; negative values refused.
"""

from __future__ import absolute_import, division, print_function

import math
import re

__metaclass__ = type

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    u"\u00b5s": 1e-6,
    u"\u03bcs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(u"(\\d+(?:\\.\\d*)?|\\.\\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_NUMBER = re.compile(r"\+?(\d+(?:\.\d*)?|\.\d+)")


def parse_duration(text):
    """Seconds (float) for a Go duration or a plain number; ``ValueError`` quoting the input otherwise."""
    if isinstance(text, bool):
        raise ValueError("invalid duration {0!r}: expected e.g. '30s', '10m', '1h30m'".format(text))
    if isinstance(text, (int, float)):
        value = float(text)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError("invalid duration {0!r}: must be a finite number of seconds >= 0".format(text))
        return value
    if not isinstance(text, str):
        raise ValueError("invalid duration {0!r}: expected a string such as '30s' or '1h30m'".format(text))
    s = text.strip()
    if s.startswith("-"):
        raise ValueError("invalid duration {0!r}: negative durations are not allowed".format(text))
    if _NUMBER.fullmatch(s):
        return float(s.lstrip("+"))
    body = s[1:] if s.startswith("+") else s
    pos = 0
    total = 0.0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body or pos != len(body):
        raise ValueError(
            "invalid duration {0!r}: expected numbers with units ns, us, ms, s, m, h"
            " (e.g. '300ms', '1.5h', '2h45m') or a plain number of seconds".format(text)
        )
    return total
