"""Go-style duration strings ("1h30m", "500ms", "1m0s") as used by Operator SDK's watches.yaml.

Operator SDK parses ``reconcilePeriod`` with Go's ``time.ParseDuration`` (via ``metav1.Duration``), so
a watches.yaml written for it uses that syntax. We accept the same syntax, plus plain numbers meaning
seconds (YAML ``reconcilePeriod: 30`` is an obvious intent that Go would reject). Negative durations
make no sense for any of our settings and are refused.
"""

from __future__ import annotations

import math
import re

__all__ = ["parse_duration", "format_duration"]

_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5 micro sign
    "μs": 1e-6,  # U+03BC greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+]?(\d+(?:\.\d*)?|\.\d+)")


def parse_duration(text: str | int | float) -> float:
    """Return seconds for a Go duration (``"1h30m"``, ``"10s"``, ``"1.5h"``) or a plain number of seconds.

    Raises ``ValueError`` with a message that quotes the input and shows the accepted syntax.
    """
    if isinstance(text, bool):
        raise ValueError(
            f"invalid duration {text!r}: expected e.g. '30s', '10m', '1h30m' or a number of seconds"
        )
    if isinstance(text, (int, float)):
        value = float(text)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ValueError(f"invalid duration {text!r}: must be a finite number of seconds >= 0")
        return value
    if not isinstance(text, str):
        raise ValueError(f"invalid duration {text!r}: expected a string such as '30s', '10m' or '1h30m'")
    s = text.strip()
    if s.startswith("-"):
        raise ValueError(f"invalid duration {text!r}: negative durations are not allowed")
    if _NUMBER.fullmatch(s):
        return float(s)
    body = s[1:] if s.startswith("+") else s
    pos = 0
    total = 0.0
    while pos < len(body):
        m = _PART.match(body, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not body or pos != len(body):
        raise ValueError(
            f"invalid duration {text!r}: expected a sequence of numbers with units ns, us, ms, s, m, h"
            " (e.g. '300ms', '1.5h', '2h45m') or a plain number of seconds"
        )
    return total


def format_duration(seconds: float) -> str:
    """Render seconds the way Go prints a ``time.Duration`` (``1h30m0s``, ``500ms``); for logs and docs."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        ms = seconds * 1000
        return f"{ms:g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    out += f"{secs:g}s"
    return out
