"""Go duration parsing checked against Go itself.

GO_PARSE_DURATION is the output of Go 1.26's ``time.ParseDuration`` for each input, recorded by a throwaway
program (``for _, in := range inputs { d, err := time.ParseDuration(in); ... }``, printing ``int64(d)`` or
``err``): nanoseconds, or Go's error message. ``go_duration_ns`` must give exactly those nanoseconds and
refuse exactly those inputs; ``parse_duration`` is the same plus the operator's documented extensions.
"""

from __future__ import annotations

import sys

import pytest

from ansible_operator import durations
from ansible_operator.collections import COLLECTIONS_ROOT

GO_PARSE_DURATION: list[tuple[str, int | str]] = [
    ("1h30m", 5400000000000),
    ("1.5h", 5400000000000),
    ("300ms", 300000000),
    ("-1s", -1000000000),
    ("2h45m0.5s", 9900500000000),
    ("1µs", 1000),
    ("1μs", 1000),
    ("1us", 1000),
    ("1ns", 1),
    ("0", 0),
    ("", 'time: invalid duration ""'),
    ("1", 'time: missing unit in duration "1"'),
    ("1d", 'time: unknown unit "d" in duration "1d"'),
    ("+5m", 300000000000),
    (".5s", 500000000),
    ("5.s", 5000000000),
    ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
    ("9223372036854775807ns", 9223372036854775807),
    ("9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'),
    ("2562047h", 9223369200000000000),
    ("2562048h", 'time: invalid duration "2562048h"'),
    ("1h1h", 7200000000000),
    ("1m30s", 90000000000),
    ("30s", 30000000000),
    (" 30s", 'time: invalid duration " 30s"'),
    ("30s ", 'time: unknown unit "s " in duration "30s "'),
    ("1.000000001s", 1000000001),
    ("0.1ns", 0),
    ("1.9ns", 1),
    ("-0", 0),
    ("+0", 0),
    ("0s", 0),
    ("-", 'time: invalid duration "-"'),
    ("+", 'time: invalid duration "+"'),
    ("s", 'time: invalid duration "s"'),
    ("1S", 'time: unknown unit "S" in duration "1S"'),
    ("1H", 'time: unknown unit "H" in duration "1H"'),
    ("10m0s", 600000000000),
    ("1.5", 'time: missing unit in duration "1.5"'),
    ("100", 'time: missing unit in duration "100"'),
    ("+1.5m", 90000000000),
    ("1h-1m", 'time: unknown unit "h-" in duration "1h-1m"'),
]

# What the operator accepts beyond Go (docs/reference/watches.md): a plain number is seconds, whitespace is
# ignored.
OPERATOR_EXTENSIONS = {"0": 0.0, "1": 1.0, "1.5": 1.5, "100": 100.0, " 30s": 30.0, "30s ": 30.0}


@pytest.mark.parametrize(("text", "go"), GO_PARSE_DURATION)
def test_go_duration_ns_matches_go(text: str, go: int | str) -> None:
    if isinstance(go, str):
        with pytest.raises(ValueError):
            durations.go_duration_ns(text)
    else:
        assert durations.go_duration_ns(text) == go


@pytest.mark.parametrize(("text", "go"), GO_PARSE_DURATION)
def test_parse_duration_is_go_plus_extensions(text: str, go: int | str) -> None:
    if text in OPERATOR_EXTENSIONS:
        assert durations.parse_duration(text) == OPERATOR_EXTENSIONS[text]
    elif isinstance(go, str) or go < 0:
        with pytest.raises(ValueError, match="invalid duration"):
            durations.parse_duration(text)
    else:
        assert durations.parse_duration(text) == go / 1e9


def test_reasons_name_the_problem() -> None:
    with pytest.raises(ValueError, match="unknown unit 'd'"):
        durations.parse_duration("1d")
    with pytest.raises(ValueError, match="out of range"):
        durations.parse_duration("2562048h")
    with pytest.raises(ValueError, match="negative durations are not allowed"):
        durations.parse_duration("-1s")


def test_one_implementation_shared_with_the_collection() -> None:
    # requeue_after's module_utils is the file the operator's parser runs: no second copy to drift.
    path = COLLECTIONS_ROOT / "ansible_collections/ansible_operator/util/plugins/module_utils/duration.py"
    assert sys.modules[durations.parse_duration.__module__].__file__ == str(path)
    source = path.read_text()
    assert "import ansible_operator" not in source and "from ansible_operator" not in source
