"""Turn the fault suite's JSON figures into the Markdown table of docs/explanation/faults.md.

    FAULTS_SUMMARY=/tmp/faults.json python -m pytest -n 0 tests/faults
    python tests/faults/summary.py /tmp/faults.json

One row per passed test, then the totals. Columns are the figures the tests record (see each test's
``figures.update``); an empty cell means the test does not measure that figure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

COLUMNS = [
    ("kills", ("kills", "api_server_kills", "etcd_kills", "leader_kills")),
    ("restarts / takeovers", ("restarts", "api_server_restarts", "etcd_restarts", "lease_takeovers")),
    ("network cuts", ("cuts",)),
    ("410 Expired", ("expired_410",)),
    ("re-lists", ("relists",)),
    ("429 Too Many Requests", ("throttled_429",)),
    ("CRs", ("crs",)),
    ("stuck CRs", ("stuck_crs",)),
    ("orphan processes", ("orphan_processes",)),
    ("overlapping side effects", ("overlapping_side_effects",)),
    ("false status claims", ("false_status_claims",)),
    ("secret occurrences", ("secret_occurrences",)),
    ("hostile CRs refused", ("refused",)),
    ("forged log lines", ("forged_log_lines",)),
]


def cell(fig: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    values = [fig[k] for k in keys if isinstance(fig.get(k), int) and not isinstance(fig.get(k), bool)]
    return sum(values) if values else None


def table(figures: dict[str, dict[str, Any]]) -> str:
    lines = ["| test | " + " | ".join(name for name, _ in COLUMNS) + " |",
             "| --- |" + " ---: |" * len(COLUMNS)]
    totals: list[int] = [0] * len(COLUMNS)
    for test in sorted(figures):
        fig = figures[test]
        cells = []
        for i, (_, keys) in enumerate(COLUMNS):
            value = cell(fig, keys)
            cells.append("" if value is None else str(value))
            totals[i] += value or 0
        lines.append(f"| `{test}` | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"**{t}**" for t in totals) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(table(json.loads(Path(argv[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
